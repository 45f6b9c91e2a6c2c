"""`harness status` and `harness recover`: what each host holds, and finishing an interrupted attempt."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from ..common.protocol import Final, LockState, RepoStatus, Status
from ..errors import ExitCode, HarnessError
from ..experiments.config import ClusterHost, HostConfig
from ..hosts.slurm import JobInfo, describe
from .common import err, exit_on_errors, out, pick_host, read_inventory

DEFAULT_INVENTORY = Path("hosts.yaml")


@dataclass
class HostView:
    """One host as `harness status` shows it: the agent's look (`final`), a cluster's jobs in the queue, or
    why the host could not be reached."""

    final: Final | None = None
    queue: list[JobInfo] | None = None  # a cluster: this harness's jobs (its GPUs are the nodes')
    unreachable: str | None = None  # why the host (or its agent) could not be reached

    def to_json(self) -> dict[str, Any]:
        if self.unreachable is not None:
            return {"status": "unreachable", "error": self.unreachable}
        out = self.final.to_dict() if self.final is not None else {}
        if self.queue is not None:
            out["queue"] = [asdict(j) for j in self.queue]
        return out


def status(
    hosts: Optional[list[str]] = typer.Argument(None, help="Host names (default: every host in the inventory)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON."),
) -> None:
    """Each host's lock holder, leftover journal (an interrupted attempt), dirty files and GPU processes.
    Exits 3 when a host cannot be reached (or its agent cannot look) or processes hold its GPUs' memory."""
    with exit_on_errors():
        inventory = read_inventory(hosts_file or DEFAULT_INVENTORY, given=hosts_file is not None)
        names = hosts or list(inventory.hosts)
        results: dict[str, HostView] = {}
        for name in names:
            _, cfg = pick_host(inventory.hosts, name, inventory.path)
            results[name] = look_at(name, cfg)
        if as_json:
            print(json.dumps({n: v.to_json() for n, v in results.items()}, indent=1, default=str))
        else:
            _show_status(results)
        trouble = [f"{n}: {why}" for n, view in results.items() if (why := not_ready(view))]
        if trouble:
            err.print("not ready: " + escape("; ".join(trouble)), highlight=False)
            raise typer.Exit(ExitCode.HOST)


def look_at(name: str, cfg: HostConfig) -> HostView:
    """The host's status through its agent (and a cluster's queue), or why it could not be had."""
    from ..hosts.slurmjob import queued_jobs
    from ..run.runner import host_status

    try:
        final = host_status(name, cfg)
        return HostView(final, queue=queued_jobs(name, cfg) if isinstance(cfg, ClusterHost) else None)
    except HarnessError as exc:
        return HostView(unreachable=str(exc))


def not_ready(view: HostView) -> str | None:
    """Pure: why a host's status says it cannot take an attempt now (unreachable, its agent could not look,
    GPU memory held by processes), or None. A cluster's GPUs are its nodes': only its reachability counts."""
    if view.unreachable is not None:
        return "unreachable"
    final = view.final
    if final is not None and final.status != Status.OK:
        return f"its agent could not look at the host ({final.status})"
    apps = (final.repo_status.gpu_apps if final is not None and final.repo_status is not None else None) or {}
    if apps and view.queue is None:
        return "GPU memory held by " + ", ".join(f"pid {p}" for p in apps)
    return None


def _show_status(results: dict[str, HostView]) -> None:
    for name, view in results.items():
        if view.unreachable is not None:
            out.print(f"[bold]{escape(name)}[/]: [red]unreachable[/] — {escape(view.unreachable)}", highlight=False)
            continue
        st = (view.final.repo_status if view.final is not None else None) or RepoStatus()
        lock = st.lock or LockState()
        lock_s = (f"locked by run {lock.run_id} attempt {lock.attempt_id} (pid {lock.pid}) "
                  f"since {lock.since}") if lock.held else "free"
        journal = st.journal
        journal_s = (f"[red]left by attempt {journal.attempt_id} of run {journal.run_id}[/] "
                     f"(server pid {journal.server.pid if journal.server else None}); run `harness recover {name}`"
                     ) if journal else "none"
        gpus = st.gpus or []
        apps = st.gpu_apps or {}
        out.print(f"[bold]{escape(name)}[/]: repo {escape(str(st.repo or None))} at {str(st.head)[:12]}")
        out.print(f"    lock: {lock_s}", highlight=False)
        out.print(f"    journal: {journal_s}", highlight=False)
        out.print(f"    dirty files: {len(st.dirty or [])}", highlight=False)
        if view.queue is not None:  # a cluster: the GPUs are the nodes', its jobs are what runs
            out.print("    jobs in the queue: " + (", ".join(f"{j.job_id} {describe(j)}" for j in view.queue)
                                                   or "none"), highlight=False)
            continue
        out.print(f"    GPUs: {len(gpus)} x {gpus[0].name if gpus else '?'}; processes holding memory: "
                  + (", ".join(f"pid {p} ({mib} MiB)" for p, mib in apps.items()) or "none"), highlight=False)


def recover(
    host: str = typer.Argument(..., help="Host name from the inventory."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
) -> None:
    """Finish an interrupted attempt on a host: stop its server (only if still the same process) and restore
    the tree exactly from its journal."""
    from ..run.runner import recover_host

    with exit_on_errors():
        inventory = read_inventory(hosts_file or DEFAULT_INVENTORY, given=hosts_file is not None)
        name, cfg = pick_host(inventory.hosts, host, inventory.path)
        res = recover_host(name, cfg)
        if res.status != Status.OK:
            err.print(f"[red]recovery failed:[/] {escape(str(res.error))}", highlight=False)
            raise typer.Exit(ExitCode.HOST)
        rec = res.recovered
        if rec is None:
            out.print(f"{name}: no journal, nothing to recover")
            return
        j = rec.journal
        out.print(f"{name}: recovered attempt {j.attempt_id} of run {j.run_id}: server "
                  f"{rec.stop.state}; tree restored "
                  f"{'byte-identical' if rec.revert.verified else '[red]NOT identical[/]'}", highlight=False)
