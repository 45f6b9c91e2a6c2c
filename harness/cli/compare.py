"""`harness compare` (the comparison table) and `harness report --html` (the page) of finished runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError
from ..results.metrics import OUTPUT_THROUGHPUT
from ..results.store import ResultsStore
from . import views
from .common import RESULTS_HELP, exit_on_errors, open_store, out

FORMATS = {"table": "table", "markdown": "markdown", "md": "markdown", "csv": "csv", "json": "json"}  # --format


def compare(
    runs: list[str] = typer.Argument(..., help="Run ids (under --results-dir) or run folders; several compare runs."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Experiment (or run:experiment) to compare to."),
    metric: str = typer.Option(OUTPUT_THROUGHPUT, "--metric", help="A bench_serving metric, e.g. median_itl_ms."),
    fmt: str = typer.Option("table", "--format", help="table, markdown (or md), csv or json."),
    plot_file: Optional[Path] = typer.Option(
        None, "--plot", help="Draw the metric per experiment (matplotlib) in this new file (.png, .svg, .pdf) or "
                             "over an earlier plot of the harness."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """One row per experiment: status (cause for failures), medians with spread, ratio to the baseline
    with significance, noise and comparability warnings."""
    with exit_on_errors():
        if FORMATS.get(fmt) is None:
            raise ConfigError(f"unknown format {fmt!r}", hint="choose table, markdown (or md), csv or json")
        fmt = FORMATS[fmt]
        chosen = chosen_runs(open_store(results_dir, announce=False), runs)
        views.show_comparison(out, chosen, baseline=baseline, metric=metric, fmt=fmt, plot_file=plot_file)


def report(
    runs: list[str] = typer.Argument(..., help="Run ids (under --results-dir) or run folders; two show what changed."),
    html_dir: Path = typer.Option(
        ..., "--html", help="Folder to write the page (index.html) and its log excerpts in: new, empty or an "
                            "earlier page's (only the harness's own files there are replaced)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Experiment (or run:experiment) to compare to."),
    metric: str = typer.Option(OUTPUT_THROUGHPUT, "--metric", help="A bench_serving metric, e.g. median_itl_ms."),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """A self-contained page of the runs: the comparison table, a plot per bench case, every failed attempt
    with its log excerpt, the top op per backend, provenance and (for two runs) what changed. Opens from disk."""
    with exit_on_errors():
        chosen = chosen_runs(open_store(results_dir, announce=False), runs)
        page = views.write_report(chosen, html_dir, baseline=baseline, metric=metric)
        out.print(f"report: {page}", highlight=False)


def chosen_runs(store: ResultsStore, runs: list[str]) -> list[tuple[ResultsStore, str]]:
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
