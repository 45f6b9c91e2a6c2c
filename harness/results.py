"""Results store: the one module that writes and reads run folders.

    results/<run-id>/run.json                               the sweep's plan (`RunInfo`, schema `RUN_SCHEMA`)
    results/<run-id>/<experiment>/<attempt>/record.json     one attempt (`Record`, schema `SCHEMA`)
    results/<run-id>/<experiment>/<attempt>/record.partial.json   the same, provisional, while it runs

beside each record the server log and the benchmark JSONL. Files are written atomically; records are
never overwritten. On read, a file of another schema or one that does not validate is a `ResultsError`
naming the file and what to do — never a pydantic traceback.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError, ResultsError
from .protocol import Status

SCHEMA = 1  # record.json
PROVISIONAL = "record.partial.json"  # an attempt's record while it runs (see `ResultsStore.write_provisional`)
RUN_SCHEMA = 1  # run.json
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)

# The statuses that are a result. An attempt whose latest records are all something else (the host could
# not be used, the attempt was interrupted) runs again on resume — see `Record.is_final`.
NOT_FINAL_STATUSES: frozenset[Status] = frozenset({Status.INFRA_ERROR, Status.ABORTED})
FINAL_STATUSES: frozenset[Status] = frozenset(Status) - NOT_FINAL_STATUSES


class _Strict(BaseModel):
    """Every key declared: an unknown one is an error, on write and on read."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ============================================================================ record parts


class VerdictInfo(_Strict):
    """Why a crashed or hung server ended (harness.triage's verdict, or the hang timer's)."""

    verdict: str | None = None  # ready | crash | incomplete (from triage; absent for a hang)
    category: str
    key_line: str | None = None
    phase: str | None = None
    hint: str | None = None


class Revert(_Strict):
    verified: bool
    tree_before: str | None = None
    tree_after: str | None = None
    diff: list[str] | None = None  # paths that differ when not verified
    stray_ignored: list[str] | None = None  # new paths under .gitignore'd folders (not part of the check)


class StopInfo(_Strict):
    """How the server was stopped (or, in `recovered`, how a leftover one was)."""

    state: str | None = None  # recovery: stopped | already-gone | never-launched | killed-marked
    signal: str | None = None  # TERM | KILL | None (already gone)
    stragglers: list[int] | None = None
    left: list[int] | None = None
    pids: list[int] | None = None
    stop_s: float | None = None
    gpu_dirty: dict[str, int] | None = None  # pid → MiB still held after the processes were gone


class ServerInfo(_Strict):
    argv: list[str | dict[str, str]]  # a dict is a slot the agent filled in on the host ({"slot": "port"})
    env: dict[str, str] = {}  # secrets redacted
    port: int | str | None = None
    exit_code: int | None = None
    stop: StopInfo | None = None


class ChangedPaths(_Strict):
    restore: list[str] = []  # tracked files the attempt changed (restored from the base commit)
    delete: list[str] = []  # files the attempt created (deleted)


class Recovered(_Strict):
    """An interrupted attempt's leftovers that this attempt cleaned up first."""

    journal: dict[str, Any]  # the agent's journal as it found it
    stop: StopInfo
    revert: Revert
    by: str | None = None  # "watchdog": the dead agent's own watchdog did it, before any harness command
    took_s: float | None = None  # watchdog: from the agent's death to the tree restored


class KernelTime(_Strict):
    name: str
    gpu_us: float


class ProfileOp(_Strict):
    name: str
    gpu_us: float
    share: float
    calls: int
    kernels: list[KernelTime] = []


class ProfileSummary(_Strict):
    """The top operations by GPU time in the rank-0 trace (harness.profile's summary)."""

    total_gpu_us: float
    steps: int
    top: list[ProfileOp]
    kernels: int
    per_step_us: float | None = None
    trace: str | None = None  # relative to the attempt folder
    files: list[str] = []


class Provenance(_Strict):
    base_commit: str | None = None
    patch_sets: dict[str, str] = {}  # name → sha256 of its contents
    harness_version: str | None = None
    server_version: str | None = None
    flashinfer_version: str | None = None  # as the server's Python sees it
    patch_variants: dict[str, str] | None = None  # set → the variant applied ('sglang==0.5.16')
    gpu: list[dict[str, Any]] | None = None  # nvidia-smi's GPUs (name, compute_cap, …)
    arch: str | None = None
    agent_python: str | None = None
    hostname: str | None = None


class SweepAttempt(_Strict):
    """Where an attempt sits in a sweep: what the scheduler adds to its record."""

    key: str
    round: int
    sweep: str
    try_: int = Field(alias="try")


# ============================================================================ the record

# Written in every record, with their defaults when not given; every other field is written when it was
# given (as it was before the record had a declared field for it).
CORE_FIELDS = ("schema_", "run_id", "experiment", "attempt", "host", "backend", "status", "error", "verdict",
               "timings", "detect_latency_s", "metrics", "provenance", "revert")


class SlurmJob(_Strict):
    """Where a cluster's attempt ran: its batch job."""

    job_id: str
    state: str | None = None  # the last state seen (COMPLETED, CANCELLED, TIMEOUT, ...)
    node: str | None = None
    reason: str | None = None  # the last PENDING reason seen
    queued_s: float | None = None  # submission → RUNNING
    requeued: int = 0


class Record(_Strict):
    """One attempt's `record.json` (schema `SCHEMA`; docs/experiments.md "Records" lists the fields)."""

    schema_: int = Field(SCHEMA, alias="schema")
    run_id: str
    experiment: str
    attempt: str
    host: str
    backend: str | None = None
    status: Status
    error: str | None = None
    verdict: VerdictInfo | None = None
    timings: dict[str, float] = {}
    detect_latency_s: float | None = None
    metrics: dict[str, dict[str, Any]] = {}  # per bench case: medians, `repeats`, and every repeat in `samples`
    provenance: Provenance = Provenance()
    revert: Revert | None = None
    # what the experiment expected, and what the server was
    expect: str | None = None  # ok | crash | hang
    expectation_met: bool | None = None
    experiment_file: str | None = None
    server: ServerInfo | None = None
    changed_paths: ChangedPaths | None = None
    recovered: Recovered | None = None
    abort_reason: str | None = None
    profile: ProfileSummary | None = None
    # in sweeps
    key: str | None = None
    round: int | None = None
    sweep: str | None = None
    try_: int | None = Field(None, alias="try")
    # facts the agent reported, present only when they apply
    dirty: list[str] | None = None
    locked_by: dict[str, Any] | None = None  # the lock holder's own note (another harness, maybe another version)
    fetch_missing: list[str] | None = None
    port_in_use: int | None = None
    cannot_run: list[str] | None = None
    preflight_warnings: list[str] | None = None
    arch: str | None = None
    budget_exceeded: bool | None = None
    gpu_dirty: dict[str, int] | None = None
    profile_error: str | None = None
    slurm: SlurmJob | None = None  # attempts on a Slurm cluster
    # written while the attempt ran (`record.partial.json`): the controller ended before the final report
    provisional: bool | None = None

    def is_final(self) -> bool:
        """A result: the attempt does not run again on resume. An aborted (or infra-error) attempt is not,
        unless it was stopped for running past its budget."""
        return self.status in FINAL_STATUSES or bool(self.budget_exceeded)

    def to_json(self) -> str:
        given = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        out: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            key = info.alias or name
            if key in given:
                out[key] = given[key]
            elif name in CORE_FIELDS:
                value = getattr(self, name)
                out[key] = (value.model_dump(mode="json", by_alias=True, exclude_unset=True)
                            if isinstance(value, BaseModel) else value)
        return json.dumps(out, indent=2) + "\n"


# ============================================================================ run.json


class PlannedEntry(_Strict):
    key: str
    experiment: str
    round: int
    order: int
    backend: str | None = None
    arch: str | None = None


class RunInfo(_Strict):
    """A sweep run's `run.json`: its plan, so a resume runs what has no final record."""

    schema_: int = Field(RUN_SCHEMA, alias="schema")
    run_id: str
    sweep: str
    sweep_file: str
    created: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    baseline: str | None = None
    hosts: list[str] = []
    # What a resume needs besides the hosts (absent in run.json files from before they were recorded):
    hosts_file: str | None = None  # the inventory the hosts were read from (absolute)
    patches_dir: str | None = None  # the patch sets the keys were made from (absolute)
    host_gpus: dict[str, int] = {}  # GPUs asked of hosts without `gpus:` (for the record; keys do not use them)
    attempts: list[PlannedEntry] = []

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1) + "\n"

    def plan_keys(self) -> set[str]:
        return {a.key for a in self.attempts}


# ============================================================================ the store


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: ("<redacted>" if SECRET_NAME.search(k) else v) for k, v in env.items()}


class ResultsStore:
    """`root/<run-id>/…`: every write and read of a run folder goes through here."""

    def __init__(self, root: Path):
        self.root = root

    # ------------------------------------------------------------------ paths

    def run_path(self, run_id: str) -> Path:
        return self.root / run_id

    def run_dir(self, run_id: str) -> Path:
        """The run's folder, created when missing."""
        d = self.run_path(run_id)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def has_run(self, run_id: str) -> bool:
        return self.run_path(run_id).is_dir()

    def run_ids(self) -> list[str]:
        """Every run folder under the root, sweep or not (oldest first: ids start with the time)."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []

    def sweep_run_ids(self) -> list[str]:
        """The runs that have a run.json (sweeps)."""
        return sorted(p.parent.name for p in self.root.glob("*/run.json")) if self.root.is_dir() else []

    # ------------------------------------------------------------------ writing

    def new_attempt_dir(self, run_id: str, experiment: str, attempt: str | None = None) -> Path:
        """A fresh folder for one attempt; numbered 01, 02… when `attempt` is not given."""
        base = self.run_dir(run_id) / experiment
        if base.resolve().parent != (self.root / run_id).resolve():
            raise ResultsError(f"experiment name {experiment!r} would leave the results folder")
        base.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            name = attempt or f"{n:02d}"
            d = base / name
            try:
                d.mkdir()
                return d
            except FileExistsError:
                if attempt:
                    raise ResultsError(f"results for attempt {d} exist already; records are never overwritten"
                                       ) from None
                n += 1
            except OSError as exc:
                raise ResultsError(f"cannot create {d}: {exc.strerror}") from None

    def write_record(self, attempt_dir: Path, record: Record) -> Path:
        return write_exclusive(attempt_dir / "record.json", record.to_json())

    def write_provisional(self, attempt_dir: Path, record: Record) -> Path:
        """`record.partial.json`, replaced atomically as results arrive; read as the attempt's record only while
        it has no `record.json` (a controller that was killed before writing it)."""
        path = attempt_dir / PROVISIONAL
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(record.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ResultsError(f"cannot write {path}: {exc.strerror}") from None
        return path

    def drop_provisional(self, attempt_dir: Path) -> None:
        (attempt_dir / PROVISIONAL).unlink(missing_ok=True)

    @contextmanager
    def lock_run(self, run_id: str) -> Iterator[None]:
        """One harness runs (or resumes) a run at a time: two `--resume` of one run would plan the same
        attempts twice. Held for the whole sweep; the kernel drops it when the process dies."""
        path = self.run_dir(run_id) / ".lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ResultsError(f"cannot lock run {run_id}: {exc}") from None
            holder = path.read_text().strip() or "another process"
            raise ResultsError(f"run {run_id} is being run by another harness ({holder})",
                               hint="wait for it to finish, or stop it (Ctrl-C) and resume again") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def write_run(self, run: RunInfo) -> Path:
        """The run's run.json. Resuming replaces it: the plan may have changed (an edited patch), and the
        newest plan is the one whose keys count."""
        path = self.run_dir(run.run_id) / "run.json"
        if path.exists():
            path.unlink()
        return write_exclusive(path, run.to_json())

    # ------------------------------------------------------------------ reading

    def read_run(self, run_id: str) -> RunInfo:
        """A sweep run's run.json; a ConfigError (with the known runs) when there is no such run."""
        path = self.run_path(run_id) / "run.json"
        if not path.is_file():
            known = self.sweep_run_ids()
            raise ConfigError(f"no run {run_id!r} in {self.root}",
                              hint=("known runs: " + ", ".join(known)) if known else "no sweep runs there yet")
        return load_run(path)

    def find_run(self, run_id: str) -> RunInfo | None:
        """The run's run.json, or None when the run has none (a single `harness run`)."""
        path = self.run_path(run_id) / "run.json"
        return load_run(path) if path.is_file() else None

    def runs_of_sweep(self, sweep_file: Path) -> list[str]:
        """The runs made from this sweep file."""
        wanted = str(sweep_file.resolve())
        return [r for r in self.sweep_run_ids() if self.read_run(r).sweep_file == wanted]

    def record_paths(self, run_id: str) -> list[Path]:
        """Each attempt's record.json — or its provisional record when the controller died before writing it."""
        final = list(self.run_path(run_id).glob("*/*/record.json"))
        done = {p.parent for p in final}
        provisional = [p for p in self.run_path(run_id).glob(f"*/*/{PROVISIONAL}") if p.parent not in done]
        return sorted(final + provisional)

    def iter_records(self, run_id: str) -> Iterator[Record]:
        """Every record of a run, in folder order (experiment, then attempt number)."""
        for path in self.record_paths(run_id):
            try:
                rec = load_record(path)
            except ResultsError:
                final = path.parent / "record.json"
                if path.name != PROVISIONAL or not final.exists():
                    raise
                rec = load_record(final)  # the attempt ended just now: its record replaced the provisional one
            yield rec

    def records_by_key(self, run_id: str) -> dict[str, list[Record]]:
        """A sweep's records by attempt key (several when infrastructure failures were retried)."""
        by_key: dict[str, list[Record]] = {}
        for rec in self.iter_records(run_id):
            if rec.key:
                by_key.setdefault(rec.key, []).append(rec)
        return by_key

    def final_records(self, run_id: str) -> list[Record]:
        """The run's results: final records of the run's current plan (a record keyed by an older plan —
        an edited patch — is stale and left out)."""
        run = self.find_run(run_id)
        keys = run.plan_keys() if run is not None else None
        return [rec for rec in self.iter_records(run_id)
                if rec.is_final() and (keys is None or rec.key is None or rec.key in keys)]


def write_exclusive(path: Path, text: str) -> Path:
    """Write `path` atomically, failing if it exists: temp file, fsync, hard link into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise ResultsError(f"{path} exists already; records are never overwritten") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ResultsError(f"no space left to write {path}", hint="free disk space, then resume the run") from None
        raise ResultsError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
    return path


# ============================================================================ reading one file

_M = TypeVar("_M", bound=BaseModel)


def load_record(path: Path) -> Record:
    """A record.json, checked: its schema must be `SCHEMA` and it must validate."""
    return _load(path, Record, SCHEMA, "record")


def load_run(path: Path) -> RunInfo:
    """A run.json, checked: its schema must be `RUN_SCHEMA` and it must validate."""
    return _load(path, RunInfo, RUN_SCHEMA, "run file")


def _load(path: Path, model: type[_M], schema: int, what: str) -> _M:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ResultsError(f"{path}: not a {what} (not valid JSON: {exc})",
                           hint="it was damaged or is not the harness's; move it out of the results folder") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: not a {what} (a JSON {type(data).__name__}, not an object)",
                           hint="move it out of the results folder")
    found = data.get("schema")
    if found != schema:
        raise ResultsError(f"{path}: {what} schema {found!r}; this harness reads schema {schema}",
                           hint="read it with the harness version that wrote it, or move it out of the results "
                                "folder")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors()[:5])
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise ResultsError(f"{path}: not a valid {what} of schema {schema}: {problems}{more}",
                           hint="it was edited or damaged; fix or move it out of the results folder") from None
