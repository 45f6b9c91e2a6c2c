"""`harness export RUN --mlflow URI` (a finished run into MLflow) and what `harness sweep --mlflow URI` adds to a
sweep: the parent run made before any host is touched, each record logged as the sweep writes it, the whole
run exported once more at the end (harness.tracker.export; docs/tracker.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from ..errors import HarnessError
from ..results.schemas import Record
from ..results.store import ResultsStore
from .common import RESULTS_HELP, err, exit_on_errors, open_store, out, results_dir_arg
from .compare import chosen_runs

if TYPE_CHECKING:
    from ..run.health import DownHost
    from ..run.scheduler import SweepReporter
    from ..tracker.export import ExportSummary, LiveExport

MLFLOW_HELP = "MLflow tracking URI (http://HOST:PORT of a tracking server, or any URI mlflow takes)."
EXPERIMENT_HELP = "MLflow experiment to log into (default: the sweep's name; `harness` for a single run)."


def export(
    runs: list[str] = typer.Argument(..., help="Run ids (under --results-dir) or run folders."),
    mlflow: str = typer.Option(..., "--mlflow", metavar="URI", help=MLFLOW_HELP),
    experiment: Optional[str] = typer.Option(None, "--experiment", help=EXPERIMENT_HELP),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """Log runs to MLflow: a parent run per run, a nested child per attempt (params, per-repeat metrics, tags,
    the record and its log tails). Exporting again adds nothing twice (the optional `mlflow` extra)."""
    from ..tracker.export import default_experiment, export_run
    from ..tracker.mlflowapi import MlflowTracker

    with exit_on_errors():
        chosen = chosen_runs(open_store(results_dir, announce=False), runs)
        tracker = MlflowTracker(mlflow)
        for store, run_id in chosen:
            summary = export_run(tracker, store, run_id, experiment or default_experiment(store, run_id))
            show_summary(run_id, summary)


def show_summary(run_id: str, s: ExportSummary) -> None:
    statuses = ", ".join(f"{n} {status}" for status, n in s.counted.items()) or "no attempts"
    out.print(f"mlflow: run {escape(run_id)} → experiment {escape(s.experiment)} ({statuses}): {s.line()}",
              highlight=False)
    if s.url:
        out.print(f"  {s.url}", highlight=False, soft_wrap=True)


class SweepTracking:
    """`harness sweep --mlflow URI`. Made at the door (mlflow imported, or the ConfigError saying how to
    install it); entered once the run is locked, before any host is touched: the parent run is found or made
    then (an unreachable tracker is refused); left when the sweep ends: the whole run is exported once more."""

    def __init__(self, uri: str, experiment: str, store: ResultsStore, run_id: str,
                 results_dir: Path | None = None) -> None:
        from ..tracker.export import RunExport
        from ..tracker.mlflowapi import MlflowTracker

        self.run_id = run_id
        self.again = f"harness export {run_id} --mlflow {uri}{results_dir_arg(results_dir)}"
        self.export = RunExport(MlflowTracker(uri), store, run_id, experiment)
        self.live: LiveExport | None = None

    def __enter__(self) -> SweepTracking:
        from ..tracker.export import LiveExport

        self.export.open(live=True)
        self.live = LiveExport(self.export)
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def reporter(self, inner: SweepReporter) -> SweepReporter:
        """The sweep's display, which also hands each record to the live export (and shows its warning)."""
        if self.live is None:
            return inner
        self.live.warn = lambda message: inner.note("mlflow", message)
        return TrackedReporter(inner, self.live)

    def finish(self) -> None:
        """Export the whole run once more; a failure is a warning (the sweep's records are safe on disk)."""
        if self.live is None:
            return
        try:
            show_summary(self.run_id, self.live.close())
        except HarnessError as exc:
            err.print(f"[yellow]warning:[/] {escape(exc.message)}\n  export later with: {escape(self.again)}",
                      highlight=False)


class TrackedReporter:
    """A SweepReporter that passes everything on to the display and each finished attempt's record to MLflow."""

    def __init__(self, inner: SweepReporter, live: LiveExport) -> None:
        self.inner = inner
        self.live = live

    def stage(self, label: str, stage: str) -> None:
        self.inner.stage(label, stage)

    def note(self, label: str, message: str) -> None:
        self.inner.note(label, message)

    def attempt_started(self, host: str, label: str) -> None:
        self.inner.attempt_started(host, label)

    def attempt_finished(self, host: str, label: str, record: Record) -> None:
        self.inner.attempt_finished(host, label, record)
        self.live.submit(record)

    def totals(self, done: int, failed: int, left: int, eta_s: float | None) -> None:
        self.inner.totals(done, failed, left, eta_s)

    def host_down(self, host: str, down: DownHost) -> None:
        self.inner.host_down(host, down)

    def host_up(self, host: str, since: float) -> None:
        self.inner.host_up(host, since)
