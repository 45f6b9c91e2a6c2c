"""`harness bisect`: the commit of the target's history that made a bench metric worse, found on one host attempt
by attempt (docs/bisect.md); `--dry-run` prints the plan, `--resume RUN_ID` goes on where a run stopped."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..analysis.bisection import Stuck
from ..analysis.compare import metric_names
from ..errors import AgentProtocolError, ConfigError, ExitCode, HostError, Interrupted
from ..experiments.config import Experiment
from ..experiments.files import read_experiment_file
from ..experiments.project import default_hosts_file, default_patches_dir
from ..experiments.resolve import resolve
from ..render import bisecttext
from ..results.schemas import BisectInfo, Record
from ..results.store import ResultsStore, new_run_id
from ..run.resume import recorded_path, resume_command
from .common import RESULTS_HELP, check_local_python, err, exit_on_errors, open_store, out, pick_host, read_inventory
from .progress import AttemptProgress

METRIC_HELP = ("CASE:METRIC: a bench case of the experiment and a bench_serving metric (median_itl_ms, "
               "output_throughput, ...); METRIC alone when the experiment has one case.")


def bisect(
    experiment: Path = typer.Argument(..., help="Experiment YAML file: what each step runs (backend, patch sets, "
                                                "bench cases)."),
    good: Optional[str] = typer.Option(None, "--good", help="A commit (or ref) of the target repo where the metric "
                                                            "was fine."),
    bad: Optional[str] = typer.Option(None, "--bad", help="A later commit where it is worse, with good on its "
                                                          "first-parent line (default HEAD)."),
    metric: Optional[str] = typer.Option(None, "--metric", metavar="CASE:METRIC", help=METRIC_HELP),
    host: Optional[str] = typer.Option(None, "--host", help="Host or Slurm cluster from the inventory (default: the "
                                                            "only one)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
    max_attempts: int = typer.Option(3, "--max-attempts", min=1, help="Attempts at one commit whose verdict cannot "
                                                                      "be told from fewer."),
    wait: float = typer.Option(60.0, "--wait", min=0.0, help="Seconds to wait for the repo's lock (an earlier "
                                                             "attempt's agent still cleaning up)."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Run id of a bisect to go on with: its range, host "
                                                                "and metric come from its bisect.json."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (reads the host's history, changes "
                                                          "nothing) and exit."),
) -> None:
    """Bisect the target repo's history for the commit that made CASE:METRIC worse: each step an ordinary attempt
    at one commit (patch sets on top), judged against both ends; skips commits that do not run; puts HEAD back."""
    from ..run.bisect import Bisector, new_bisect, read_history

    with exit_on_errors():
        store = open_store(results_dir, announce=not dry_run, writable=not dry_run)
        info = resumed_bisect(store, resume, experiment) if resume else None
        if info is not None:
            check_same(info, good=good, bad=bad, metric=metric, host=host)
            hosts_file = recorded_path(hosts_file, info.hosts_file, "host inventory", info.run_id)
            patches_dir = recorded_path(patches_dir, info.patches_dir, "patch sets", info.run_id)
        elif good is None or metric is None:
            raise ConfigError("a bisect needs --good and --metric", hint="harness bisect EXPERIMENT --good REF "
                              "--bad REF --metric CASE:METRIC (or --resume RUN_ID to go on with one)")
        exp = read_experiment_file(experiment)
        pdir = patches_dir or default_patches_dir(experiment)
        resolved = resolve(exp.experiment, experiment, pdir, doc=exp.doc)
        if exp.experiment.base_ref:
            raise ConfigError("the experiment pins base_ref, and a bisect checks out each commit itself",
                              file=experiment, line=exp.doc.line_of(("base_ref",)), hint="remove base_ref")
        hosts_path = hosts_file or default_hosts_file(experiment)
        inventory = read_inventory(hosts_path, given=hosts_file is not None)
        name, host_cfg = pick_host(inventory.hosts, host or (info.host if info else None), hosts_path)
        check_local_python({name: host_cfg}, inventory)
        if info is None:
            assert good is not None and metric is not None
            case, metric_name = parse_metric(metric, exp.experiment, experiment)
            allow = list(host_cfg.allow_dirty) + list(exp.experiment.allow_dirty)
            history = read_history(name, host_cfg, good, bad or "HEAD", allow)
            info = new_bisect(new_run_id(), resolved, name, history, good=good, bad=bad or "HEAD", case=case,
                              metric=metric_name, max_attempts=max_attempts, hosts_file=hosts_path, patches_dir=pdir)
        if dry_run:
            show_plan(info, exp.experiment, [p.name for p in resolved.patch_sets],
                      list(store.iter_records(info.run_id)) if resume else [])
            return
        again = resume_command(experiment, info.run_id, results_dir, "bisect")
        with store.lock_run(info.run_id):
            if resume is None:
                store.write_bisect(info)
            out.print(f"run {info.run_id}: bisecting {len(info.commits) - 1} commits on {name} for "
                      f"{bisecttext.heading(info)}", highlight=False, markup=False)
            try:
                with AttemptProgress(out) as progress:
                    outcome = Bisector(info, resolved, host_cfg, store, reporter=progress, lock_wait_s=wait,
                                       say=lambda line: out.print(line, highlight=False, markup=False)).run()
            except Interrupted:
                err.print(f"interrupted: the attempt in flight was stopped and reverted; resume with\n  {again}",
                          highlight=False, markup=False)
                raise typer.Exit(ExitCode.INTERRUPTED) from None
            except (HostError, AgentProtocolError) as exc:
                err.print(f"{exc}\nthe bisect stopped; resume with\n  {again}", highlight=False, markup=False)
                raise typer.Exit(ExitCode.HOST) from None
        show_result(info, outcome.records)
        if isinstance(outcome.decision, Stuck):
            raise typer.Exit(ExitCode.FAILED)


def resumed_bisect(store: ResultsStore, run_id: str, experiment: Path) -> BisectInfo:
    info = store.find_bisect(run_id) if store.has_run(run_id) else None
    if info is None:
        raise ConfigError(f"no bisect run {run_id!r} in {store.root}",
                          hint="runs there: " + (", ".join(store.run_ids()[-10:]) or "none"))
    if Path(info.experiment_file) != experiment.resolve():
        raise ConfigError(f"run {run_id} bisects another experiment file ({info.experiment_file})",
                          hint=f"harness bisect {info.experiment_file} --resume {run_id}")
    return info


def check_same(info: BisectInfo, *, good: str | None, bad: str | None, metric: str | None, host: str | None) -> None:
    """On resume, an option given again must say what the run says (the run's own are used)."""
    given = {"--good": (good, info.good_ref), "--bad": (bad, info.bad_ref), "--host": (host, info.host),
             "--metric": (metric if metric is None or ":" in metric else f"{info.case}:{metric}",
                          f"{info.case}:{info.metric}")}
    for option, (value, own) in given.items():
        if value is not None and value != own:
            raise ConfigError(f"run {info.run_id} bisects with {option} {own}, not {value}",
                              hint="leave the option out to resume the run, or start a new bisect without --resume")


def parse_metric(text: str, exp: Experiment, file: Path) -> tuple[str, str]:
    """CASE:METRIC (or METRIC, for an experiment of one bench case), each checked against what exists."""
    cases = [c.name for c in exp.bench]
    case, _, metric = text.rpartition(":")
    if not case and len(cases) == 1:
        case = cases[0]
    if case not in cases:
        raise ConfigError(f"--metric {text}: {'no bench case ' + repr(case) if case else 'which bench case?'}",
                          file=file, hint="CASE:METRIC with CASE one of: " + (", ".join(cases) or "(none)"))
    if metric not in metric_names([]):
        raise ConfigError(f"--metric {text}: unknown metric {metric!r}", hint="metrics: " + ", ".join(metric_names([])))
    return case, metric


def show_plan(info: BisectInfo, exp: Experiment, patch_sets: list[str], records: list[Record]) -> None:
    """What the bisect will do (a resumed one: what it did so far, and what comes next)."""
    from ..analysis.bisection import Verdict, next_index

    n = len(info.commits)
    first, last = info.commits[0], info.commits[-1]
    case = next(c for c in exp.bench if c.name == info.case)
    middle = next_index({0: Verdict.GOOD, n - 1: Verdict.BAD}, n)
    lines = [f"bisect of {info.experiment} on {info.host}: {n - 1} commits after {first.sha[:10]} (good: "
             f"{info.good_ref}) up to {last.sha[:10]} (bad: {info.bad_ref}), first-parent",
             f"  metric: {bisecttext.heading(info)}; {case.repeats or exp.repeats} repeats an attempt, up to "
             f"{info.max_attempts} attempts at a commit",
             "  a step is bad when its median is nearer the bad end's and it differs from the good end (Mann-Whitney, "
             "p < 0.05,", "    at least 4 samples a side), good when nearer the good end's and it differs from the "
             "bad end; else it is measured again",
             "  each step: the commit checked out, then the experiment's patch sets "
             f"({', '.join(patch_sets) or 'none'}); after each, HEAD back on {info.branch or 'a detached HEAD'} "
             f"at {info.head[:10]}, verified",
             f"  the ends first (once each; more only if they cannot be told apart), then at most "
             f"{math.ceil(math.log2(max(n - 1, 1)))} steps (one more per skipped commit),"]
    if middle is not None:
        lines.append(f"    the first at commit {middle} {info.commits[middle].sha[:10]} {info.commits[middle].subject}")
    for line in lines:
        out.print(Text(line), soft_wrap=True)
    if records:
        show_table(info, records)
    else:
        out.print(f"run id {info.run_id} (nothing written: --dry-run)", highlight=False)


def show_table(info: BisectInfo, records: list[Record]) -> bisecttext.Table:
    """The commits tried: a table on a terminal, aligned plain lines on a pipe; then the answer."""
    table = bisecttext.build(info, records)
    rows = [bisecttext.cells(r) for r in table.rows]
    out.print(Text(bisecttext.heading(info)), soft_wrap=False)
    if out.is_terminal:
        t = Table(show_edge=False)
        for h in bisecttext.HEADERS:
            t.add_column(h, justify="right" if h in ("#", "n", "median ± CV") else "left")
        for r, cells in zip(table.rows, rows):
            style = "bold red" if "bad" in r.verdict and "first" in r.verdict else "yellow" if r.note else ""
            t.add_row(*[Text(c, style=style) for c in cells])
        out.print(t)
    else:
        widths = [max(len(x) for x in col) for col in zip(bisecttext.HEADERS, *rows)]
        for cells in [list(bisecttext.HEADERS)] + rows:
            out.print(Text("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()), soft_wrap=True)
    for note in bisecttext.notes(table):
        out.print(Text(note), soft_wrap=False)
    out.print(Text(bisecttext.LEGEND), soft_wrap=False)
    out.print(Text(bisecttext.answer_line(info, table), style="bold"), soft_wrap=True)  # a line to copy whole
    return table


def show_result(info: BisectInfo, records: list[Record]) -> None:
    show_table(info, records)
    reverted = [r for r in records if r.revert is not None]
    unverified = [r for r in reverted if r.revert is not None and not r.revert.verified]
    where = f"{info.branch} at {info.head[:10]}" if info.branch else f"detached at {info.head[:10]}"
    if unverified:
        err.print(f"[red]the tree was NOT restored after {len(unverified)} attempt(s)[/]: "
                  f"{escape(', '.join(r.attempt for r in unverified))}; `harness status {escape(info.host)}`")
    else:
        out.print(f"HEAD back on {where}: the tree restored and verified byte-identical after each of "
                  f"{len(reverted)} attempts", highlight=False, markup=False)
