"""A record from what the agent reported: status, verdict (triage), metrics, provenance, profile."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..common.protocol import Spec, Status
from ..errors import HarnessError
from ..experiments.resolve import Resolved
from ..masking import mask_secrets, redact_argv
from ..results.metrics import summarize
from ..results.schemas import Provenance, Record, ServerInfo, SlurmJob, SweepAttempt
from ..results.store import redact_env
from ..triage.classify import clean_line, hang_hint, iter_file_lines, triage_file


@dataclass
class AgentReport:
    """What the controller learned from the agent's event stream."""

    final: dict[str, Any] | None = None
    hello: dict[str, Any] | None = None
    clock_offset: float = 0.0  # host clock minus controller clock
    ping_sent: float = 0.0
    live_verdict: dict[str, Any] | None = None
    detect_latency_s: float | None = None
    bench_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    interrupted: bool = False
    cancel: threading.Event | None = None
    secrets: list[str] = field(default_factory=list)
    stage: str | None = None  # the agent's current stage
    job: SlurmJob | None = None  # a Slurm job's facts (JobState events), as the record keeps them
    job_submitted: float = 0.0  # when the job was submitted (this machine's clock)
    # Called after each benchmark result and stage change: keeps what arrived on disk before the final report.
    checkpoint: Callable[[], None] | None = None


# What the agent reports only when it applies; a record carries each one only when it is set (and truthy).
AGENT_FACTS = ("dirty", "locked_by", "fetch_missing", "port_in_use", "cannot_run", "preflight_warnings", "arch",
               "budget_exceeded", "gpu_dirty", "profile_error")
EXPECTED_STATUS = {"ok": Status.OK, "crash": Status.CRASHED, "hang": Status.HUNG}


def make_record(r: Resolved, host_name: str, run_id: str, attempt: str, spec: Spec, follow: AgentReport,
                directory: Path, host_error: HarnessError | None, elapsed: float,
                sweep: SweepAttempt | None = None) -> Record:
    final = follow.final or {}
    status = Status(final.get("status") or Status.INFRA_ERROR)
    error = final.get("error")
    if error:
        error = mask_secrets(error, follow.secrets)
    if host_error is not None:
        status, error = Status.INFRA_ERROR, str(host_error)
    elif follow.final is None:
        error = error or "the agent ended without a final report"
    log = directory / "server.log"
    verdict: dict[str, Any] | None = None
    if status == Status.CRASHED:
        exit_code = final.get("server_exit")
        triaged = triage_file(log, exit_code) if log.exists() else None
        verdict = triaged.to_dict() if triaged else follow.live_verdict
        if final.get("foreign_port"):
            verdict = {"category": "port-in-use", "key_line": error, "phase": "warmup", "hint": None}
    elif status == Status.HUNG:
        last = _last_line(log) if log.exists() else None
        phase = triage_file(log).phase if log.exists() else None
        verdict = {"category": "hung", "key_line": last, "phase": phase,
                   "hint": hang_hint(phase, (directory / "stack-dump.txt").exists())}
    profile = _profile_summary(directory, final)
    timings = dict(final.get("timings") or {})
    timings["total_s"] = round(elapsed, 4)
    metrics = {case: summarize(rows) for case, rows in follow.bench_rows.items()}
    hello = follow.hello or {}
    provenance = Provenance(
        base_commit=final.get("base_commit"),
        patch_sets={s.name: s.sha256 for s in r.patch_sets},
        harness_version=__version__,
        server_version=final.get("server_version"),
        flashinfer_version=final.get("flashinfer_version"),
        patch_variants=final.get("patch_variants"),
        gpu=final.get("gpus"),
        arch=final.get("arch"),
        agent_python=hello.get("python"),
        hostname=hello.get("hostname"),
    )
    # Secret flags' values go whatever their length; any other secret inside an argument is masked too.
    argv = [mask_secrets(a, follow.secrets) if isinstance(a, str) else a for a in redact_argv(spec.server.argv)]
    server = ServerInfo(argv=argv, env=redact_env(spec.server.env),
                        port=final.get("port") or spec.server.port, exit_code=final.get("server_exit"),
                        stop=final.get("stop"))
    facts = {name: final[name] for name in AGENT_FACTS if final.get(name)}
    record = Record(
        run_id=run_id, experiment=r.name, attempt=attempt, host=host_name, backend=r.backend_name,
        status=status, error=error, verdict=verdict, timings=timings,
        detect_latency_s=follow.detect_latency_s if status == Status.CRASHED else None,
        metrics=metrics, provenance=provenance, revert=final.get("revert") or recovered_revert(final),
        expect=r.experiment.expect, expectation_met=status == EXPECTED_STATUS[r.experiment.expect],
        experiment_file=str(r.file.resolve()), server=server, changed_paths=final.get("changed_paths"),
        recovered=final.get("recovered"), abort_reason=final.get("abort_reason"), profile=profile,
        slurm=follow.job, **facts,
    )
    if sweep is not None:
        record.key, record.round, record.sweep, record.try_ = sweep.key, sweep.round, sweep.sweep, sweep.try_
    return record


def recovered_revert(final: dict[str, Any]) -> dict[str, Any] | None:
    """What became of the tree when this attempt did no revert of its own: the recovery's (its dead agent's
    watchdog, the controller's `recover`, or this attempt's preflight finding an interrupted one's journal).
    Verified or not — with the paths that differ — it is the last word on the host's tree."""
    recovered = final.get("recovered")
    return recovered.get("revert") if isinstance(recovered, dict) else None


def bench_complete(spec: Spec, follow: AgentReport) -> bool:
    """Every case has sent all its repeats: the benchmark stage is over, and it succeeded."""
    return bool(spec.bench) and all(len(follow.bench_rows.get(c.name, [])) >= int(c.repeats) for c in spec.bench)


def make_provisional_record(r: Resolved, host_name: str, run_id: str, attempt: str, spec: Spec, follow: AgentReport,
                            directory: Path, elapsed: float, sweep: SweepAttempt | None = None) -> Record:
    """The record as it stands before the agent's final report: the benchmark results that arrived as events.
    Kept beside the attempt until the real record replaces it, so a controller killed in a later stage (a
    long profile, the stop) loses no finished case. With every case done its status is the benchmark's
    (`ok`): a result; else `aborted`, which runs again on resume."""
    done = bench_complete(spec, follow)
    note = ("provisional record, written during the %s stage: the controller ended before the agent's final "
            "report, %s. The agent on the host stops the server and reverts by itself (`harness status %s` shows "
            "anything left)" % (follow.stage or "bench", "after every benchmark case had finished" if done
                                else "before the benchmark had finished", host_name))
    stand_in = AgentReport(final={"status": (Status.OK if done else Status.ABORTED).value, "error": note},
                           hello=follow.hello, bench_rows=follow.bench_rows, secrets=follow.secrets)
    record = make_record(r, host_name, run_id, attempt, spec, stand_in, directory, None, elapsed, sweep)
    record.provisional = True
    return record


def _profile_summary(directory: Path, final: dict[str, Any]) -> dict[str, Any] | None:
    """The top operations by GPU time in the rank-0 trace (what the comparison's "top op" shows)."""
    traces = sorted((directory / "profile").glob("*-TP-0*.trace.json*")) if (directory / "profile").is_dir() else []
    if not traces:
        return None
    from ..triage.profile import summarize_trace

    try:
        summary = summarize_trace(traces[0], top=8)
    except (OSError, ValueError) as exc:
        final["profile_error"] = f"cannot read {traces[0].name}: {exc}"
        return None
    out = summary.to_dict()
    out["trace"] = str(traces[0].relative_to(directory))
    out["files"] = sorted(str(p.relative_to(directory)) for p in (directory / "profile").iterdir())
    return out


def _last_line(path: Path) -> str | None:
    last = None
    for raw in iter_file_lines(path):
        line = clean_line(raw).strip()
        if line:
            last = line
    return last
