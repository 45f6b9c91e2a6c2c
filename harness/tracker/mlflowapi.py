"""The one module that imports mlflow (the optional `mlflow` extra): a narrow, typed client of a tracking
server, for harness.tracker.export.

mlflow is imported when a `MlflowTracker` is made, never at the harness's import: without it the harness runs
as ever, and asking for an export says what to install (a ConfigError). Whatever the tracker answers with
(unreachable, a refused write) becomes a TrackerError naming the server; mypy sees mlflow as untyped
(pyproject.toml's override), so the types of this module's own surface are the ones that count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, TrackerError
from .trackfacts import RUNNING, Metric

INSTALL_HINT = "install it with: pip install 'harness[mlflow]' (the client, mlflow-skinny), or pip install mlflow"
# Unless the user set them: a tracker that does not answer is said so in seconds, not after mlflow's ~4
# minutes of retries, and mlflow does not print a "View run" line on our stdout for every run it ends.
QUIET_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
                  "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
# MLflow's limits per log_batch call (older servers do not split a batch themselves).
PARAMS_PER_BATCH, TAGS_PER_BATCH, METRICS_PER_BATCH = 100, 100, 800
PAGE = 1000  # runs per search page


@dataclass(frozen=True)
class TrackedRun:
    """A run as the tracker keeps it: its latest metric values, params and tags."""

    run_id: str
    status: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]


def load_mlflow() -> Any:
    """The mlflow package, or a ConfigError saying how to install it."""
    try:
        import mlflow
        import mlflow.entities
        import mlflow.exceptions
        import mlflow.tracking
    except ImportError as exc:
        raise ConfigError(f"exporting to MLflow needs the mlflow package, which cannot be imported ({exc})",
                          hint=INSTALL_HINT) from None
    return mlflow


class MlflowTracker:
    """A tracking server (or any URI mlflow takes: http(s)://, file:, sqlite:, databricks)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        mlflow = load_mlflow()
        for name, value in QUIET_DEFAULTS.items():
            os.environ.setdefault(name, value)
        self._entities = mlflow.entities
        self._errors: tuple[type[BaseException], ...] = (mlflow.exceptions.MlflowException, OSError)
        with self._call("connect"):
            self._client = mlflow.tracking.MlflowClient(tracking_uri=uri)
            # mlflow < 3 uploads to a server's proxied artifact store (mlflow-artifacts:) by the process's tracking
            # URI, not the client's: they must agree (the harness talks to one tracker per process).
            mlflow.set_tracking_uri(uri)

    @contextmanager
    def _call(self, what: str) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise TrackerError(f"MLflow at {self.uri}: {what} failed: {first[:400]}",
                               hint="is the tracking server up and the URI right (--mlflow)? The records are safe "
                                    "in the results folder: `harness export RUN --mlflow URI` sends them later"
                               ) from None

    # ------------------------------------------------------------------ experiments and runs

    def experiment(self, name: str) -> str:
        """The id of the experiment `name`, made when missing."""
        with self._call(f"finding experiment {name!r}"):
            found = self._client.get_experiment_by_name(name)
            if found is not None and found.lifecycle_stage == "deleted":
                raise TrackerError(f"MLflow at {self.uri}: experiment {name!r} is deleted",
                                   hint="restore it in MLflow, or choose another name")
            return str(found.experiment_id if found is not None else self._client.create_experiment(name))

    def runs_tagged(self, experiment_id: str, tag: str, value: str) -> list[TrackedRun]:
        """The experiment's active (not deleted) runs whose tag `tag` is `value`."""
        if "'" in value or "\\" in value:
            raise TrackerError(f"cannot search MLflow for {tag} {value!r}: it holds a quote or a backslash",
                               hint="rename the run folder")
        query = f"tags.`{tag}` = '{value}'"
        out: list[TrackedRun] = []
        token = None
        with self._call("searching runs"):
            while True:
                page = self._client.search_runs([experiment_id], filter_string=query, max_results=PAGE,
                                                page_token=token)
                out += [TrackedRun(run_id=str(r.info.run_id), status=str(r.info.status), tags=dict(r.data.tags),
                                   params=dict(r.data.params), metrics=dict(r.data.metrics)) for r in page]
                token = page.token
                if not token:
                    return out

    def start_run(self, experiment_id: str, name: str, tags: Mapping[str, str], start_ms: int | None) -> str:
        with self._call(f"creating run {name!r}"):
            run = self._client.create_run(experiment_id, start_time=start_ms, tags=dict(tags), run_name=name)
            return str(run.info.run_id)

    def log(self, run_id: str, *, params: Mapping[str, str] | None = None, metrics: Sequence[Metric] = (),
            tags: Mapping[str, str] | None = None, timestamp_ms: int) -> None:
        e = self._entities
        p = [e.Param(k, v) for k, v in (params or {}).items()]
        t = [e.RunTag(k, v) for k, v in (tags or {}).items()]
        m = [e.Metric(x.key, x.value, timestamp_ms, x.step) for x in metrics]
        with self._call("logging"):
            for i in range(0, len(p), PARAMS_PER_BATCH):
                self._client.log_batch(run_id, params=p[i:i + PARAMS_PER_BATCH])
            for i in range(0, len(t), TAGS_PER_BATCH):
                self._client.log_batch(run_id, tags=t[i:i + TAGS_PER_BATCH])
            for i in range(0, len(m), METRICS_PER_BATCH):
                self._client.log_batch(run_id, metrics=m[i:i + METRICS_PER_BATCH])

    def upload(self, run_id: str, folder: Path) -> None:
        """The folder's files as the run's artifacts (their paths kept)."""
        with self._call("uploading artifacts"):
            self._client.log_artifacts(run_id, str(folder))

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        with self._call("ending a run"):
            if status == RUNNING:
                self._client.update_run(run_id, status=status)
            else:
                self._client.set_terminated(run_id, status=status, end_time=end_ms)

    def delete(self, run_id: str) -> None:
        with self._call("deleting a run"):
            self._client.delete_run(run_id)

    def url(self, experiment_id: str, run_id: str) -> str | None:
        """Where the run shows in the tracker's web page (for a tracking server)."""
        if not self.uri.startswith(("http://", "https://")):
            return None
        return f"{self.uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
