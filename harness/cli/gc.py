"""`harness gc`: each host's attempt cache (the attempt folders under its work dir, fetched into the results
folder long ago) cleaned by a retention rule — never an attempt in use; `--dry-run` lists what would go."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ..common.protocol import GcReport, GcRequest, Mode, Status
from ..errors import ConfigError, ExitCode, HarnessError
from ..experiments.config import ClusterHost, HostConfig
from .common import err, exit_on_errors, out, pick_host, read_inventory

DEFAULT_INVENTORY = Path("hosts.yaml")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def gc(
    hosts: Optional[list[str]] = typer.Argument(None, help="Host names (default: every host in the inventory)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    older_than: float = typer.Option(14.0, "--older-than", min=0.0, help="Remove attempt folders nothing was "
                                     "written to for this many days."),
    max_size: Optional[str] = typer.Option(None, "--max-size", help="Then remove the oldest until the rest fit in "
                                           "this size (e.g. 50G, 500M)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List each folder and what the rule does with it; "
                                 "remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print each host's report as JSON."),
) -> None:
    """Clean each host's attempt cache (its work dir's attempts/): folders older than --older-than days, then
    the oldest beyond --max-size. Never one in use: the attempt holding the repo's lock, one whose journal is
    left, one a live process belongs to, one written to in the last hour. Records stay in the results folder.
    Exits 3 when a host cannot be reached or cleaned."""
    with exit_on_errors():
        inventory = read_inventory(hosts_file or DEFAULT_INVENTORY, given=hosts_file is not None)
        request = GcRequest(older_than_days=older_than, max_bytes=parse_size(max_size) if max_size else None,
                            dry_run=dry_run)
        results: dict[str, GcReport | str] = {}
        for name in hosts or list(inventory.hosts):
            _, cfg = pick_host(inventory.hosts, name, inventory.path)
            results[name] = clean(name, cfg, request)
        if as_json:
            print(json.dumps({n: r.to_dict() if isinstance(r, GcReport) else {"error": r} for n, r in results.items()},
                             indent=1))
        else:
            for name, report in results.items():
                show(name, report)
        trouble = [n for n, r in results.items() if isinstance(r, str) or any(e.error for e in r.entries)]
        if trouble:
            err.print("not cleaned: " + escape(", ".join(trouble)), highlight=False)
            raise typer.Exit(ExitCode.HOST)


def clean(name: str, cfg: HostConfig, request: GcRequest) -> GcReport | str:
    """The host's report, or why there is none."""
    from ..run.runner import service

    if isinstance(cfg, ClusterHost):  # its jobs run on nodes the login node cannot see into
        return "a cluster's work dir is shared with jobs on its nodes: gc cleans hosts, not clusters"
    try:
        final = service(name, cfg, Mode.GC.value, gc=request)
    except HarnessError as exc:
        return str(exc)
    if final.status != Status.OK or final.gc is None:
        return final.error or f"its agent answered {final.status}"
    return final.gc


def show(name: str, report: GcReport | str) -> None:
    if isinstance(report, str):
        out.print(f"[bold]{escape(name)}[/]: [red]not cleaned[/] — {escape(report)}", highlight=False)
        return
    going = [e for e in report.entries if e.remove]
    total = sum(e.size_bytes for e in report.entries)
    out.print(f"[bold]{escape(name)}[/]: {len(report.entries)} attempt folder(s), {human(total)}, in "
              f"{escape(report.workdir)}/attempts", highlight=False)
    for e in report.entries:
        if not (report.dry_run or e.remove or e.why.startswith("in use")):
            continue  # a real run lists what went and what is in use; a dry run, everything
        verb = ("would remove" if report.dry_run else "removed" if e.removed else "FAILED") if e.remove else "keep"
        out.print(f"  {verb:<12}  {escape(e.run_id)}/{escape(e.attempt_id)}  {human(e.size_bytes)}, "
                  f"{e.age_s / 86400:.1f} days: {escape(e.error or e.why)}", highlight=False)
    freed = sum(e.size_bytes for e in going if e.removed or report.dry_run)
    out.print(f"  {'would free' if report.dry_run else 'freed'} {human(freed)} ({len(going)} folder(s)); "
              f"{len(report.entries) - len(going)} kept", highlight=False)


def parse_size(text: str) -> int:
    """`50G`, `500M`, `1.5T`, `2048` (bytes): binary units, as `du -h` shows them."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None:
        raise ConfigError(f"--max-size {text!r} is not a size", hint="write it like 50G, 500M or a number of bytes")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


def human(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if size >= UNITS[unit]:
            return f"{size / UNITS[unit]:.1f} {unit}B"
    return f"{size} B"
