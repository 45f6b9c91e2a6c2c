"""A record from what the agent reported: status, verdict (triage), metrics, provenance, profile."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .bench import summarize
from .errors import HarnessError
from .masking import mask_secrets
from .results import Record, redact_env
from .spec import Resolved
from .triage import clean_line, iter_file_lines, triage_file


@dataclass
class AgentReport:
    """What the controller learned from the agent's event stream."""

    final: dict | None = None
    hello: dict | None = None
    clock_offset: float = 0.0  # host clock minus controller clock
    ping_sent: float = 0.0
    live_verdict: dict | None = None
    detect_latency_s: float | None = None
    hung_reason: str | None = None
    bench_rows: dict[str, list[dict]] = field(default_factory=dict)
    interrupted: bool = False
    cancel: threading.Event | None = None
    secrets: list[str] = field(default_factory=list)


def make_record(r: Resolved, host_name: str, run_id: str, attempt: str, spec: dict, follow: AgentReport,
                 directory: Path, host_error: HarnessError | None, elapsed: float, record_extra: dict) -> Record:
    final = follow.final or {}
    status = final.get("status") or "infra-error"
    error = final.get("error")
    if error:
        error = mask_secrets(error, follow.secrets)
    if host_error is not None:
        status, error = "infra-error", str(host_error)
    elif follow.final is None:
        error = error or "the agent ended without a final report"
    log = directory / "server.log"
    verdict = None
    if status == "crashed":
        exit_code = final.get("server_exit")
        verdict = (triage_file(log, exit_code) if log.exists() else None)
        verdict = verdict.to_dict() if verdict else follow.live_verdict
        if final.get("foreign_port"):
            verdict = {"category": "port-in-use", "key_line": error, "phase": "warmup", "hint": None}
    elif status == "hung":
        last = _last_line(log) if log.exists() else None
        phase = triage_file(log).phase if log.exists() else None
        verdict = {"category": "hung", "key_line": last, "phase": phase,
                   "hint": "the server stopped making progress; a hang at distributed init usually means NCCL "
                           "(try NCCL_DEBUG=INFO, NCCL_P2P_DISABLE=1)"}
    profile = _profile_summary(directory, final)
    timings = dict(final.get("timings") or {})
    timings["total_s"] = round(elapsed, 4)
    metrics = {case: summarize(rows) for case, rows in follow.bench_rows.items()}
    provenance = {
        "base_commit": final.get("base_commit"),
        "patch_sets": {s.name: s.sha256 for s in r.patch_sets},
        "harness_version": __version__,
        "server_version": final.get("server_version"),
        "gpu": final.get("gpus"),
        "arch": final.get("arch"),
        "agent_python": (follow.hello or {}).get("python"),
        "hostname": (follow.hello or {}).get("hostname"),
    }
    extra = {
        "expect": r.experiment.expect,
        "expectation_met": status == {"ok": "ok", "crash": "crashed", "hang": "hung"}[r.experiment.expect],
        "experiment_file": str(r.file.resolve()),
        "server": {"argv": spec["server"]["argv"], "env": redact_env(spec["server"]["env"]),
                   "port": final.get("port") or spec["server"]["port"], "exit_code": final.get("server_exit"),
                   "stop": final.get("stop")},
        "changed_paths": final.get("changed_paths"),
        "recovered": final.get("recovered"),
        "abort_reason": final.get("abort_reason"),
        "profile": profile,
    }
    extra.update(record_extra)
    for key in ("dirty", "locked_by", "fetch_missing", "port_in_use", "cannot_run", "preflight_warnings", "arch",
                "budget_exceeded", "gpu_dirty", "profile_error"):
        if final.get(key):
            extra[key] = final[key]
    return Record(
        run_id=run_id, experiment=r.name, attempt=attempt, host=host_name, backend=r.backend_name,
        status=status, error=error, verdict=verdict, timings=timings,
        detect_latency_s=follow.detect_latency_s if status == "crashed" else None,
        metrics=metrics, provenance=provenance, revert=final.get("revert"), **extra,
    )


def _profile_summary(directory: Path, final: dict) -> dict | None:
    """The top operations by GPU time in the rank-0 trace (what the comparison's "top op" shows)."""
    traces = sorted((directory / "profile").glob("*-TP-0*.trace.json*")) if (directory / "profile").is_dir() else []
    if not traces:
        return None
    from .profile import summarize_trace

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
