"""Results store: `results/<run-id>/<experiment>/<attempt>/record.json` beside the server log and the
benchmark JSONL. Records are written atomically and never overwritten."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import ResultsError

SCHEMA = 1
STATUSES = ("ok", "crashed", "hung", "apply-failed", "preflight-failed", "bench-failed", "infra-error", "aborted")
Status = Literal["ok", "crashed", "hung", "apply-failed", "preflight-failed", "bench-failed", "infra-error",
                 "aborted"]
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


class VerdictInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    category: str
    key_line: str | None = None
    phase: str | None = None
    hint: str | None = None


class Revert(BaseModel):
    model_config = ConfigDict(extra="allow")
    verified: bool
    tree_before: str | None = None
    tree_after: str | None = None


class Record(BaseModel):
    model_config = ConfigDict(extra="allow")
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
    metrics: dict[str, dict[str, Any]] = {}
    provenance: dict[str, Any] = {}
    revert: Revert | None = None

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, exclude_none=False), indent=2, sort_keys=False) + "\n"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: ("<redacted>" if SECRET_NAME.search(k) else v) for k, v in env.items()}


class ResultsStore:
    def __init__(self, root: Path):
        self.root = root

    def run_dir(self, run_id: str) -> Path:
        d = self.root / run_id
        d.mkdir(parents=True, exist_ok=True)
        return d

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


def load_record(path: Path) -> Record:
    return Record.model_validate_json(path.read_text(encoding="utf-8"))
