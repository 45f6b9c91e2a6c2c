"""What `harness compare RUN_B --against RUN_A` shows: the regression summary first, then B against A per
experiment, bench case and metric (analysis/nights.py judges, render/nightstext.py words it)."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis import compare, nights
from ..analysis.units import metric_label
from ..errors import ConfigError
from ..render import nightstext
from ..results.store import ResultsStore
from ..safetext import display_line, display_lines

Run = tuple[ResultsStore, str]


def load(run_b: Run, run_a: Run, metric: str | None) -> nights.Nights:
    """B's and A's final records, judged: every key metric, or only `metric` (an unknown one, or two runs
    without records, is a ConfigError naming what exists)."""
    (store_b, b), (store_a, a) = run_b, run_a
    records_b, records_a = store_b.final_records(b), store_a.final_records(a)
    if not records_b and not records_a:
        raise ConfigError(f"no records to compare in {store_b.run_path(b)} or {store_a.run_path(a)}")
    if metric is not None and metric not in compare.metric_names(records_a + records_b):
        raise ConfigError(f"unknown metric {metric!r}",
                          hint="metrics: " + ", ".join(compare.metric_names(records_a + records_b)))
    return nights.against(records_a, records_b, run_a=a, run_b=b,
                          metrics=[metric] if metric else nights.SPEED_METRICS)


def page_context(run_b: Run, run_a: Run, metric: str | None) -> dict[str, Any]:
    return nightstext.page_context(load(run_b, run_a, metric))


def show(out: Console, run_b: Run, run_a: Run, *, metric: str | None, fmt: str) -> None:
    n = load(run_b, run_a, metric)
    if fmt == "markdown":
        print(display_lines(nightstext.to_markdown(n)), end="")  # a host's words shown escaped
    elif fmt == "csv":
        print(nightstext.to_csv(n), end="")
    elif fmt == "json":
        print(nightstext.to_json(n))
    else:
        print_nights(out, n)


def print_nights(out: Console, n: nights.Nights) -> None:
    """The heading (how many regressions), each regression, the experiments in one run only and the setup
    changes; then the matrix (as many tables as the console's width needs), its legend and the notes."""
    summary = nightstext.summary_lines(n)
    out.print(Text(nightstext.heading(n), style="bold red" if summary else "bold green"), soft_wrap=False)
    for line in summary:
        out.print(Text(display_line(f"  ▼ {line}"), style="red"), soft_wrap=False)
    for line in nightstext.fact_lines(n):
        out.print(Text(display_line(f"  {line}")), soft_wrap=False)
    if n.pairs:
        for table in matrix_tables(n, out.width):
            out.print(table)
    out.print(Text(nightstext.legend()), soft_wrap=False)
    numbers = footnotes(n)
    for p in n.pairs:
        if p.label in numbers:
            out.print(Text(display_line(f"[{numbers[p.label]}] {p.label}: " + "; ".join(p.notes))), soft_wrap=False)


def footnotes(n: nights.Nights) -> dict[str, int]:
    """Experiment label → the number of its note (experiments with notes, in table order)."""
    return {label: i for i, label in enumerate([p.label for p in n.pairs if p.notes], 1)}


def matrix_tables(n: nights.Nights, width: int) -> list[Table]:
    """The matrix as tables that fit `width`: the experiment and case columns in each, and as many metric
    columns as fit beside them (a narrow console gets several tables one under the other, never a cut cell)."""
    lines = nightstext.matrix(n)
    numbers = footnotes(n)
    names = [display_line(x.pair.label) + (f" [{numbers[x.pair.label]}]" if x.pair.label in numbers else "")
             if x.first else "" for x in lines]
    cells = {m: [nightstext.cell_text(x.cells.get(m), interval=False) for x in lines] for m in n.metrics}
    fixed = [max([cell_len(x) for x in names] + [len("experiment")]), max([len(x.case) for x in lines] + [4])]
    want = {m: max([cell_len(x) for x in cells[m]] + [len(w) for w in metric_label(m).split()])
            for m in n.metrics}
    chunks: list[list[str]] = [[]]
    for m in n.metrics:
        used = sum(fixed) + sum(want[x] for x in chunks[-1]) + 3 * (2 + len(chunks[-1]))
        if chunks[-1] and used + want[m] > width:
            chunks.append([])
        chunks[-1].append(m)
    tables = []
    for chunk in chunks:
        table = Table(show_edge=False)
        table.add_column("experiment", overflow="fold")
        table.add_column("case")
        for m in chunk:
            table.add_column(metric_label(m), justify="right", width=want[m])
        for i, x in enumerate(lines):
            row = [Text(names[i], style="red" if x.first and nightstext.regressed(x.pair) else ""), Text(x.case)]
            row += [Text(cells[m][i], style=_STYLE.get(x.cells[m].verdict, "") if m in x.cells else "")
                    for m in chunk]
            table.add_row(*row)
        tables.append(table)
    return tables


_STYLE = {"worse": "red", "better": "green"}
