"""What the CLI shows on the console: a sweep's plan, the comparison table, one attempt's outcome."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .config import HostConfig
from .errors import ConfigError
from .plan import Plan
from .protocol import Status
from .results import Record, ResultsStore
from .runner import AttemptOutcome


def show_plan(out: Console, plan: Plan, hosts: dict[str, HostConfig]) -> None:
    from .scheduler import why_host_does_not_fit

    table = Table(title=f"plan of sweep {plan.name} ({len(plan.attempts)} attempts)", title_justify="left")
    for col in ("#", "round", "experiment", "backend", "patch sets", "hosts that fit", "key"):
        table.add_column(col)
    for a in plan.attempts:
        fits = [n for n, h in hosts.items() if why_host_does_not_fit(a, h) is None]
        why = "; ".join(f"{n}: {why_host_does_not_fit(a, h)}" for n, h in hosts.items() if n not in fits)
        table.add_row(str(a.order + 1), str(a.round), a.name, a.resolved.backend_name or "-",
                      ", ".join(s.name for s in a.resolved.patch_sets) or "-",
                      ", ".join(fits) if fits else f"[red]none[/] ({escape(why)})", a.key)
    out.print(table)
    if plan.budget.attempt or plan.budget.sweep:
        out.print(f"budget: attempt {plan.budget.attempt or '-'} s, sweep {plan.budget.sweep or '-'} s")


def show_comparison(out: Console, runs: list[tuple[ResultsStore, str]], *, baseline: str | None, metric: str, fmt: str,
                      plot_file: Path | None) -> None:
    from . import report

    records: list[Record] = []
    run_baseline = None
    for store, run_id in runs:
        run = store.find_run(run_id)
        if run is not None:
            run_baseline = run_baseline or run.baseline
        records += store.final_records(run_id)
    if not records:
        raise ConfigError("no records to compare in " + ", ".join(str(store.run_path(r)) for store, r in runs))
    rows = report.build_rows(records, metric=metric, baseline=baseline or run_baseline)
    if plot_file is not None:
        report.plot(rows, metric, str(plot_file))
    if fmt == "markdown":
        print(report.to_markdown(rows, metric), end="")
    elif fmt == "csv":
        print(report.to_csv(rows), end="")
    elif fmt == "json":
        print(report.to_json(rows, metric))
    else:
        table = Table(title=f"{metric} ({'lower' if report.lower_is_better(metric) else 'higher'} is better; "
                            f"▲ better ▼ worse ≈ not significant ? too few samples)", title_justify="left")
        for col in report.columns(rows):
            table.add_column(col, overflow="fold")
        for line in report.table_rows(rows):
            style = None
            table.add_row(*[escape(x) for x in line], style=style)
        out.print(table)
    if plot_file is not None and fmt == "table":
        out.print(f"plot: {plot_file}", highlight=False)


def show_outcomes(out: Console, outcomes: list[AttemptOutcome]) -> None:
    """One block per attempt: what happened, why, the numbers, and where the record is."""
    for o in outcomes:
        r: Record = o.record
        style = {Status.OK: "green", Status.CRASHED: "red", Status.HUNG: "yellow"}.get(r.status, "magenta")
        expect = r.expect or "ok"
        met = "[green]as expected[/]" if r.expectation_met else f"[red]expected {expect}[/]"
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
