"""Command line: the only place that prints and exits.

Exit codes: 0 every attempt ended with a record (whatever its status); 2 configuration error;
3 a host could not be reached or used; 130 interrupted (after cleaning up).
"""

from __future__ import annotations

import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from . import __version__
from .config import HostConfig, load_experiment, load_inventory
from .errors import EXIT_INTERRUPTED, ConfigError, HarnessError
from .project import bundled_dir, default_hosts_file, default_patches_dir
from .results import Record, ResultsStore, new_run_id
from .runner import AttemptOutcome, run_attempt
from .spec import resolve

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Declarative, fast-to-fail, safe experiments on SGLang servers over SSH.")
sim_app = typer.Typer(no_args_is_help=True, help="The simulated SGLang target (no GPU needed).")
app.add_typer(sim_app, name="sim")

# soft_wrap: never break a line inside a path or a command a user may copy.
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
_debug = False


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
          version: bool = typer.Option(False, "--version", help="Print the version and exit.")) -> None:
    global _debug
    _debug = debug
    if version:
        out.print(f"harness {__version__}")
        raise typer.Exit(0)


# ============================================================================ progress


class Progress:
    """Per attempt: the stage it is in and the time spent. Live on a terminal, plain lines otherwise."""

    def __init__(self, console: Console):
        self.console = console
        self.live: Live | None = None
        self.rows: dict[str, tuple[str, float, float]] = {}  # label → (stage, attempt start, stage start)

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(self._render(), console=self.console, refresh_per_second=8, transient=True,
                             get_renderable=self._render)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def _render(self) -> Table:
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for label, (stage, t0, ts) in self.rows.items():
            table.add_row(f"[bold]{label}[/]", f"[cyan]{stage}[/]", f"{now - ts:5.1f}s in stage",
                          f"{now - t0:6.1f}s total")
        return table

    def stage(self, label: str, stage: str) -> None:
        now = time.monotonic()
        t0 = self.rows.get(label, (None, now, now))[1]
        self.rows[label] = (stage, t0, now)
        if self.live is None:
            self.console.print(f"[{now - t0:6.1f}s] {label}: {stage}", highlight=False)

    def note(self, label: str, message: str) -> None:
        self.console.print(f"{label}: {message}", highlight=False, markup=False)

    def done(self, label: str) -> None:
        self.rows.pop(label, None)


# ============================================================================ commands


@app.command()
def run(
    experiment: Path = typer.Argument(..., help="Experiment YAML file."),
    host: Optional[str] = typer.Option(None, "--host", help="Host name from the inventory (default: the only one)."),
    hosts_file: Optional[Path] = typer.Option(None, "--hosts-file", help="Host inventory (default: ./hosts.yaml)."),
    results_dir: Path = typer.Option(Path("results"), "--results-dir", help="Where records go."),
    patches_dir: Optional[Path] = typer.Option(None, "--patches-dir", help="Patch sets (default: <project>/patches)."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for another harness's lock on the repo."),
) -> None:
    """Run one experiment on one host: patch, launch, wait, benchmark, stop, revert, record."""
    with _errors():
        exp = load_experiment(experiment)
        resolved = resolve(exp, experiment, patches_dir or default_patches_dir(experiment))
        hosts_path = hosts_file or default_hosts_file(experiment)
        inventory = load_inventory(hosts_path)
        name, host_cfg = _pick_host(inventory.hosts, host, hosts_path)
        store = ResultsStore(results_dir)
        run_id = new_run_id()
        with Progress(out) as progress:
            outcome = run_attempt(resolved, name, host_cfg, store, run_id, reporter=progress, lock_wait_s=wait)
        _print_outcomes([outcome])


@app.command()
def triage(
    logfile: Path = typer.Argument(..., help="An SGLang server log (any size; read streamed)."),
    exit_code: Optional[int] = typer.Option(None, "--exit-code", help="The server's exit code, if known."),
    as_json: bool = typer.Option(False, "--json", help="Print {verdict, category, key_line, phase, hint}."),
) -> None:
    """Say why a server log ended: ready, crash (category, key line, phase, hint) or incomplete."""
    import json

    from .triage import triage_file

    with _errors():
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


@sim_app.command("init")
def sim_init(
    directory: Path = typer.Argument(..., help="Where to create the simulated SGLang checkout."),
    arch: str = typer.Option("sm90", "--arch", help="Simulated GPU architecture: sm90, sm100 or sm120."),
    gpus: int = typer.Option(8, "--gpus", help="Number of simulated GPUs."),
) -> None:
    """Create a simulated SGLang target (a git repo) and print the interpreter path for hosts.yaml."""
    from .sim import ARCHES, init_target

    with _errors():
        if arch not in ARCHES:
            raise ConfigError(f"unknown arch {arch!r}", hint=f"choose one of: {', '.join(ARCHES)}")
        try:
            target = init_target(directory, arch=arch, gpus=gpus)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        out.print(f"simulated SGLang target created at {target.repo} ({arch}, {gpus} GPUs)", highlight=False)
        out.print("add it to hosts.yaml:", highlight=False)
        out.print(f"  repo: {target.repo}\n  python: {target.python}", highlight=False)
        print(target.python)


@app.command()
def demo(
    results_dir: Path = typer.Option(Path("results"), "--results-dir", help="Where records go."),
    arch: str = typer.Option("sm90", "--arch", help="Simulated GPU architecture."),
) -> None:
    """Make a simulated target in a temporary folder and run the example experiments on it."""
    from .sim import init_target

    with _errors():
        experiments_dir = bundled_dir("experiments") / "sim"
        patches_dir = bundled_dir("patches")
        files = sorted(p for p in experiments_dir.glob("*.yaml") if _is_experiment(p))
        if not files:
            raise ConfigError(f"no example experiments found in {experiments_dir}")
        resolved = [resolve(load_experiment(f), f, patches_dir) for f in files]
        with tempfile.TemporaryDirectory(prefix="harness-demo-") as tmp:
            target = init_target(Path(tmp) / "sglang", arch=arch, gpus=8)
            host = HostConfig(address="local", repo=str(target.repo), python=str(target.python), gpus=8,
                              arch=arch, workdir=str(Path(tmp) / "work"))
            out.print(f"simulated SGLang target ({arch}) at {target.repo}; running {len(files)} experiments\n",
                      highlight=False)
            store = ResultsStore(results_dir)
            run_id = new_run_id()
            outcomes = []
            with Progress(out) as progress:
                for r in resolved:
                    outcomes.append(run_attempt(r, "sim-local", host, store, run_id, reporter=progress))
        _print_outcomes(outcomes)
        out.print(f"\nrecords: {results_dir / run_id}", highlight=False)
        if not all(o.record.model_extra.get("expectation_met") for o in outcomes):
            raise typer.Exit(1)


# ============================================================================ helpers


def _is_experiment(path: Path) -> bool:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return True  # let the loader report it properly
    return isinstance(data, dict) and "model" in data


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


def _print_outcomes(outcomes: list[AttemptOutcome]) -> None:
    """One block per attempt: what happened, why, the numbers, and where the record is."""
    for o in outcomes:
        r: Record = o.record
        extra = r.model_extra or {}
        style = {"ok": "green", "crashed": "red", "hung": "yellow"}.get(r.status, "magenta")
        expect = extra.get("expect", "ok")
        met = "[green]as expected[/]" if extra.get("expectation_met") else f"[red]expected {expect}[/]"
        out.print(f"[bold]{escape(r.experiment)}[/] on {escape(r.host)}: [{style}]{r.status}[/] ({met})")
        if r.verdict is not None:
            out.print(f"    cause: {r.verdict.category} in {r.verdict.phase or '?'}", highlight=False)
            if r.verdict.key_line:
                out.print(f"    key line: {escape(r.verdict.key_line)}", highlight=False)
            if r.verdict.hint:
                out.print(f"    hint: {escape(r.verdict.hint)}", highlight=False)
        elif r.error:
            out.print(f"    {escape(r.error.strip().splitlines()[0])}", highlight=False)
        for case, m in r.metrics.items():
            if "output_throughput" in m:
                out.print(f"    {escape(case)}: {m['output_throughput']:.1f} output tok/s, median TTFT "
                          f"{m.get('median_ttft_ms', float('nan')):.1f} ms, median ITL "
                          f"{m.get('median_itl_ms', float('nan')):.2f} ms", highlight=False)
        facts = []
        if r.detect_latency_s is not None:
            facts.append(f"crash detected {r.detect_latency_s:.2f}s after the server died")
        if "ready_s" in r.timings:
            facts.append(f"ready in {r.timings['ready_s']:.1f}s")
        facts.append(f"total {r.timings.get('total_s', 0):.1f}s")
        if r.revert is not None:
            facts.append("tree restored byte-identical" if r.revert.verified else "[red]TREE NOT RESTORED[/]")
        out.print("    " + ", ".join(facts), highlight=False)
        out.print(f"    record: {o.directory / 'record.json'}", highlight=False)


class _errors:
    """Turn HarnessErrors into one clear message and the right exit code (traceback only with --debug)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None or isinstance(exc, (typer.Exit, SystemExit)):
            return False
        if isinstance(exc, KeyboardInterrupt):
            err.print("interrupted", style="yellow")
            raise typer.Exit(EXIT_INTERRUPTED)
        if isinstance(exc, HarnessError):
            if _debug:
                traceback.print_exception(exc_type, exc, tb)
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(exc.exit_code)
        return False


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
