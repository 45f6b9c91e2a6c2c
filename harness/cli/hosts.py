"""`harness status` and `harness recover`: what each host holds, and finishing an interrupted attempt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ..common.protocol import Status
from ..errors import ExitCode, HarnessError
from ..hosts.slurm import JobInfo, describe
from .common import err, exit_on_errors, out, pick_host, read_inventory


def status(
    hosts: Optional[list[str]] = typer.Argument(None, help="Host names (default: every host in the inventory)."),
    hosts_file: Path = typer.Option(Path("hosts.yaml"), "--hosts-file", help="Host inventory."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON."),
) -> None:
    """Each host's lock holder, leftover journal (an interrupted attempt), dirty files and GPU processes.
    Exits 3 when a host cannot be reached (or its agent cannot look) or processes hold its GPUs' memory."""
    from ..run.runner import host_status

    with exit_on_errors():
        inventory = read_inventory(hosts_file)
        names = hosts or list(inventory.hosts)
        results = {}
        for name in names:
            _, cfg = pick_host(inventory.hosts, name, hosts_file)
            try:
                results[name] = host_status(name, cfg)
            except HarnessError as exc:
                results[name] = {"status": "unreachable", "error": str(exc)}
        if as_json:
            print(json.dumps(results, indent=1, default=str))
        else:
            _show_status(results)
        trouble = [f"{n}: {why}" for n, st in results.items() if (why := not_ready(st))]
        if trouble:
            err.print("not ready: " + escape("; ".join(trouble)), highlight=False)
            raise typer.Exit(ExitCode.HOST)


def not_ready(st: dict) -> str | None:
    """Pure: why a host's status says it cannot take an attempt now (unreachable, its agent could not look,
    GPU memory held by processes), or None. A cluster's GPUs are its nodes': only its reachability counts."""
    if st.get("status") == "unreachable":
        return "unreachable"
    if st.get("status") not in (None, Status.OK, Status.OK.value):
        return f"its agent could not look at the host ({st.get('status')})"
    apps = st.get("gpu_apps") or {}
    if apps and "queue" not in st:
        return "GPU memory held by " + ", ".join(f"pid {p}" for p in apps)
    return None


def _show_status(results: dict[str, dict]) -> None:
    for name, st in results.items():
        if st.get("status") == "unreachable":
            out.print(f"[bold]{escape(name)}[/]: [red]unreachable[/] — {escape(st['error'])}", highlight=False)
            continue
        lock = st.get("lock") or {}
        lock_s = (f"locked by run {lock.get('run_id')} attempt {lock.get('attempt_id')} (pid {lock.get('pid')}) "
                  f"since {lock.get('since')}") if lock.get("held") else "free"
        journal = st.get("journal")
        journal_s = (f"[red]left by attempt {journal.get('attempt_id')} of run {journal.get('run_id')}[/] "
                     f"(server pid {(journal.get('server') or {}).get('pid')}); run `harness recover {name}`"
                     ) if journal else "none"
        gpus = st.get("gpus") or []
        apps = st.get("gpu_apps") or {}
        out.print(f"[bold]{escape(name)}[/]: repo {escape(str(st.get('repo')))} at {str(st.get('head'))[:12]}")
        out.print(f"    lock: {lock_s}", highlight=False)
        out.print(f"    journal: {journal_s}", highlight=False)
        out.print(f"    dirty files: {len(st.get('dirty') or [])}", highlight=False)
        if "queue" in st:  # a cluster: the GPUs are the nodes', its jobs are what runs
            jobs = st["queue"]
            out.print("    jobs in the queue: " + (", ".join(
                f"{j['job_id']} {describe(JobInfo(j['job_id'], j['state'], j['reason'], j['node']))}"
                for j in jobs) or "none"), highlight=False)
            continue
        out.print(f"    GPUs: {len(gpus)} x {gpus[0]['name'] if gpus else '?'}; processes holding memory: "
                  + (", ".join(f"pid {p} ({mib} MiB)" for p, mib in apps.items()) or "none"), highlight=False)


def recover(
    host: str = typer.Argument(..., help="Host name from the inventory."),
    hosts_file: Path = typer.Option(Path("hosts.yaml"), "--hosts-file", help="Host inventory."),
) -> None:
    """Finish an interrupted attempt on a host: stop its server (only if still the same process) and restore
    the tree exactly from its journal."""
    from ..run.runner import recover_host

    with exit_on_errors():
        inventory = read_inventory(hosts_file)
        name, cfg = pick_host(inventory.hosts, host, hosts_file)
        res = recover_host(name, cfg)
        if res.get("status") not in (None, Status.OK):
            err.print(f"[red]recovery failed:[/] {escape(str(res.get('error')))}", highlight=False)
            raise typer.Exit(ExitCode.HOST)
        rec = res.get("recovered")
        if not rec:
            out.print(f"{name}: no journal, nothing to recover")
            return
        j = rec["journal"]
        out.print(f"{name}: recovered attempt {j.get('attempt_id')} of run {j.get('run_id')}: server "
                  f"{rec['stop'].get('state')}; tree restored "
                  f"{'byte-identical' if rec['revert']['verified'] else '[red]NOT identical[/]'}", highlight=False)
