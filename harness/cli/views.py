"""What the CLI shows on the console: a sweep's plan, the comparison table, one attempt's outcome."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..analysis import answers, compare, families, outliers
from ..analysis.stack import legend as stack_legend
from ..analysis.units import metric_title
from ..common.protocol import Status
from ..errors import ConfigError, ResultsError
from ..experiments.config import HostConfig
from ..experiments.plan import Plan
from ..render import plots, tableformats
from ..results.attemptdir import AttemptDir
from ..results.metrics import MEDIAN_ITL_MS, MEDIAN_TTFT_MS, OUTPUT_THROUGHPUT
from ..results.schemas import Record, RunInfo
from ..results.store import ResultsStore
from ..run.runner import AttemptOutcome
from ..safetext import display_line, display_lines


def show_plan(out: Console, plan: Plan, hosts: dict[str, HostConfig]) -> None:
    from ..run.placement import why_host_does_not_fit

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
    """`baseline` and `metric` as the user gave them: an unknown name is a ConfigError listing the known ones
    (a run's own baseline, from its sweep file, only gets a note in the rows)."""
    records, rows, run_baseline, _ = comparison_rows(runs, baseline=baseline, metric=metric)
    if plot_file is not None:
        plots.plot(rows, metric, plot_file)
    if fmt == "markdown":
        print(display_lines(tableformats.to_markdown(rows, metric)), end="")  # a host's words shown escaped
    elif fmt == "csv":
        print(tableformats.to_csv(rows), end="")
    elif fmt == "json":
        print(tableformats.to_json(rows, metric))
    else:
        print_comparison(out, rows, metric, chosen=not (baseline or run_baseline))
        print_sparklines(out, runs, records, rows, metric)
    if plot_file is not None and fmt == "table":
        out.print(f"plot: {plot_file}", highlight=False)


def comparison_rows(runs: list[tuple[ResultsStore, str]], *, baseline: str | None, metric: str
                    ) -> tuple[list[Record], list[compare.Row], str | None, dict[str, RunInfo | None]]:
    """The runs' final records, their rows, the runs' own baseline (from the sweep file) and run.json files;
    an unknown metric or baseline, or no records at all, is a ConfigError listing what exists."""
    records: list[Record] = []
    run_baseline = None
    infos: dict[str, RunInfo | None] = {}
    for store, run_id in runs:
        run = store.find_run(run_id)
        infos[run_id] = run
        if run is not None:
            run_baseline = run_baseline or run.baseline
        records += store.final_records(run_id)
    if not records:
        raise ConfigError("no records to compare in " + ", ".join(str(store.run_path(r)) for store, r in runs))
    if metric not in compare.metric_names(records):
        raise ConfigError(f"unknown metric {metric!r}", hint="metrics: " + ", ".join(compare.metric_names(records)))
    rows = compare.build_rows(records, metric=metric, baseline=baseline or run_baseline)
    if baseline and baseline not in compare.baseline_names(rows):
        raise ConfigError(f"no experiment {baseline!r} to use as the baseline",
                          hint="experiments: " + ", ".join(compare.baseline_names(rows)))
    stores = {run_id: store for store, run_id in runs}
    answers.attach(rows, records, lambda rec: read_answers(stores[rec.run_id], rec),
                   named_baseline=bool(baseline or run_baseline))
    for row in rows:  # each outlier repeat's likely cause, from its part of its bench case's log
        outliers.attach_causes(row.outliers, row.notes, lambda o, case: stores[o.run_id].read_bench_log(
            o.run_id, o.experiment, o.attempt, case))
    return records, rows, run_baseline, infos


def read_answers(store: ResultsStore, rec: Record) -> answers.AnswerSet | str:
    """A record's answers.json, parsed; or why it cannot be (the table says so in the row's notes)."""
    try:
        return answers.parse_answers(store.read_answers(rec))
    except (ResultsError, answers.BadAnswers) as exc:
        return str(exc)


def print_sparklines(out: Console, runs: list[tuple[ResultsStore, str]], records: list[Record],
                     rows: list[compare.Row], metric: str) -> None:
    """Under the terminal's table only: each row's metric across the concurrency levels of a family of bench
    cases (their max_concurrency read from the bench JSONL beside the records), as a sparkline."""
    stores = {run_id: store for store, run_id in runs}
    loads = families.read_loads(records, lambda rec, case: stores[rec.run_id].read_bench_lines(rec, case))
    lines = families.sparkline_lines(families.families(rows, records, loads, (metric,)), metric)
    for line in [""] + lines if lines else []:
        out.print(Text(display_line(line)), soft_wrap=False)


def write_report(runs: list[tuple[ResultsStore, str]], out_dir: Path, *, baseline: str | None, metric: str,
                 against: dict[str, Any] | None = None) -> Path:
    """`harness report --html`: the runs' page in `out_dir` (render/page.py); its path. `against`: the run against
    an earlier one (nightstext.page_context), shown first; a bisect run's table and answer head the page."""
    from ..render.bisecttext import page_context
    from ..render.page import write_html

    records, rows, run_baseline, infos = comparison_rows(runs, baseline=baseline, metric=metric)
    bisects = [page_context(info, store.iter_records(run_id)) for store, run_id in runs
               if (info := store.find_bisect(run_id)) is not None]
    return write_html(out_dir, records, rows, metric, stores={run_id: store for store, run_id in runs}, runs=infos,
                      chosen_baseline=not (baseline or run_baseline), against=against, bisects=bisects)


# ============================================================================ the comparison table
# rich wraps cells at spaces only, and squeezes every column alike when a table is too wide: a long name
# ("glm5-flashinfer-mla") would be cut mid-word. So the column widths are chosen here, from each column's
# longest word, and names are broken after their separators to the width their column got.

_NAME_PARTS = re.compile(r"[^-_:=\s]*[-_:=\s]+|[^-_:=\s]+$")  # each part keeps the separator it ends with
NAME_COLUMNS = ("experiment", "backend", "status")  # columns whose words may break after - _ : =


def breakable(name: str, width: int) -> str:
    """`name` on lines of at most `width`, broken only after a separator or a space (a part longer than
    `width` keeps its own line)."""
    lines = [""]
    for part in _NAME_PARTS.findall(name):
        if lines[-1] and len(lines[-1].rstrip()) + len(part.rstrip()) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(line.rstrip() for line in lines)


def fit_widths(mins: list[int], maxs: list[int], room: int) -> list[int] | None:
    """Column widths that add up to at most `room`, each at least its minimum (its longest word); the room
    left goes first to the columns that want least (numbers stay on one line, long names wrap). None when
    the minimums alone do not fit."""
    spare = room - sum(mins)
    if spare < 0:
        return None
    widths = list(mins)
    want = [max(hi - lo, 0) for lo, hi in zip(mins, maxs)]
    order = sorted(range(len(mins)), key=lambda i: want[i])
    for k, i in enumerate(order):
        give = min(want[i], spare // (len(order) - k))
        widths[i] += give
        spare -= give
    return widths


def _extent(texts: list[str], name: bool) -> tuple[int, int]:
    """(longest word, longest line) over a column's cells; in a name column a word ends at a separator."""
    lines = [line for t in texts for line in t.splitlines()] or [""]
    words = [w.strip() for line in lines for w in (_NAME_PARTS.findall(line) if name else line.split())]
    return max([cell_len(w) for w in words] + [1]), max(cell_len(line) for line in lines)


def _footnotes(rows: list[compare.Row]) -> dict[str, int]:
    """Row label → the number of its footnote (rows with a key line or notes, in table order)."""
    numbered = [r.label for r in rows if r.key_line or r.notes]
    return {label: i for i, label in enumerate(numbered, 1)}


Lines = list[tuple[compare.Row, list[str]]]  # each line of the table, and the row it belongs to


def _comparison_cells(rows: list[compare.Row], metric: str, one_row_per_case: bool) -> tuple[list[str], Lines]:
    """The headers and lines of the terminal table, unwrapped. The notes are footnote numbers after the
    status (printed below the table by `print_comparison`)."""
    cases = sorted({c for r in rows for c in r.cells})
    mixed, tops, notes = compare.mixed_gpus(rows), any(r.top_op for r in rows), _footnotes(rows)
    head = ["experiment", "backend"] + (["GPU"] if mixed else []) + ["status"]
    if one_row_per_case:
        body = ["case", compare.value_header("", metric).strip(), "vs base"]
    else:
        body = [h for c in cases for h in (compare.value_header(c, metric), f"{c} vs base")]
    ans, stacks = any(r.answers for r in rows), compare.mixed_stacks(rows)
    headers = head + body + (["answers"] if ans else []) + (["top op"] if tops else []) + (["stack"] if stacks else [])
    empty = compare.Cell(None, None, 0, [])
    lines: Lines = []
    for r in rows:
        status = compare.status_text(r) + (f" [{notes[r.label]}]" if r.label in notes else "")
        label = r.label.removesuffix(f" @ {r.gpu}") if mixed else r.label  # the GPU column says it
        # Cells are printed as Text, as they are: the GPU and the top op are the host's words, shown escaped.
        start = [display_line(label), r.backend or "-"] + ([display_line(r.gpu or "-")] if mixed else []) + [status]
        end = ([r.answers or ""] if ans else []) + ([display_line(r.top_op or "-")] if tops else []) \
            + ([r.stack_id or "-"] if stacks else [])
        cells = [(c, r.cells.get(c) or empty) for c in cases]
        if not one_row_per_case:
            pairs = [(compare.cell_text(cell), _ratio_lines(cell, r.is_baseline)) for _, cell in cells]
            lines.append((r, start + [x for pair in pairs for x in pair] + end))
            continue
        for i, (c, cell) in enumerate(cells or [("-", empty)]):
            blank = i > 0  # the experiment's own columns on its first line only
            lines.append((r, ([""] * len(start) if blank else start)
                          + [c, compare.cell_text(cell), _ratio_lines(cell, r.is_baseline)]
                          + ([""] * len(end) if blank else end)))
    return headers, lines


def _ratio_lines(cell: compare.Cell, is_baseline: bool) -> str:
    """The ratio and its marker, the interval on a line of its own under them, its brackets left out there: the
    column stays narrow (as "baseline" in it, so that a GPU column still fits 80 columns), the interval whole."""
    interval = "" if is_baseline else compare.interval_text(cell).strip("[]")
    return compare.ratio_text(cell, is_baseline, interval=False) + (f"\n{interval}" if interval else "")


def _column_widths(headers: list[str], lines: Lines, width: int) -> list[int] | None:
    extents = [_extent([h] + [line[i] for _, line in lines], h in NAME_COLUMNS) for i, h in enumerate(headers)]
    # each column: 2 cells of padding, and a border between two columns (none at the edges: show_edge=False)
    return fit_widths([lo for lo, _ in extents], [hi for _, hi in extents], width - 3 * len(headers) + 1)


def comparison_table(rows: list[compare.Row], metric: str, width: int) -> Table:
    """The terminal table for a console `width` wide: one row per experiment, or, when that cannot fit without
    cutting words, the compact layout with each bench case on a line of its own."""
    # the legend is printed below
    table = Table(title=Text(metric_title(metric, better=True)), title_justify="left", show_edge=False)
    headers, lines = _comparison_cells(rows, metric, one_row_per_case=False)
    widths = _column_widths(headers, lines, width)
    if widths is None:
        compact = _comparison_cells(rows, metric, one_row_per_case=True)
        if _column_widths(*compact, width) is not None:
            headers, lines = compact
            widths = _column_widths(headers, lines, width)
    for i, h in enumerate(headers):
        # fold: only when even the longest word does not fit (rich's own squeeze); better cut than hidden
        table.add_column(h, justify="right" if "median" in h else "left", overflow="fold",
                         width=widths[i] if widths else None)
    status = headers.index("status")
    for row, line in lines:
        cells = [breakable(x, widths[i]) if widths and h in NAME_COLUMNS else x
                 for i, (h, x) in enumerate(zip(headers, line))]
        style = "green" if row.expected else "" if row.status == Status.OK else "red"
        table.add_row(*[Text(x, style=style if i == status else "") for i, x in enumerate(cells)])
    return table


def comparison_blocks(rows: list[compare.Row], metric: str) -> list[str]:
    """The narrowest layout, for a console too narrow for either table (a GPU column and a top-op column do
    not fit 80 columns beside the names): one block per experiment — its name, backend, GPU and status on
    a line, then a line per bench case. Lines wrap by words at the console's width."""
    headers, lines = _comparison_cells(rows, metric, one_row_per_case=True)
    at = {h: i for i, h in enumerate(headers)}
    pad = max((len(line[at["case"]]) for _, line in lines), default=0)
    out: list[str] = []
    for _, line in lines:
        if line[at["experiment"]]:  # an experiment's first line: its own facts
            facts = [line[at["experiment"]], line[at["backend"]]] + ([line[at["GPU"]]] if "GPU" in at else [])
            out.append("  ".join(facts) + ": " + line[at["status"]]
                       + (f"  (answers: {line[at['answers']]})" if "answers" in at and line[at["answers"]] else "")
                       + (f"  (top op: {line[at['top op']]})" if "top op" in at and line[at["top op"]] != "-" else "")
                       + (f"  (stack {line[at['stack']]})" if "stack" in at else ""))
        case, val, ratio = line[at["case"]], line[at["case"] + 1], line[at["case"] + 2]
        ratio = ratio.replace("\n", " [") + "]" if "\n" in ratio else ratio  # the interval back on its line
        if case != "-" and (val, ratio) != ("-", "-"):  # a failed row has no numbers: its status says why
            out.append(f"    {case.ljust(pad)}  {val}  {ratio}")
    return out


def print_comparison(out: Console, rows: list[compare.Row], metric: str, *, chosen: bool = False) -> None:
    """The table (or, on a console too narrow for it, one block per experiment), then the numbered notes,
    then which row is the baseline. `chosen`: the harness picked the baseline, not the user."""
    table = comparison_table(rows, metric, out.width)
    if all(c.width is None for c in table.columns):  # no layout fits without cutting words
        out.print(Text(metric_title(metric, better=True)), soft_wrap=False)
        for line in comparison_blocks(rows, metric):
            out.print(Text(line), soft_wrap=False)
    else:
        out.print(table)
    # soft_wrap=False: wrapped by words at the console's width, even on a console that soft-wraps (the CLI's)
    out.print(Text(f"median ± CV: the median over the repeats ± their coefficient of variation (n repeats); "
                   f"vs base: {compare.SIGNIFICANCE_LEGEND}; [n]: a note below"
                   + ("; " + answers.LEGEND
                      if any(r.answers for r in rows) else "")), soft_wrap=False)
    notes = _footnotes(rows)
    for r in rows:
        text = ([compare.short_key_line(r.key_line)] if r.key_line else []) + r.notes
        if text:
            out.print(Text(display_line(f"[{notes[r.label]}] {r.label}: " + "; ".join(text))), soft_wrap=False)
    for line in stack_legend([(r.stack_id, r.stack) for r in rows if r.stack_id and r.stack]):
        out.print(Text(display_line(line)), soft_wrap=False)
    base = [r.label for r in rows if r.is_baseline]
    if base:
        why = f" (the first row that measured {metric}; choose another with --baseline)" if chosen else ""
        out.print(Text(f"baseline: {', '.join(base)}{why}"), soft_wrap=False)


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
            throughput, ttft, itl = (m.median(k) for k in (OUTPUT_THROUGHPUT, MEDIAN_TTFT_MS, MEDIAN_ITL_MS))
            if throughput is not None:
                out.print(f"    {escape(case)}: {throughput:.1f} output tok/s, median TTFT "
                          f"{ttft if ttft is not None else float('nan'):.1f} ms, median ITL "
                          f"{itl if itl is not None else float('nan'):.2f} ms", highlight=False)
        facts = []
        if r.detect_latency_s is not None:
            facts.append(f"crash detected {r.detect_latency_s:.2f}s after the server died")
        if "ready_s" in r.timings:
            facts.append(f"ready in {r.timings['ready_s']:.1f}s")
        facts.append(f"total {r.timings.get('total_s', 0):.1f}s")
        if r.revert is not None:
            facts.append("tree restored byte-identical" if r.revert.verified else "[red]TREE NOT RESTORED[/]")
        out.print("    " + ", ".join(facts), highlight=False)
        out.print(f"    record: {AttemptDir(o.directory).record}", highlight=False)
