"""Command line: the only place that prints and exits.

Exit codes: 0 every attempt ended with a record (whatever its status); 2 configuration error;
3 a host could not be reached or used; 130 interrupted (after cleaning up).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__, views
from .config import HostConfig, Inventory, load_experiment, load_inventory
from .errors import EXIT_INTERRUPTED, ConfigError, HarnessError
from .exits import errors_to_exit_codes, exit_code, signal_as_interrupt
from .progress import AttemptProgress, SweepProgress
from .project import (
    bundled_dir,
    default_hosts_file,
    default_patches_dir,
    default_patches_dir_here,
    default_results_dir,
    missing_inventory_hint,
)
from .protocol import Status
from .resolve import resolve
from .results import ResultsStore, new_run_id
from .runner import run_attempt_in_foreground
from .schemas import RunInfo

if TYPE_CHECKING:
    from .patchsets import PatchSet
    from .scheduler import SweepOutcome

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Declarative, fast-to-fail, safe experiments on SGLang servers over SSH.")
sim_app = typer.Typer(no_args_is_help=True, help="The simulated SGLang target (no GPU needed).")
app.add_typer(sim_app, name="sim")
patch_app = typer.Typer(no_args_is_help=True, help="Make a patch set from your SGLang checkout; check one against it.")
app.add_typer(patch_app, name="patch")

# soft_wrap: never break a line inside a path or a command a user may copy.
# On a pipe rich assumes 80 columns: tables (plans, comparisons) would be folded into unreadable cells, so 180
# unless COLUMNS says otherwise (e.g. COLUMNS=80 for a mail or a narrow log viewer).
_PIPE_WIDTH = None if sys.stdout.isatty() else (int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit()
                                                else 180)
out = Console(soft_wrap=True, width=_PIPE_WIDTH)
err = Console(stderr=True, soft_wrap=True)
_debug = False
REPORT_DIR = "report"  # the demo's page: results/<run>/report/index.html
RESULTS_HELP = ("Where records go (default: $HARNESS_RESULTS_DIR, else results/ of the checkout harness runs from, "
                "else ~/.local/share/harness/results; never the current folder).")


def _print_version(value: bool) -> None:
    # Eager: runs while parsing, before click asks for a command (else `harness --version` is "Missing command").
    if value:
        out.print(f"harness {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
          version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    global _debug
    _debug = debug


# ============================================================================ commands


@app.command()
def run(
    experiment: Path = typer.Argument(..., help="Experiment YAML file."),
    host: Optional[str] = typer.Option(None, "--host", help="Host name from the inventory (default: the only one)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for another harness's lock on the repo."),
) -> None:
    """Run one experiment on one host: patch, launch, wait, benchmark, stop, revert, record."""
    with errors_to_exit_codes(err, _debug):
        exp = load_experiment(experiment)
        resolved = resolve(exp, experiment, patches_dir or default_patches_dir(experiment))
        hosts_path = hosts_file or default_hosts_file(experiment)
        inventory = _inventory(hosts_path)
        name, host_cfg = _pick_host(inventory.hosts, host, hosts_path)
        store = _open_store(results_dir, announce=True)
        run_id = new_run_id()
        with AttemptProgress(out) as progress:
            outcome = run_attempt_in_foreground(resolved, name, host_cfg, store, run_id, reporter=progress,
                                                    lock_wait_s=wait)
        views.show_outcomes(out, [outcome])
        if outcome.record.status == Status.INFRA_ERROR:  # the host could not be used (e.g. another harness holds it)
            raise typer.Exit(3)


@app.command()
def triage(
    logfile: Path = typer.Argument(..., help="An SGLang server log (any size; read streamed)."),
    exit_code: Optional[int] = typer.Option(None, "--exit-code", help="The server's exit code, if known."),
    as_json: bool = typer.Option(False, "--json", help="Print {verdict, category, key_line, phase, hint}."),
) -> None:
    """Say why a server log ended: ready, crash (category, key line, phase, hint) or incomplete."""
    import json

    from .triage import triage_file

    with errors_to_exit_codes(err, _debug):
        if not logfile.is_file():
            raise ConfigError("log file not found", file=logfile)
        v = triage_file(logfile, exit_code)
        if as_json:
            print(json.dumps(v.to_dict()))
            return
        style = {"ready": "green", "crash": "red"}.get(v.verdict, "yellow")
        out.print(f"[{style}]{v.verdict}[/]: {v.category} (phase: {v.phase})")
        if v.key_line:
            out.print(f"key line: {escape(v.key_line)}", highlight=False)
        if v.hint:
            out.print(f"hint: {escape(v.hint)}", highlight=False)


@app.command()
def status(
    hosts: Optional[list[str]] = typer.Argument(None, help="Host names (default: every host in the inventory)."),
    hosts_file: Path = typer.Option(Path("hosts.yaml"), "--hosts-file", help="Host inventory."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON."),
) -> None:
    """Each host's lock holder, leftover journal (an interrupted attempt), dirty files and GPU processes."""
    from .runner import host_status

    with errors_to_exit_codes(err, _debug):
        inventory = _inventory(hosts_file)
        names = hosts or list(inventory.hosts)
        results = {}
        for name in names:
            _, cfg = _pick_host(inventory.hosts, name, hosts_file)
            try:
                results[name] = host_status(name, cfg)
            except HarnessError as exc:
                results[name] = {"status": "unreachable", "error": str(exc)}
        if as_json:
            print(json.dumps(results, indent=1, default=str))
            return
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
            out.print(f"    GPUs: {len(gpus)} x {gpus[0]['name'] if gpus else '?'}; processes holding memory: "
                      + (", ".join(f"pid {p} ({mib} MiB)" for p, mib in apps.items()) or "none"), highlight=False)


@app.command()
def recover(
    host: str = typer.Argument(..., help="Host name from the inventory."),
    hosts_file: Path = typer.Option(Path("hosts.yaml"), "--hosts-file", help="Host inventory."),
) -> None:
    """Finish an interrupted attempt on a host: stop its server (only if still the same process) and restore
    the tree exactly from its journal."""
    from .runner import recover_host

    with errors_to_exit_codes(err, _debug):
        inventory = _inventory(hosts_file)
        name, cfg = _pick_host(inventory.hosts, host, hosts_file)
        res = recover_host(name, cfg)
        if res.get("status") not in (None, Status.OK):
            err.print(f"[red]recovery failed:[/] {escape(str(res.get('error')))}", highlight=False)
            raise typer.Exit(3)
        rec = res.get("recovered")
        if not rec:
            out.print(f"{name}: no journal, nothing to recover")
            return
        j = rec["journal"]
        out.print(f"{name}: recovered attempt {j.get('attempt_id')} of run {j.get('run_id')}: server "
                  f"{rec['stop'].get('state')}; tree restored "
                  f"{'byte-identical' if rec['revert']['verified'] else '[red]NOT identical[/]'}", highlight=False)


@app.command("profile-summary")
def profile_summary(
    trace: Path = typer.Argument(..., help="A torch-profiler trace (.json or .json.gz), e.g. SGLang's "
                                           "*-TP-0.trace.json.gz; read streamed."),
    top: int = typer.Option(10, "--top", help="How many operations to list."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """The operations that take the GPU's time, kernels grouped under the framework op that launched them."""
    from .profile import summarize_trace

    with errors_to_exit_codes(err, _debug):
        if not trace.is_file():
            raise ConfigError("trace file not found", file=trace)
        try:
            summary = summarize_trace(trace, top=top)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"not a readable Chrome/torch-profiler trace: {exc}", file=trace) from None
        if as_json:
            print(json.dumps(summary.to_dict(), indent=1))
            return
        per_step_us = summary.per_step_us
        per_step = (f", {per_step_us / 1e3:.2f} ms per step over {summary.steps} steps" if per_step_us is not None
                    else "")
        out.print(f"GPU time {summary.total_gpu_us / 1e3:.2f} ms in {summary.kernels} kernels{per_step}",
                  highlight=False)
        table = Table(box=None, show_header=True, header_style="bold")
        for col in ("share", "GPU ms", "calls", "operation", "top kernel"):
            table.add_column(col)
        for op in summary.top:
            table.add_row(f"{op.share * 100:5.1f}%", f"{op.gpu_us / 1e3:.2f}", str(op.calls), escape(op.name),
                          escape(op.kernels[0][0][:80]) if op.kernels else "")
        out.print(table)


@sim_app.command("init")
def sim_init(
    directory: Path = typer.Argument(..., help="Where to create the simulated SGLang checkout."),
    arch: str = typer.Option("sm90", "--arch", help="Simulated GPU architecture: sm90, sm100 or sm120."),
    gpus: int = typer.Option(8, "--gpus", help="Number of simulated GPUs."),
    flashinfer_version: str = typer.Option(
        "0.7.2", "--flashinfer-version",
        help="Version of the simulated FlashInfer (what its FP8 MLA kernels do depends on it: harness/sim/README.md)."),
) -> None:
    """Create a simulated SGLang target (a git repo) and print the interpreter path for hosts.yaml."""
    from .sim import ARCHES, init_target

    with errors_to_exit_codes(err, _debug):
        if arch not in ARCHES:
            raise ConfigError(f"unknown arch {arch!r}", hint=f"choose one of: {', '.join(ARCHES)}")
        try:
            target = init_target(directory, arch=arch, gpus=gpus, flashinfer_version=flashinfer_version)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        out.print(f"simulated SGLang target created at {target.repo} ({arch}, {gpus} GPUs, "
                  f"FlashInfer {flashinfer_version})", highlight=False)
        out.print("add it to hosts.yaml (a new file, or the entry under your `hosts:`):", highlight=False)
        out.print(sim_host_entry("sim", str(target.repo), str(target.python), gpus, arch),
                  highlight=False, markup=False)
        print(target.python)


@app.command()
def demo(
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """Sweep the five backends (and the seed story's crash and hang) over two simulated targets of
    different GPU arch — an H200 (sm90) and a B200 (sm100) — then print the comparison table."""
    from .sim import init_target

    with errors_to_exit_codes(err, _debug):
        sweep_file = bundled_dir("experiments") / "sim" / "all-backends.yaml"
        patches_dir = bundled_dir("patches")
        with tempfile.TemporaryDirectory(prefix="harness-demo-") as tmp:
            hosts = {}
            for name, arch in (("sim-h200", "sm90"), ("sim-b200", "sm100")):
                target = init_target(Path(tmp) / name, arch=arch, gpus=8)
                hosts[name] = HostConfig(address="local", repo=str(target.repo), python=str(target.python), gpus=8,
                                         arch=arch, workdir=str(Path(tmp) / name / ".venv" / "harness-work"))
            out.print(f"two simulated SGLang targets: {', '.join(f'{n} ({h.arch})' for n, h in hosts.items())}; "
                      f"sweeping {sweep_file.relative_to(sweep_file.parents[2])}\n", highlight=False)
            store = _open_store(results_dir, announce=True)
            outcome = _run_sweep(sweep_file, patches_dir, hosts, store, new_run_id())
        views.show_comparison(out, [(store, outcome.run_id)], baseline=None, metric="output_throughput", fmt="table",
                          plot_file=None)
        out.print(f"\nrecords: {store.run_path(outcome.run_id)}   (harness compare {outcome.run_id}"
                  f"{_results_dir_arg(results_dir)})", highlight=False)
        page = views.write_report([(store, outcome.run_id)], store.run_path(outcome.run_id) / REPORT_DIR,
                                  baseline=None, metric="output_throughput")
        out.print(f"report: {page}   (open it in a browser; the folder {page.parent.name}/ is self-contained)",
                  highlight=False)
        if outcome.interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
        met = all(r.expectation_met or r.status == Status.PREFLIGHT_FAILED for r in outcome.done)
        if not met:
            raise typer.Exit(1)


@app.command()
def sweep(
    sweep_file: Path = typer.Argument(..., help="Sweep YAML: a base experiment plus matrix axes, or a list."),
    hosts_opt: Optional[str] = typer.Option(None, "--hosts", help="Comma-separated host names (default: all)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
    resume: Optional[str] = typer.Option(None, "--resume", help="Run id to resume: runs what has no final record."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and exit."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
) -> None:
    """Run every attempt of a sweep over the hosts that fit, interleaved by rounds, resumable; then compare."""
    from .config import load_sweep
    from .plan import plan_sweep
    from .resume import parse_host_list, recorded_path, resume_command, sweep_host_names

    with errors_to_exit_codes(err, _debug):
        store = _open_store(results_dir, announce=not dry_run)
        run = _resumed_run(store, resume, sweep_file) if resume else None
        if run is not None:  # what the run was planned with, unless given again
            hosts_file = recorded_path(hosts_file, run.hosts_file, "host inventory", run.run_id)
            patches_dir = recorded_path(patches_dir, run.patches_dir, "patch sets", run.run_id)
        hosts_path = hosts_file or default_hosts_file(sweep_file)
        inventory = _inventory(hosts_path)
        sweep_cfg, _ = load_sweep(sweep_file)
        names = sweep_host_names(parse_host_list(hosts_opt), sweep_cfg.hosts, inventory.hosts, hosts_path, run)
        hosts = {n: inventory.hosts[n] for n in names}
        pdir = patches_dir or default_patches_dir(sweep_file)
        run_id = run.run_id if run is not None else new_run_id()
        if dry_run:
            plan = plan_sweep(sweep_file, pdir, hosts)
            views.show_plan(out, plan, hosts)
            return
        outcome = _run_sweep(sweep_file, pdir, hosts, store, run_id, hosts_file=hosts_path)
        if store.final_records(run_id):  # none when no host could be used: nothing to compare, say why below
            views.show_comparison(out, [(store, run_id)], baseline=None, metric="output_throughput", fmt="table",
                                  plot_file=None)
        again = resume_command(sweep_file, run_id, results_dir)
        if outcome.interrupted:
            err.print(f"interrupted: the attempts in flight were stopped and reverted; resume with\n  {again}",
                      highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED)
        if outcome.left:
            err.print(f"{len(outcome.left)} attempt(s) not run (sweep budget spent or hosts unusable); resume with"
                      f"\n  {again}", highlight=False)
            raise typer.Exit(3)
        if any(r.status == Status.INFRA_ERROR for r in outcome.done):
            raise typer.Exit(3)
        if outcome.done and all(r.status == Status.PREFLIGHT_FAILED for r in outcome.done):
            first = outcome.done[0]
            err.print(f"nothing ran: all {len(outcome.done)} attempt(s) were refused before launch; the first "
                      f"({first.experiment} on {first.host}): {escape(first.error or '')}", highlight=False)
            raise typer.Exit(3)


@app.command()
def compare(
    runs: list[str] = typer.Argument(..., help="Run ids (under --results-dir) or run folders; several compare runs."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Experiment (or run:experiment) to compare to."),
    metric: str = typer.Option("output_throughput", "--metric", help="A bench_serving metric, e.g. median_itl_ms."),
    fmt: str = typer.Option("table", "--format", help="table, markdown, csv or json."),
    plot_file: Optional[Path] = typer.Option(None, "--plot", help="Draw the metric per experiment (matplotlib)."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """One row per experiment: status (cause for failures), medians with spread, ratio to the baseline
    with significance, noise and comparability warnings."""
    with errors_to_exit_codes(err, _debug):
        if fmt not in ("table", "markdown", "csv", "json"):
            raise ConfigError(f"unknown format {fmt!r}", hint="choose table, markdown, csv or json")
        chosen = _chosen_runs(_open_store(results_dir, announce=False), runs)
        views.show_comparison(out, chosen, baseline=baseline, metric=metric, fmt=fmt, plot_file=plot_file)


@app.command()
def report(
    runs: list[str] = typer.Argument(..., help="Run ids (under --results-dir) or run folders; two show what changed."),
    html_dir: Path = typer.Option(..., "--html", help="Folder to write the page (index.html) and its log excerpts in."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Experiment (or run:experiment) to compare to."),
    metric: str = typer.Option("output_throughput", "--metric", help="A bench_serving metric, e.g. median_itl_ms."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """A self-contained page of the runs: the comparison table, a plot per bench case, every failed attempt
    with its log excerpt, the top op per backend, provenance and (for two runs) what changed. Opens from disk."""
    with errors_to_exit_codes(err, _debug):
        chosen = _chosen_runs(_open_store(results_dir, announce=False), runs)
        page = views.write_report(chosen, html_dir, baseline=baseline, metric=metric)
        out.print(f"report: {page}", highlight=False)


def _chosen_runs(store: ResultsStore, runs: list[str]) -> list[tuple[ResultsStore, str]]:
    chosen: list[tuple[ResultsStore, str]] = []
    for r in runs:
        if Path(r).is_dir():  # a run folder given as a path: its parent is the store
            folder = Path(r).resolve()
            chosen.append((ResultsStore(folder.parent), folder.name))
        elif store.has_run(r):
            chosen.append((store, r))
        else:
            known = store.run_ids()
            raise ConfigError(f"no run {r!r} (looked for {store.run_path(r)})",
                              hint=("known runs: " + ", ".join(known[-10:])) if known else "no runs yet")
    return chosen


@app.command()
def validate(
    files: Optional[list[Path]] = typer.Argument(None, help="YAML files (default: experiments/**.yaml, hosts.yaml)."),
    against: Optional[Path] = typer.Option(None, "--against", help="A local copy of the target source: dry-apply "
                                                                 "every referenced patch set to it."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
) -> None:
    """Check experiments, sweeps and hosts files (and, with --against, that their patches apply and compile)."""
    from .agent.target import target_identity
    from .config import file_kind
    from .plan import plan_sweep

    with errors_to_exit_codes(err, _debug):
        if not files:
            files = sorted(Path("experiments").rglob("*.yaml")) + ([Path("hosts.yaml")] if Path("hosts.yaml").is_file()
                                                                  else [])
        problems: list[str] = []
        patch_sets = {}
        for f in files:
            try:
                kind = file_kind(f)
                pdir = patches_dir or default_patches_dir(f)
                if kind == "hosts":
                    load_inventory(f)
                elif kind == "sweep":
                    for a in plan_sweep(f, pdir, {}).attempts:
                        patch_sets.update({s.name: s for s in a.resolved.patch_sets})
                else:
                    r = resolve(load_experiment(f), f, pdir)
                    patch_sets.update({s.name: s for s in r.patch_sets})
                out.print(f"[green]ok[/]   {escape(str(f))} ({kind})", highlight=False)
            except ConfigError as exc:
                problems.append(str(exc))
                out.print(f"[red]fail[/] {escape(str(exc))}", highlight=False)
        if against is not None:
            if not against.is_dir():
                raise ConfigError(f"--against {against}: not a folder")
            ident = target_identity(str(against))
            for name, ps in sorted(patch_sets.items()):
                if ps.applies_to and ident and ident not in ps.applies_to:
                    out.print(f"skip {name}: made for {', '.join(ps.applies_to)}, the target is {ident}",
                              highlight=False)
                    continue
                problems += _dry_check_and_report(ps, against)
        if problems:
            err.print(f"{len(problems)} problem(s)", style="red")
            raise typer.Exit(2)


@patch_app.command("new")
def patch_new(
    name: str = typer.Argument(..., help="Name of the new patch set (its folder under the patches directory)."),
    checkout: Path = typer.Option(..., "--from", help="Root of your local SGLang git checkout."),
    commit_range: Optional[str] = typer.Option(None, "--range", help="Commits A..B instead of the uncommitted "
                                                                    "changes: one patch file per commit."),
    squash: bool = typer.Option(False, "--squash", help="With --range: one patch file from A to B."),
    description: Optional[str] = typer.Option(None, "--description", help="One line for patchset.yaml."),
    applies_to: Optional[str] = typer.Option(None, "--applies-to", help="sglang==<version>, when the checkout's "
                                                                       "version cannot be read."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing patch set of that name."),
) -> None:
    """Make a patch set from your checkout's changes.

    Its uncommitted changes (untracked files included), or --range's commits, become patch files, with a
    patchset.yaml (applies_to: the checkout's SGLang) and a README stub to finish."""
    from .patchnew import make_patch_set

    with errors_to_exit_codes(err, _debug):
        ps = make_patch_set(name, checkout, patches_dir or default_patches_dir_here(), commit_range=commit_range,
                            squash=squash, description=description, applies_to=applies_to, force=force)
        variant = ps.variants[0]
        out.print(f"[green]created[/] patch set {escape(ps.name)} in {escape(str(ps.folder))} for "
                  f"{', '.join(ps.applies_to)}: {len(variant.patches)} patch file(s), sha256 {ps.sha256[:16]}",
                  highlight=False)
        for p in variant.patches:
            out.print(f"    {escape(p.name)}", highlight=False)
        pdir_opt = f" --patches-dir {patches_dir}" if patches_dir else ""
        out.print(f"check it against a clean checkout: harness patch check {ps.name} --against <dir>{pdir_opt}",
                  highlight=False)


@patch_app.command("check")
def patch_check(
    name: str = typer.Argument(..., help="Patch set name (a folder under the patches directory)."),
    against: Path = typer.Option(..., "--against", help="A local SGLang checkout; it is never written."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
) -> None:
    """Check that a patch set applies to a checkout and compiles.

    The variant for the checkout's SGLang is applied to a scratch copy of the files it touches (the
    checkout is never written): what `validate --against` does, for one set."""
    from .agent.target import target_identity
    from .patchsets import load_patch_set

    with errors_to_exit_codes(err, _debug):
        ps = load_patch_set(patches_dir or default_patches_dir_here(), name)
        if not against.is_dir():
            raise ConfigError(f"--against {against}: not a folder")
        ident = target_identity(str(against))
        if not ps.has_variants and ps.applies_to and ident and ident not in ps.applies_to:
            out.print(f"note: {name} is made for {', '.join(ps.applies_to)}, the checkout is {ident}; checking anyway",
                      highlight=False)
        if _dry_check_and_report(ps, against):
            raise typer.Exit(2)


# ============================================================================ helpers


def _dry_check_and_report(ps: PatchSet, against: Path) -> list[str]:
    """Dry-apply one patch set to a copy of `against` (patchcheck.py), print ok or each problem; the problems."""
    from .patchcheck import dry_check

    found = dry_check(ps, against)
    for p in found:
        out.print(f"[red]fail[/] {escape(p)}", highlight=False)
    if not found:
        out.print(f"[green]ok[/]   patch set {ps.name} applies to {against} and compiles", highlight=False)
    return found


def _resumed_run(store: ResultsStore, run_id: str, sweep_file: Path) -> RunInfo:
    """The run to resume, which must be one of this sweep file's."""
    run = store.read_run(run_id)
    if Path(run.sweep_file) != sweep_file.resolve():
        others = store.runs_of_sweep(sweep_file)
        raise ConfigError(f"run {run_id} belongs to another sweep file ({run.sweep_file})",
                          hint=("runs of this sweep: " + ", ".join(others)) if others
                          else "this sweep file has no runs yet: start one without --resume")
    return run


def _run_sweep(sweep_file: Path, patches_dir: Path, hosts: dict[str, HostConfig], store: ResultsStore,
               run_id: str, hosts_file: Path | None = None) -> SweepOutcome:
    from .hostgpus import count_gpus
    from .plan import plan_sweep
    from .runner import host_status
    from .scheduler import Scheduler, write_run_file

    plan = plan_sweep(sweep_file, patches_dir, hosts)  # keys from the hosts as configured: stable on resume
    with store.lock_run(run_id):
        counted = count_gpus(hosts, host_status)
        write_run_file(store, run_id, plan, hosts, hosts_file=hosts_file, patches_dir=patches_dir,
                       host_gpus=counted.asked)
        out.print(f"run {run_id}: {len(plan.attempts)} attempts ({len(plan.experiments)} experiments) on "
                  f"{', '.join(hosts)}", highlight=False)
        for name, why in counted.unusable.items():
            err.print(f"[yellow]host {escape(name)} is not used in this sweep:[/] {escape(why)}", highlight=False)
        with SweepProgress(out, total=len(plan.attempts)) as progress:
            outcome = Scheduler(plan, {**hosts, **counted.usable}, store, run_id, reporter=progress,
                                unusable=counted.unusable).run()
    if outcome.skipped:
        out.print(f"{len(outcome.skipped)} attempt(s) already had a final record and were not run again",
                  highlight=False)
    return outcome


def sim_host_entry(name: str, repo: str, python: str, gpus: int, arch: str) -> str:
    """A complete hosts.yaml for a simulated target, ready to paste (the local transport: no SSH)."""
    return (f"hosts:\n  {name}:\n    address: local\n    repo: {repo}\n    python: {python}\n"
            f"    gpus: {gpus}\n    arch: {arch}")


def _inventory(path: Path) -> Inventory:
    # No hosts.yaml ships (no host works everywhere): say how to make one rather than "file not found".
    if not path.is_file():
        raise ConfigError("no host inventory here", file=path.absolute(), hint=missing_inventory_hint())
    return load_inventory(path)


def _open_store(results_dir: Path | None, announce: bool) -> ResultsStore:
    """The results store: --results-dir, else the default that does not depend on the current folder."""
    store = ResultsStore((results_dir or default_results_dir()).absolute())
    if announce:
        out.print(f"results: {store.root}", highlight=False)
    return store


def _results_dir_arg(results_dir: Path | None) -> str:
    # A later `harness compare` finds the default by itself; only a chosen folder needs repeating.
    return f" --results-dir {results_dir.absolute()}" if results_dir is not None else ""


def _pick_host(hosts: dict[str, HostConfig], name: str | None, hosts_path: Path) -> tuple[str, HostConfig]:
    if name is None:
        if len(hosts) == 1:
            return next(iter(hosts.items()))
        raise ConfigError(f"the inventory has {len(hosts)} hosts; say which with --host", file=hosts_path,
                          hint="hosts: " + ", ".join(hosts))
    if name not in hosts:
        import difflib

        close = difflib.get_close_matches(name, list(hosts), n=1)
        raise ConfigError(f"unknown host {name!r}", file=hosts_path,
                          hint=(f"did you mean {close[0]!r}? " if close else "") + "hosts: " + ", ".join(hosts))
    return name, hosts[name]


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal_as_interrupt)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(exit_code(EXIT_INTERRUPTED))
    except SystemExit as exc:
        sys.exit(exit_code(exc.code))


if __name__ == "__main__":
    main()
