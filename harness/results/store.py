"""Results store: the one module that writes and reads run folders.

    results/<run-id>/run.json                               the sweep's plan (`RunInfo`, schema `RUN_SCHEMA`)
    results/<run-id>/bisect.json                            a bisect's range (`BisectInfo`, schema `BISECT_SCHEMA`)
    results/<run-id>/<experiment>/<attempt>/                one attempt's folder (attemptdir.py names its files):
                                                            its record (`Record`, schema `SCHEMA`), provisional
                                                            while it runs, and beside it the server log, the
                                                            benchmark JSONL, the answer check's answers

Files are
written atomically; records are never overwritten. On read, a file of another schema or one that does not
validate is a `ResultsError` naming the file and what to do — never a pydantic traceback. The files' models
are in harness.results.schemas.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError, ResultsError
from .attemptdir import PROVISIONAL, RECORD, AttemptDir
from .metrics import parse_jsonl
from .schemas import BISECT_SCHEMA, RUN_SCHEMA, SCHEMA, BisectInfo, Record, Recovered, RunInfo

BISECT_FILE = "bisect.json"


# ============================================================================ the store


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class ResultsStore:
    """`root/<run-id>/…`: every write and read of a run folder goes through here."""

    def __init__(self, root: Path):
        self.root = root
        # (run, experiment) → the number to try first for its next attempt folder, and the folders already
        # checked to stay inside the results folder: a sweep's thousands of attempts would otherwise cost a
        # resolve() (a stat per path part) and a mkdir per earlier attempt each. mkdir stays the arbiter.
        self._next_n: dict[tuple[str, str], int] = {}
        self._checked: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ paths

    def run_path(self, run_id: str) -> Path:
        return self.root / run_id

    def run_dir(self, run_id: str) -> Path:
        """The run's folder, created when missing."""
        d = self.run_path(run_id)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def attempt(self, run_id: str, experiment: str, attempt: str) -> AttemptDir:
        """An attempt's folder (its files' names: attemptdir.py)."""
        return AttemptDir(self.run_path(run_id) / experiment / attempt)

    def attempt_of(self, rec: Record) -> AttemptDir:
        """The folder a record lies in."""
        return self.attempt(rec.run_id, rec.experiment, rec.attempt)

    def has_run(self, run_id: str) -> bool:
        return self.run_path(run_id).is_dir()

    def run_ids(self) -> list[str]:
        """Every run folder under the root, sweep or not (oldest first: ids start with the time)."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []

    def sweep_run_ids(self) -> list[str]:
        """The runs that have a run.json (sweeps)."""
        return sorted(p.parent.name for p in self.root.glob("*/run.json")) if self.root.is_dir() else []

    # ------------------------------------------------------------------ writing

    def check_writable(self) -> None:
        """Before any host is touched: a results folder that cannot take a record (read-only, not a folder) is
        a clear refusal now, not a traceback after the attempt."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".harness-probe-", dir=self.root)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"the results folder {self.root} cannot be written ({exc.strerror or exc})",
                              hint="make it writable, or choose another with --results-dir (or "
                                   "$HARNESS_RESULTS_DIR)") from None

    def new_attempt_dir(self, run_id: str, experiment: str, attempt: str | None = None) -> Path:
        """A fresh folder for one attempt; numbered 01, 02… when `attempt` is not given."""
        base = self.run_path(run_id) / experiment
        if (run_id, experiment) not in self._checked:
            base = self.run_dir(run_id) / experiment
            if base.resolve().parent != (self.root / run_id).resolve():
                raise ResultsError(f"experiment name {experiment!r} would leave the results folder")
            base.mkdir(parents=True, exist_ok=True)
            self._checked.add((run_id, experiment))
        n = self._next_n.get((run_id, experiment), 1)
        while True:
            name = attempt or f"{n:02d}"
            d = base / name
            try:
                d.mkdir()
                if not attempt:
                    self._next_n[(run_id, experiment)] = n + 1
                return d
            except FileExistsError:
                if attempt:
                    raise ResultsError(f"results for attempt {d} exist already; records are never overwritten"
                                       ) from None
                n += 1
            except FileNotFoundError as exc:
                if (run_id, experiment) not in self._checked:
                    raise ResultsError(f"cannot create {d}: {exc.strerror}") from None
                self._checked.discard((run_id, experiment))  # its folder was removed meanwhile: make it again
                return self.new_attempt_dir(run_id, experiment, attempt)
            except OSError as exc:
                raise ResultsError(f"cannot create {d}: {exc.strerror}") from None

    def write_record(self, attempt_dir: Path, record: Record) -> Path:
        return write_exclusive(AttemptDir(attempt_dir).record, record.to_json())

    def write_provisional(self, attempt_dir: Path, record: Record) -> Path:
        """`record.partial.json`, replaced atomically as results arrive; read as the attempt's record only while
        it has no `record.json` (a controller that was killed before writing it)."""
        path = AttemptDir(attempt_dir).provisional
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

    def note_recovery(self, recovered: Recovered) -> Path | None:
        """A later attempt recovered the journal of one whose controller was killed (it left only its
        provisional record): that record now says what became of the tree — `recovered`, and `revert` when
        it had none. The journal's ids come from the host: only a run and attempt folder of this store match."""
        journal = recovered.journal
        run_id, attempt_id = journal.get("run_id"), journal.get("attempt_id")
        if not isinstance(run_id, str) or run_id not in self.run_ids() or not isinstance(attempt_id, str):
            return None
        for path in self.run_path(run_id).glob(f"*/*/{PROVISIONAL}"):
            d = path.parent
            if f"{d.parent.name}-{d.name}" != attempt_id or AttemptDir(d).record.exists():
                continue
            record = load_record(path)
            update: dict[str, Any] = {"recovered": recovered}
            if record.revert is None:
                update["revert"] = recovered.revert
            return self.write_provisional(d, Record.model_validate({**json.loads(record.to_json()), **update}))
        return None

    def drop_provisional(self, attempt_dir: Path) -> None:
        AttemptDir(attempt_dir).provisional.unlink(missing_ok=True)

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

    def write_bisect(self, info: BisectInfo) -> Path:
        """A bisect's bisect.json, once, before its first attempt (a resume reads it; it never changes)."""
        return write_exclusive(self.run_dir(info.run_id) / BISECT_FILE, info.to_json())

    def find_bisect(self, run_id: str) -> BisectInfo | None:
        """The run's bisect.json, or None when it is no bisect."""
        path = self.run_path(run_id) / BISECT_FILE
        return _load(path, BisectInfo, BISECT_SCHEMA, "bisect file") if path.is_file() else None

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
        final = list(self.run_path(run_id).glob(f"*/*/{RECORD}"))
        done = {p.parent for p in final}
        provisional = [p for p in self.run_path(run_id).glob(f"*/*/{PROVISIONAL}") if p.parent not in done]
        return sorted(final + provisional)

    def iter_records(self, run_id: str) -> Iterator[Record]:
        """Every record of a run, in folder order (experiment, then attempt number)."""
        for path in self.record_paths(run_id):
            try:
                rec = load_record(path)
            except ResultsError:
                final = AttemptDir(path.parent).record
                if path.name != PROVISIONAL or not final.exists():
                    raise
                rec = load_record(final)  # the attempt ended just now: its record replaced the provisional one
            yield rec

    def experiment_records(self, run_id: str, experiment: str) -> list[Record]:
        """The final records of one experiment's attempts, in folder order: read from its folder only (a sweep's
        whole run grows with it)."""
        return [load_record(p) for p in sorted((self.run_path(run_id) / experiment).glob(f"*/{RECORD}"))]

    def records_by_key(self, run_id: str) -> dict[str, list[Record]]:
        """A sweep's records by attempt key (several when infrastructure failures were retried)."""
        by_key: dict[str, list[Record]] = {}
        for rec in self.iter_records(run_id):
            if rec.key:
                by_key.setdefault(rec.key, []).append(rec)
        return by_key

    def read_answers(self, rec: Record) -> Any:
        """The JSON of a record's answers.json (the answer check) beside it — or of its gzip'd copy, `answers.json.gz`,
        as an archived run keeps it; ResultsError when it cannot be read."""
        path = self.attempt_of(rec).answers(rec.answers.file if rec.answers is not None else None)
        packed = path.with_name(path.name + ".gz")
        try:
            if not path.exists() and packed.exists():
                return json.loads(gzip.decompress(packed.read_bytes()).decode("utf-8"))
            return json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ResultsError(f"cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise ResultsError(f"{path}: not valid JSON ({exc})") from None

    def read_bench_lines(self, rec: Record, case: str, limit: int = 1) -> list[dict[str, Any]]:
        """The first `limit` lines of SGLang's JSONL for bench case `case` beside a record (bench_serving's
        settings, e.g. max_concurrency, are in every line); [] when it is missing or unreadable."""
        path = self.attempt_of(rec).bench_jsonl(case)
        lines: list[str] = []
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.strip():
                        lines.append(line)
                    if len(lines) >= limit:
                        break
        except OSError:
            return []
        return parse_jsonl("".join(lines))

    def read_bench_log(self, run_id: str, experiment: str, attempt: str, case: str) -> str | None:
        """The text of bench case `case`'s client log beside a record (every repeat's output); None when it is
        missing or unreadable."""
        path = self.attempt(run_id, experiment, attempt).bench_log(case)
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

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
