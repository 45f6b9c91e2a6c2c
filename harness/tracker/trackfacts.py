"""What an experiment tracker (MLflow) keeps of a run and of each attempt, from the records (pure).

A run becomes a parent entry and each attempt (one record) a child entry: params (what was asked: experiment,
backend, patch sets and their hashes, server flags, versions, GPU), metrics (every bench key a record keeps,
one value per repeat with the repeat's index as the step, and the median), tags (status, crash category,
host, round and try; the ids that find an entry again) and a final status. The facts that need the whole run
(comparable to the baseline or not, the answer check's verdict) come from the comparison rows, as `harness
compare` shows them (`run_facts`). harness.tracker.export writes them; docs/tracker.md lists them.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from ..analysis.compare import Row, gpu_of
from ..common.protocol import Status
from ..results.schemas import Record, RunInfo

# The tags an entry is found again by (docs/tracker.md "Exporting again").
KIND = "harness.kind"  # "run" (the parent) or "attempt" (a child)
RUN_ID = "harness.run_id"
ATTEMPT_ID = "harness.attempt_id"  # run id / experiment / attempt folder: one record, one child
RECORD_SHA = "harness.record_sha256"  # the record as exported: another one (it changed) replaces the child
PARENT = "mlflow.parentRunId"  # MLflow's own tag: the child shows nested under its run
NAME = "mlflow.runName"  # MLflow's own tag: the run's name (the parent's, once its sweep is known)
RUN, ATTEMPT = "run", "attempt"

# MLflow's run statuses.
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"

PARAM_MAX = 500  # characters: the oldest tracking servers still in use keep no more in a param
TAG_MAX = 5000
SKIPPED_FLAGS = {"host", "port"}  # where the server listened: chosen per attempt, no parameter of it
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")  # what MLflow allows in a param, metric or tag name


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    step: int = 0


@dataclass
class Entry:
    """One tracker run: the parent of a harness run, or one attempt's child."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    status: str = FINISHED


def key(name: str) -> str:
    """A param, metric or tag name MLflow accepts (other characters become `_`)."""
    return _KEY_CHARS.sub("_", name)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def attempt_id(rec: Record) -> str:
    return f"{rec.run_id}/{rec.experiment}/{rec.attempt}"


def record_sha(record_json: str) -> str:
    return hashlib.sha256(record_json.encode("utf-8")).hexdigest()


# ============================================================================ one attempt


def attempt_entry(rec: Record, record_json: str) -> Entry:
    """The child entry of one record (`record_json`: its text, whose hash says whether it changed)."""
    entry = Entry(name=f"{rec.experiment} #{rec.attempt}", params=attempt_params(rec),
                  metrics=attempt_metrics(rec), tags=attempt_tags(rec), status=run_status(rec))
    entry.tags.update({KIND: ATTEMPT, RUN_ID: rec.run_id, ATTEMPT_ID: attempt_id(rec),
                       RECORD_SHA: record_sha(record_json)})
    return entry


def run_status(rec: Record) -> str:
    """ok, or a crash or hang the experiment expected: FINISHED; interrupted or the host failed: KILLED."""
    if rec.status == Status.OK or (rec.expectation_met and rec.expect in ("crash", "hang")):
        return FINISHED
    if rec.status in (Status.ABORTED, Status.INFRA_ERROR):
        return KILLED
    return FAILED


def attempt_params(rec: Record) -> dict[str, str]:
    p = rec.provenance
    params: dict[str, str | None] = {
        "experiment": rec.experiment, "backend": rec.backend, "sweep": rec.sweep, "expect": rec.expect,
        "patch_sets": ",".join(sorted(p.patch_sets)) or "-",
        "version.server": p.server_version, "version.flashinfer": p.flashinfer_version,
        "version.harness": p.harness_version, "version.python": p.agent_python, "base_commit": p.base_commit,
        "gpu": gpu_of(rec), "arch": p.arch or rec.arch,
    }
    params.update({f"patch_set.{name}": digest for name, digest in p.patch_sets.items()})
    params.update({f"patch_variant.{name}": v for name, v in (p.patch_variants or {}).items()})
    if rec.server is not None:
        params["server.argv"] = " ".join(_arg(a) for a in rec.server.argv)
        params.update({f"server.{flag}": value for flag, value in server_flags(rec.server.argv).items()})
        params.update({f"env.{name}": value for name, value in rec.server.env.items()})
    return {key(k): clip(v, PARAM_MAX) for k, v in params.items() if v is not None}


def _arg(a: str | dict[str, str]) -> str:
    return a if isinstance(a, str) else "{" + ",".join(a.values()) + "}"  # a slot the agent filled in


def server_flags(argv: Sequence[str | dict[str, str]]) -> dict[str, str]:
    """`--tp-size 2 --enable-x` → {"tp-size": "2", "enable-x": "true"}: the flags after the launcher's module
    (where the server listens left out: it is chosen per attempt)."""
    flags: dict[str, str] = {}
    args = [_arg(a) for a in argv]
    i = next((n for n, a in enumerate(args) if a.startswith("--")), len(args))  # past the interpreter and `-m`
    while i < len(args):
        name = args[i][2:] if args[i].startswith("--") else None
        i += 1
        if not name:
            continue
        value = "true"
        if "=" in name:  # --flag=value
            name, value = name.split("=", 1)
        elif i < len(args) and not args[i].startswith("--"):
            value, i = args[i], i + 1
        if name not in SKIPPED_FLAGS:
            flags[name] = value
    return flags


def attempt_metrics(rec: Record) -> list[Metric]:
    """Each bench case's metrics: every repeat (step = its index, from 0) and the median; the stages' times
    and the answer check's own numbers."""
    out: list[Metric] = []
    for case, summary in sorted(rec.metrics.items()):
        for name, values in sorted(summary.samples.items()):
            out += [Metric(key(f"{case}.{name}"), float(v), step) for step, v in enumerate(values) if _number(v)]
            median = summary.median(name)
            if _number(median):
                out.append(Metric(key(f"{case}.{name}.median"), float(median)))
    out += [Metric(key(f"time.{stage}"), float(s)) for stage, s in sorted(rec.timings.items()) if _number(s)]
    if _number(rec.detect_latency_s):
        out.append(Metric("time.detect_latency_s", float(rec.detect_latency_s)))
    if rec.answers is not None:
        a = rec.answers
        for name, v in (("prompts", a.prompts), ("positions", a.positions), ("mean_logprob", a.mean_logprob),
                        ("min_logprob", a.min_logprob)):
            if _number(v):
                out.append(Metric(f"answers.{name}", float(v)))
    return out


def _number(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def attempt_tags(rec: Record) -> dict[str, str]:
    v = rec.verdict
    error = rec.error.strip().splitlines()[0] if rec.error and rec.error.strip() else None
    tags: dict[str, str | None] = {
        "status": rec.status.value, "host": rec.host, "hostname": rec.provenance.hostname,
        "round": _str(rec.round), "try": _str(rec.try_), "key": rec.key,
        "category": v.category if v else None, "phase": v.phase if v else None,
        "key_line": v.key_line if v else None, "error": error,
        "expectation_met": _str(rec.expectation_met), "provisional": _str(rec.provisional),
        "slurm.job": rec.slurm.job_id if rec.slurm else None,
    }
    return {k: clip(t, TAG_MAX) for k, t in tags.items() if t is not None}


def _str(v: object) -> str | None:
    return None if v is None else str(v).lower() if isinstance(v, bool) else str(v)


# ============================================================================ the run


def run_entry(run_id: str, info: RunInfo | None, records: Iterable[Record], *, live: bool = False) -> Entry:
    """The parent entry: its params are logged once (when first known: they cannot change in MLflow), its
    tags on every export. FINISHED once every planned attempt has a final record; RUNNING while a sweep logs."""
    records = list(records)
    finals = {r.key for r in records if r.is_final()}
    planned = info.plan_keys() if info is not None else set()
    left = len(planned - finals)
    entry = Entry(name=f"{info.sweep} {run_id}" if info else run_id)
    if info is not None:
        entry.params = {"sweep": info.sweep, "sweep_file": clip(info.sweep_file, PARAM_MAX)}
    entry.tags = {KIND: RUN, RUN_ID: run_id, NAME: entry.name, "attempts": str(len(records)),
                  "ok": str(sum(1 for r in records if r.status == Status.OK))}
    if info is not None:
        entry.tags.update({"sweep": info.sweep, "hosts": clip(",".join(info.hosts), TAG_MAX), "created": info.created,
                           "planned": str(len(info.attempts)), "left": str(left)})
        if info.baseline:
            entry.tags["baseline"] = info.baseline
    entry.status = RUNNING if live else FINISHED if left == 0 else KILLED
    return entry


def run_facts(rows: list[Row], records: list[Record]) -> dict[str, tuple[dict[str, str], list[Metric]]]:
    """attempt id → the tags and metrics that need the whole run: comparability (the baseline's row, one
    `harness compare` calls comparable, or its note saying why not) and, on the latest ok record with answers,
    the answer check's verdict against the baseline."""
    out: dict[str, tuple[dict[str, str], list[Metric]]] = {}
    by_row: dict[tuple[str, str, str | None], list[Record]] = {}
    for rec in records:
        by_row.setdefault((rec.run_id, rec.experiment, gpu_of(rec)), []).append(rec)
    for row in rows:
        group = by_row.get((row.run_id, row.experiment, row.gpu), [])
        why_not = next((n for n in row.notes if n.startswith("not comparable")), None)
        comparability = ("baseline" if row.is_baseline else clip(why_not, TAG_MAX) if why_not
                         else "comparable" if row.status == Status.OK else None)
        for rec in group:
            if comparability is not None and rec.status == Status.OK:
                out.setdefault(attempt_id(rec), ({}, []))[0]["comparability"] = comparability
        judged = next((r for r in reversed(group) if r.status == Status.OK and r.answers is not None), None)
        if judged is None or not row.answers:
            continue
        tags, metrics = out.setdefault(attempt_id(judged), ({}, []))
        tags["answers"] = row.answers
        v = row.answer_verdict
        if v is not None:
            metrics += [Metric("answers.top1", float(v.top1)), Metric("answers.max_dlogprob", float(v.max_dlogprob)),
                        Metric("answers.diverged", float(v.diverged)), Metric("answers.bad", float(v.bad)),
                        Metric("answers.passed", 1.0 if v.passed else 0.0)]
            metrics += [Metric(f"answers.{k}", float(x)) for k, x in (("spread", v.spread), ("yardstick", v.yardstick),
                                                                       ("spread_ratio", v.ratio)) if x is not None]
    return out
