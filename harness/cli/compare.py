"""`harness compare` (the comparison table) and `harness report --html` (the page) of finished runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError
from ..results.metrics import OUTPUT_THROUGHPUT
from ..results.store import ResultsStore
from . import nightsview, views
from .common import RESULTS_HELP, exit_on_errors, open_store, out

FORMATS = {"table": "table", "markdown": "markdown", "md": "markdown", "csv": "csv", "json": "json"}  # --format
METRIC_HELP = ("A bench_serving metric, e.g. median_itl_ms (default output_throughput; with --against every "
               "throughput and latency).")
AGAINST_HELP = ("An earlier run (last night's) to compare the one RUN with, experiment by experiment and metric "
                "by metric: what got significantly worse first.")


def compare(
    runs: list[str] = typer.Argument(..., help="Run ids (under --results-dir) or run folders; several compare runs."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Experiment (or run:experiment) to compare to."),
    metric: Optional[str] = typer.Option(None, "--metric", help=METRIC_HELP),
    fmt: str = typer.Option("table", "--format", help="table, markdown (or md), csv or json."),
    plot_file: Optional[Path] = typer.Option(
        None, "--plot", help="Draw the metric per experiment in this new file (.svg: no extra needed; .png, .pdf: "
                             "matplotlib) or over an earlier plot of the harness."),
    against: Optional[str] = typer.Option(None, "--against", help=AGAINST_HELP),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """One row per experiment: status (cause for failures), medians with spread, ratio to the baseline
    with significance, noise and comparability warnings. With --against: RUN against an earlier run,
    experiment by experiment and metric by metric, regressions first."""
    with exit_on_errors():
        if FORMATS.get(fmt) is None:
            raise ConfigError(f"unknown format {fmt!r}", hint="choose table, markdown (or md), csv or json")
        fmt = FORMATS[fmt]
        store = open_store(results_dir, announce=False)
        if against is not None:
            check_against(runs, baseline=baseline, plot=plot_file is not None)
            run_b, run_a = chosen_runs(store, [runs[0], against])
            nightsview.show(out, run_b, run_a, metric=metric, fmt=fmt)
            return
        chosen = chosen_runs(store, runs)
        views.show_comparison(out, chosen, baseline=baseline, metric=metric or OUTPUT_THROUGHPUT, fmt=fmt,
                              plot_file=plot_file)


def report(
    runs: list[str] = typer.Argument(..., help="Run ids (under --results-dir) or run folders; two show what changed."),
    html_dir: Path = typer.Option(
        ..., "--html", help="Folder to write the page (index.html) and its log excerpts in: new, empty or an "
                            "earlier page's (only the harness's own files there are replaced)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Experiment (or run:experiment) to compare to."),
    metric: Optional[str] = typer.Option(None, "--metric", help=METRIC_HELP),
    against: Optional[str] = typer.Option(None, "--against", help=AGAINST_HELP),
    results_dir: Optional[Path] = typer.Option(None, "--results-dir", help=RESULTS_HELP),
) -> None:
    """A self-contained page of the runs: the comparison table, a plot per bench case, every failed attempt
    with its log excerpt, the top op per backend, provenance and (for two runs) what changed. Opens from disk.
    With --against: the page of RUN, headed by RUN against the earlier run (regressions first)."""
    with exit_on_errors():
        store = open_store(results_dir, announce=False)
        section = None
        if against is not None:
            check_against(runs)
            run_b, run_a = chosen_runs(store, [runs[0], against])
            section = nightsview.page_context(run_b, run_a, metric)
        chosen = chosen_runs(store, runs)
        page = views.write_report(chosen, html_dir, baseline=baseline, metric=metric or OUTPUT_THROUGHPUT,
                                  against=section)
        out.print(f"report: {page}", highlight=False)



def check_against(runs: list[str], *, baseline: str | None = None, plot: bool = False) -> None:
    """--against compares one run with another: each experiment with itself in the other run."""
    if len(runs) != 1:
        raise ConfigError(f"--against compares one run with another; {len(runs)} runs given",
                          hint="harness compare TONIGHT --against LAST_NIGHT")
    if baseline is not None:
        raise ConfigError("--baseline does not go with --against: each experiment is compared with itself in the "
                          "other run", hint="leave out --baseline, or compare the runs without --against")
    if plot:
        raise ConfigError("--plot does not go with --against",
                          hint="harness report TONIGHT --against LAST_NIGHT --html DIR: the page has the plots")


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
