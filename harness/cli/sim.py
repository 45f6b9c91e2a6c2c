"""`harness sim init` (a simulated SGLang target) and `harness demo` (a sweep over two of them)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..common.protocol import Status
from ..errors import ConfigError, ExitCode
from ..experiments.config import HostConfig
from ..experiments.files import read_sweep_file
from ..experiments.project import bundled_dir
from ..results.metrics import OUTPUT_THROUGHPUT
from ..results.store import new_run_id
from . import views
from .common import RESULTS_HELP, exit_on_errors, open_store, out, results_dir_arg
from .run import run_sweep

if TYPE_CHECKING:
    from ..sim import Layout

REPORT_DIR = "report"  # the demo's page: results/<run>/report/index.html


def sim_init(
    directory: Path = typer.Argument(..., help="Where to create the simulated SGLang checkout."),
    arch: str = typer.Option("sm90", "--arch", help="Simulated GPU architecture: sm90, sm100 or sm120."),
    gpus: int = typer.Option(8, "--gpus", help="Number of simulated GPUs."),
    flashinfer_version: str = typer.Option(
        "0.7.2", "--flashinfer-version",
        help="Version of the simulated FlashInfer (what its FP8 MLA kernels do depends on it: harness/sim/README.md)."),
    history: int = typer.Option(0, "--history", min=0, help="Commits on main after the first (for `harness bisect`)."),
    slow_at: Optional[int] = typer.Option(None, "--slow-at", help="The history commit (1..N) that slows a backend's "
                                          "decode."),
    slow_backend: str = typer.Option("flashinfer", "--slow-backend", help="Which (an --attention-backend name)."),
    slow_factor: float = typer.Option(1.15, "--slow-factor", help="How much: a decode step's cost times this."),
    broken_at: Optional[int] = typer.Option(None, "--broken-at", help="The history commit (1..N-1) whose server "
                                            "dies at startup (an ImportError); the next one fixes it."),
) -> None:
    """Create a simulated SGLang target (a git repo) and print the interpreter path for hosts.yaml."""
    from ..sim import ARCHES, Layout, init_target

    with exit_on_errors():
        if arch not in ARCHES:
            raise ConfigError(f"unknown arch {arch!r}", hint=f"choose one of: {', '.join(ARCHES)}")
        layout = Layout(commits=history, slow_at=slow_at, slow_backend=slow_backend, slow_factor=slow_factor,
                        broken_at=broken_at)
        try:
            target = init_target(directory, arch=arch, gpus=gpus, flashinfer_version=flashinfer_version,
                                 history=layout)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        out.print(f"simulated SGLang target created at {target.repo} ({arch}, {gpus} GPUs, "
                  f"FlashInfer {flashinfer_version})", highlight=False)
        if history:
            out.print(history_summary(layout, target.commits), highlight=False, markup=False)
        out.print("add it to hosts.yaml (a new file, or the entry under your `hosts:`):", highlight=False)
        out.print(sim_host_entry("sim", str(target.repo), str(target.python), gpus, arch),
                  highlight=False, markup=False)
        print(target.python)


def demo(
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """Sweep the five backends (and the seed story's crash and hang) over two simulated targets of
    different GPU arch — an H200 (sm90) and a B200 (sm100) — then print the comparison table."""
    from ..sim import init_target

    with exit_on_errors():
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
            store = open_store(results_dir, announce=True, writable=True)
            outcome = run_sweep(read_sweep_file(sweep_file), patches_dir, hosts, store, new_run_id())
        views.show_comparison(out, [(store, outcome.run_id)], baseline=None, metric=OUTPUT_THROUGHPUT, fmt="table",
                          plot_file=None)
        out.print(f"\nrecords: {store.run_path(outcome.run_id)}   (harness compare {outcome.run_id}"
                  f"{results_dir_arg(results_dir)})", highlight=False)
        page = views.write_report([(store, outcome.run_id)], store.run_path(outcome.run_id) / REPORT_DIR,
                                  baseline=None, metric=OUTPUT_THROUGHPUT)
        out.print(f"report: {page}   (open it in a browser; the folder {page.parent.name}/ is self-contained)",
                  highlight=False)
        if outcome.interrupted:
            raise typer.Exit(ExitCode.INTERRUPTED)
        met = all(r.expectation_met or r.status == Status.PREFLIGHT_FAILED for r in outcome.done)
        if not met:
            raise typer.Exit(ExitCode.FAILED)


def history_summary(layout: Layout, commits: tuple[str, ...]) -> str:
    """What `sim init --history` made: the ends to bisect between, and where the slow and the broken commits are."""
    lines = [f"history: {layout.commits} commits on main after {commits[0][:10]} (harness bisect EXPERIMENT "
             f"--good main~{layout.commits} --bad main)"]
    if layout.slow_at:
        lines.append(f"  commit {layout.slow_at} {commits[layout.slow_at][:10]}: a decode step of "
                     f"{layout.slow_backend} costs {layout.slow_factor:g}x")
    if layout.broken_at:
        lines.append(f"  commit {layout.broken_at} {commits[layout.broken_at][:10]}: the server dies at startup "
                     f"(ImportError); commit {layout.broken_at + 1} fixes it")
    return "\n".join(lines)


def sim_host_entry(name: str, repo: str, python: str, gpus: int, arch: str) -> str:
    """A complete hosts.yaml for a simulated target, ready to paste (the local transport: no SSH)."""
    return (f"hosts:\n  {name}:\n    address: local\n    repo: {repo}\n    python: {python}\n"
            f"    gpus: {gpus}\n    arch: {arch}")
