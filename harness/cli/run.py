"""`harness run` (one experiment on one host) and `harness sweep` (many, over hosts, resumable)."""

from __future__ import annotations

import dataclasses
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from ..common.protocol import Status
from ..errors import ConfigError, ExitCode
from ..experiments.config import HostConfig
from ..experiments.files import SweepFile, read_experiment_file
from ..experiments.project import default_hosts_file, default_patches_dir
from ..experiments.resolve import resolve
from ..results.metrics import OUTPUT_THROUGHPUT
from ..results.schemas import RunInfo
from ..results.store import ResultsStore, new_run_id
from ..run.runner import run_attempt_in_foreground
from . import views
from .common import (
    RESULTS_HELP,
    check_local_python,
    err,
    exit_on_errors,
    open_store,
    out,
    pick_host,
    read_inventory,
)
from .export import EXPERIMENT_HELP, SweepTracking
from .progress import AttemptProgress, SweepProgress

if TYPE_CHECKING:
    from ..run.scheduler import SweepOutcome


def run(
    experiment: Path = typer.Argument(..., help="Experiment YAML file."),
    host: Optional[str] = typer.Option(None, "--host", help="Host name from the inventory (default: the only one)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for another harness's lock on the repo."),
) -> None:
    """Run one experiment on one host: patch, launch, wait, benchmark, stop, revert, record."""
    with exit_on_errors():
        exp = read_experiment_file(experiment)
        resolved = resolve(exp.experiment, experiment, patches_dir or default_patches_dir(experiment), doc=exp.doc)
        hosts_path = hosts_file or default_hosts_file(experiment)
        inventory = read_inventory(hosts_path, given=hosts_file is not None)
        name, host_cfg = pick_host(inventory.hosts, host, hosts_path)
        check_local_python({name: host_cfg}, inventory)
        store = open_store(results_dir, announce=True, writable=True)
        run_id = new_run_id()
        with AttemptProgress(out) as progress:
            outcome = run_attempt_in_foreground(resolved, name, host_cfg, store, run_id, reporter=progress,
                                                    lock_wait_s=wait)
        views.show_outcomes(out, [outcome])
        if outcome.record.status == Status.INFRA_ERROR:  # the host could not be used (e.g. another harness holds it)
            raise typer.Exit(ExitCode.HOST)


def sweep(
    sweep_file: Path = typer.Argument(..., help="Sweep YAML: a base experiment plus matrix axes, or a list."),
    hosts_opt: Optional[str] = typer.Option(None, "--hosts", help="Comma-separated host names (default: all)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
    resume: Optional[str] = typer.Option(None, "--resume", help="Run id to resume: runs what has no final record."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and exit."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
    start_within: Optional[float] = typer.Option(
        None, "--start-within", min=0.0, help="Start no attempt after this many seconds of this call (instead of the "
        "sweep's budget.sweep): those in flight finish, the rest waits for --resume. For a window that ends."),
    mlflow: Optional[str] = typer.Option(None, "--mlflow", metavar="URI", help="Also log each attempt to MLflow "
                                         "as it is recorded (see `harness export`)."),
    mlflow_experiment: Optional[str] = typer.Option(None, "--mlflow-experiment", help=EXPERIMENT_HELP),
) -> None:
    """Run every attempt of a sweep over the hosts that fit, interleaved by rounds, resumable; then compare."""
    from ..experiments.files import read_sweep_file
    from ..experiments.plan import plan_sweep
    from ..run.resume import parse_host_list, recorded_path, resume_command, run_key_basis, sweep_host_names

    with exit_on_errors():
        store = open_store(results_dir, announce=not dry_run, writable=not dry_run)
        run = resumed_run(store, resume, sweep_file) if resume else None
        if run is not None:  # what the run was planned with, unless given again
            hosts_file = recorded_path(hosts_file, run.hosts_file, "host inventory", run.run_id)
            patches_dir = recorded_path(patches_dir, run.patches_dir, "patch sets", run.run_id)
        hosts_path = hosts_file or default_hosts_file(sweep_file)
        inventory = read_inventory(hosts_path, given=hosts_file is not None)
        parsed = read_sweep_file(sweep_file)  # the one read of it: what follows takes the model
        names = sweep_host_names(parse_host_list(hosts_opt), parsed.sweep.hosts, inventory.hosts, hosts_path, run)
        hosts = {n: inventory.hosts[n] for n in names}
        # A resume keys as the run was planned, whatever hosts it runs on now: finished work is not redone.
        keyed_on = run_key_basis(run, inventory.hosts, hosts_path) if run is not None else None
        # No up-front python check here: in a sweep a host that cannot run is left out, saying why, and its
        # work stays for the others or a resume (`run`, on one host, refuses at once).
        pdir = patches_dir or default_patches_dir(sweep_file)
        run_id = run.run_id if run is not None else new_run_id()
        if dry_run:
            plan = plan_sweep(parsed, pdir, hosts, keyed_on)
            views.show_plan(out, plan, hosts)
            return
        tracking = (SweepTracking(mlflow, mlflow_experiment or parsed.sweep.name, store, run_id, results_dir)
                    if mlflow else None)
        outcome = run_sweep(parsed, pdir, hosts, store, run_id, hosts_file=hosts_path, start_within=start_within,
                            keyed_on=keyed_on, tracking=tracking)
        if store.final_records(run_id):  # none when no host could be used: nothing to compare, say why below
            views.show_comparison(out, [(store, run_id)], baseline=None, metric=OUTPUT_THROUGHPUT, fmt="table",
                                  plot_file=None)
        again = resume_command(sweep_file, run_id, results_dir)
        if outcome.interrupted:
            err.print(f"interrupted: the attempts in flight were stopped and reverted; resume with\n  {again}",
                      highlight=False)
            raise typer.Exit(ExitCode.INTERRUPTED)
        for name, when in outcome.back.items():
            if name not in outcome.down:
                out.print(f"host {escape(name)} was down, back up at {time.strftime('%H:%M', time.localtime(when))}",
                          highlight=False)
        for name, down in outcome.down.items():
            err.print(f"[red]host {escape(down.describe(name))}[/]", highlight=False)
        if outcome.left:
            why = "hosts down or unusable" if outcome.down else "sweep budget spent or hosts unusable"
            other = " (add --hosts to resume on other hosts)" if outcome.down else ""
            err.print(f"{len(outcome.left)} attempt(s) not run ({why}); resume with{other}\n  {again}",
                      highlight=False)
            raise typer.Exit(ExitCode.HOST)
        if outcome.down or any(r.status == Status.INFRA_ERROR for r in outcome.done):
            raise typer.Exit(ExitCode.HOST)  # every attempt ended, but a host failed on the way
        if outcome.done and all(r.status == Status.PREFLIGHT_FAILED for r in outcome.done):
            first = outcome.done[0]
            err.print(f"nothing ran: all {len(outcome.done)} attempt(s) were refused before launch; the first "
                      f"({first.experiment} on {first.host}): {escape(first.error or '')}", highlight=False)
            raise typer.Exit(ExitCode.HOST)  # refused before launch everywhere: nothing was measured


def resumed_run(store: ResultsStore, run_id: str, sweep_file: Path) -> RunInfo:
    """The run to resume, which must be one of this sweep file's."""
    run = store.read_run(run_id)
    if Path(run.sweep_file) != sweep_file.resolve():
        others = store.runs_of_sweep(sweep_file)
        raise ConfigError(f"run {run_id} belongs to another sweep file ({run.sweep_file})",
                          hint=("runs of this sweep: " + ", ".join(others)) if others
                          else "this sweep file has no runs yet: start one without --resume")
    return run


def run_sweep(sweep: SweepFile, patches_dir: Path, hosts: dict[str, HostConfig], store: ResultsStore,
              run_id: str, hosts_file: Path | None = None, start_within: float | None = None,
              keyed_on: tuple[str, tuple[str, ...]] | None = None, tracking: SweepTracking | None = None
              ) -> SweepOutcome:
    """Plan the sweep, write its run.json and run it (`hosts_file` and `patches_dir`: recorded for a resume)."""
    from ..experiments.plan import plan_sweep
    from ..hosts.gpus import count_gpus
    from ..run.runfile import write_run_file
    from ..run.runner import host_status
    from ..run.scheduler import Scheduler

    plan = plan_sweep(sweep, patches_dir, hosts, keyed_on)  # keys from the hosts as configured: stable on resume
    if start_within is not None:  # a limit of this call only: not part of any key or of the run file
        plan = dataclasses.replace(plan, budget=plan.budget.model_copy(update={"sweep": start_within}))
    # --mlflow: the parent run is made before any host is touched (an unreachable tracker is refused then), and
    # the whole run exported once more when the sweep ends.
    with store.lock_run(run_id), tracking if tracking is not None else nullcontext():
        counted = count_gpus(hosts, host_status)
        write_run_file(store, run_id, plan, hosts, hosts_file=hosts_file, patches_dir=patches_dir,
                       host_gpus=counted.asked)
        out.print(f"run {run_id}: {len(plan.attempts)} attempts ({len(plan.experiments)} experiments) on "
                  f"{', '.join(hosts)}", highlight=False)
        for name, arch in counted.learned_arch.items():
            out.print(f"host {escape(name)}: arch {arch}, from its GPUs (its inventory entry has no arch:)",
                      highlight=False)
        for name, why in counted.unusable.items():
            err.print(f"[yellow]host {escape(name)} is not used in this sweep:[/] {escape(why)}", highlight=False)
        with SweepProgress(out, total=len(plan.attempts)) as progress:
            reporter = tracking.reporter(progress) if tracking is not None else progress
            outcome = Scheduler(plan, {**hosts, **counted.usable}, store, run_id, reporter=reporter,
                                unusable=counted.unusable, probe=host_status).run()
    if outcome.skipped:
        out.print(f"{len(outcome.skipped)} attempt(s) already had a final record and were not run again",
                  highlight=False)
    return outcome
