"""A record from what the agent reported: status, verdict (triage), metrics, provenance, profile."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..analysis.answers import own_stats, parse_answers
from ..common.protocol import Final, Hello, RevertReport, Spec, Status
from ..errors import HarnessError
from ..experiments.resolve import Resolved
from ..masking import mask_secrets, redact_argv, redact_env
from ..results.attemptdir import AttemptDir
from ..results.metrics import summarize
from ..results.schemas import Provenance, Record, Recovered, ServerInfo, SlurmJob, SweepAttempt
from ..triage.classify import hang_hint, triage_file
from ..triage.logtext import clean_line, iter_file_lines


@dataclass
class AgentReport:
    """What the controller learned from the agent's event stream."""

    final: Final | None = None
    hello: Hello | None = None
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
    fetch_missing: list[str] = field(default_factory=list)  # artifacts that did not arrive whole


# An experiment's `expect:` → the status that meets it.
EXPECTED_STATUS = {Status.OK.value: Status.OK, "crash": Status.CRASHED, "hang": Status.HUNG}


def agent_facts(final: Final, fetch_missing: list[str], profile_error: str | None) -> dict[str, Any]:
    """What the agent reports only when it applies: a record carries each one only when it is set (and truthy)."""
    pre = final.preflight
    cases = {case.name: case for case in final.bench.cases or []}
    facts = {"dirty": pre.dirty, "locked_by": pre.locked_by, "fetch_missing": fetch_missing,
             "port_in_use": pre.port_in_use, "cannot_run": pre.cannot_run, "preflight_warnings": pre.warnings,
             "arch": pre.arch, "budget_exceeded": final.budget_exceeded, "gpu_dirty": final.gpu_dirty,
             "profile_error": profile_error, "bench_cases": cases}
    return {name: value for name, value in facts.items() if value}


def make_record(r: Resolved, host_name: str, run_id: str, attempt: str, spec: Spec, follow: AgentReport,
                directory: Path, host_error: HarnessError | None, elapsed: float,
                sweep: SweepAttempt | None = None) -> Record:
    final = follow.final or Final(status=Status.INFRA_ERROR)
    status = final.status
    error = final.error
    if error:
        error = mask_secrets(error, follow.secrets)
    if host_error is not None:
        status, error = Status.INFRA_ERROR, str(host_error)
    elif follow.final is None:
        error = error or "the agent ended without a final report"
    folder = AttemptDir(directory)
    log = folder.server_log
    verdict: dict[str, Any] | None = None
    if status == Status.CRASHED:
        exit_code = final.server.exit_code
        triaged = triage_file(log, exit_code) if log.exists() else None
        verdict = triaged.to_dict() if triaged else follow.live_verdict
        if final.server.foreign_port:
            verdict = {"category": "port-in-use", "key_line": error, "phase": "warmup", "hint": None}
    elif status == Status.HUNG:
        last = _last_line(log) if log.exists() else None
        phase = triage_file(log).phase if log.exists() else None
        verdict = {"category": "hung", "key_line": last, "phase": phase,
                   "hint": hang_hint(phase, folder.stack_dump.exists())}
    profile, profile_error = _profile_summary(folder)
    timings = dict(final.timings)
    timings["total_s"] = round(elapsed, 4)
    metrics = {case: summarize(rows) for case, rows in follow.bench_rows.items()}
    pre = final.preflight
    provenance = Provenance(
        base_commit=pre.base_commit,
        patch_sets={s.name: s.sha256 for s in r.patch_sets},
        harness_version=__version__,
        server_version=pre.server_version,
        flashinfer_version=pre.flashinfer_version,
        patch_variants=pre.patch_variants,
        gpu=[g.to_dict() for g in pre.gpus] if pre.gpus is not None else None,
        arch=pre.arch,
        agent_python=follow.hello.python if follow.hello else None,
        hostname=follow.hello.hostname if follow.hello else None,
        stack=pre.stack,
    )
    # Secret flags' values go whatever their length; any other secret inside an argument is masked too.
    argv = [mask_secrets(a, follow.secrets) if isinstance(a, str) else a for a in redact_argv(spec.server.argv)]
    server = ServerInfo(argv=argv, env=redact_env(spec.server.env),
                        port=pre.port or spec.server.port, exit_code=final.server.exit_code,
                        stop=final.server.stop)
    facts = agent_facts(final, follow.fetch_missing, profile_error or final.bench.profile_error)
    record = Record(
        run_id=run_id, experiment=r.name, attempt=attempt, host=host_name, backend=r.backend_name,
        status=status, error=error, verdict=verdict, timings=timings,
        detect_latency_s=follow.detect_latency_s if status == Status.CRASHED else None,
        metrics=metrics, provenance=provenance, revert=final.revert or recovered_revert(final),
        expect=r.experiment.expect, expectation_met=status == EXPECTED_STATUS[r.experiment.expect],
        experiment_file=str(r.file.resolve()), server=server, changed_paths=final.patch.changed_paths,
        recovered=Recovered.of(final.recovered) if final.recovered else None, abort_reason=final.abort_reason,
        profile=profile,
        answers=answers_stats(folder), slurm=follow.job, **facts, **({"checkout": r.checkout} if r.checkout else {}),
    )
    if sweep is not None:
        record.key, record.round, record.sweep, record.try_ = sweep.key, sweep.round, sweep.sweep, sweep.try_
    return record


def recovered_revert(final: Final) -> RevertReport | None:
    """What became of the tree when this attempt did no revert of its own: the recovery's (its dead agent's
    watchdog, the controller's `recover`, or this attempt's preflight finding an interrupted one's journal).
    Verified or not — with the paths that differ — it is the last word on the host's tree."""
    return final.recovered.revert if final.recovered is not None else None


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
    stand_in = AgentReport(final=Final(status=Status.OK if done else Status.ABORTED, error=note),
                           hello=follow.hello, bench_rows=follow.bench_rows, secrets=follow.secrets)
    record = make_record(r, host_name, run_id, attempt, spec, stand_in, directory, None, elapsed, sweep)
    record.provisional = True
    return record


def _profile_summary(folder: AttemptDir) -> tuple[dict[str, Any] | None, str | None]:
    """The top operations by GPU time in the rank-0 trace (what the comparison's "top op" shows), or why the
    trace that came cannot be read."""
    traces = folder.rank0_traces()
    if not traces:
        return None, None
    try:  # imported here, and never at the record's expense: a host image may lack the streaming parser
        from ..triage.profile import summarize_trace
    except ImportError as exc:
        return None, f"cannot summarise {traces[0].name}: {exc} (install the harness with its dependencies)"
    try:
        summary = summarize_trace(traces[0], top=8)
    except (OSError, ValueError) as exc:
        return None, f"cannot read {traces[0].name}: {exc}"
    out = summary.to_dict()
    out["trace"] = folder.relative(traces[0])
    out["files"] = folder.profile_files()
    return out, None


def answers_stats(folder: AttemptDir) -> dict[str, Any] | None:
    """The answer check's own facts, from the answers.json fetched beside the record (none: no answer check)."""
    path = folder.answers()
    if not path.is_file():
        return None
    try:
        return own_stats(parse_answers(json.loads(path.read_text(encoding="utf-8"))))
    except (OSError, ValueError) as exc:  # BadAnswers and JSON errors are ValueErrors
        return {"file": path.name, "error": f"cannot read {path.name}: {exc}"}


def _last_line(path: Path) -> str | None:
    last = None
    for raw in iter_file_lines(path):
        line = clean_line(raw).strip()
        if line:
            last = line
    return last
