"""`results/<run-id>/run.json`: a sweep's plan, written before it runs, and what `--resume` reads back to plan
it again alike (resume.py says how)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..experiments.config import HostConfig
from ..experiments.plan import Plan
from ..results.schemas import PlannedEntry, RunInfo
from ..results.store import ResultsStore


def write_run_file(store: ResultsStore, run_id: str, plan: Plan, hosts: Mapping[str, HostConfig], *,
                   hosts_file: Path | None = None, patches_dir: Path | None = None,
                   host_gpus: Mapping[str, int] | None = None) -> Path:
    """The run's plan and what `--resume` needs to plan it again alike (its hosts, their inventory, the
    patch sets), so a resume runs what has no final record (replaced on resume: the newest plan counts).
    The paths are provenance: recorded, never read here."""
    return store.write_run(RunInfo(
        run_id=run_id, sweep=plan.name, sweep_file=str(plan.file.resolve()), baseline=plan.baseline,
        hosts=sorted(hosts), hosts_file=str(hosts_file.resolve()) if hosts_file else None,
        patches_dir=str(patches_dir.resolve()) if patches_dir else None, host_gpus=dict(host_gpus or {}),
        key_signature=plan.key_signature or None, key_archs=list(plan.key_archs),
        attempts=[PlannedEntry(key=a.key, experiment=a.name, round=a.round, order=a.order,
                               backend=a.resolved.backend_name, arch=a.arch) for a in plan.attempts]))
