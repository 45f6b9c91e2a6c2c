"""Night against night as text (pure): the regression summary, the experiment × metric matrix, and the
formats `harness compare RUN_B --against RUN_A` writes (markdown, csv, json) and the page's context
(`harness report RUN_B --against RUN_A --html DIR`). The numbers and verdicts are nights.py's."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

from ..analysis import compare
from ..analysis.nights import Change, Nights, Pair
from ..analysis.units import lower_is_better, metric_label


@dataclass
class Line:
    """A line of the matrix: an experiment, a bench case, B's cells (judged against A's) by metric."""

    pair: Pair
    case: str
    cells: dict[str, compare.Cell]
    first: bool  # the experiment's first line (its name and notes are shown there only)


def legend() -> str:
    return (f"B's median over A's, per metric and bench case: {compare.SIGNIFICANCE_LEGEND} (fewer than "
            f"{compare.MIN_SAMPLES} a side); no marker: not comparable (another GPU). Latencies: lower is better; "
            f"throughputs: higher.")


def heading(n: Nights) -> str:
    worse = {label for label, _, _ in n.summary()}
    verdict = f"regressions in {len(worse)} of {len(n.pairs)} experiments" if worse else "no regressions"
    return f"B = {n.run_b} against A = {n.run_a}: {verdict}"


# The summary names at most this many metrics of a case (the headline ones first); the table has them all.
SUMMARY_METRICS = 3
_HEADLINE = ("output_throughput", "median_ttft_ms", "median_itl_ms")


def summary_lines(n: Nights) -> list[str]:
    """Each regression group as a line: 'exp: crashed: … (ran ok in A)', or 'exp case: worse in 14 of 14
    metrics: output_throughput 0.83x (-16.7%), median_ttft_ms 1.20x (+20.0%), … and 11 more'."""
    out = []
    for label, case, items in n.summary():
        if case is None:
            out.append(f"{label}: {items[0].text}")
            continue
        judged = sum(1 for p in n.pairs if p.label == label for c in p.changes if c.case == case)
        ranked = sorted(items, key=lambda r: _HEADLINE.index(r.metric) if r.metric in _HEADLINE else len(_HEADLINE))
        shown = ", ".join(f"{r.metric} {r.text}" for r in ranked[:SUMMARY_METRICS])
        more = f" and {len(items) - SUMMARY_METRICS} more" if len(items) > SUMMARY_METRICS else ""
        out.append(f"{label} {case}: " + (f"worse in {len(items)} of {judged} metrics: " if judged > 1 else "")
                   + shown + more)
    return out


def fact_lines(n: Nights) -> list[str]:
    """Experiments in one run only, and the runs' setup differences."""
    out = []
    if n.added:
        out.append("only in B (added): " + ", ".join(n.added))
    if n.removed:
        out.append("only in A (removed): " + ", ".join(n.removed))
    if n.setup:
        out.append("setup changed: " + "; ".join(f"{what} {a} → {b}" for what, a, b in n.setup))
    return out


def matrix(n: Nights) -> list[Line]:
    """One line per experiment in both runs and bench case, with B's cells (judged against A's) by metric;
    an experiment without a number in either run (it failed) keeps one line, case '-'."""
    lines: list[Line] = []
    for p in n.pairs:
        cases = sorted({c.case for c in p.changes}) or ["-"]
        for case in cases:
            lines.append(Line(p, case, {c.metric: c.b for c in p.changes if c.case == case}, case == cases[0]))
    return lines


def cell_text(cell: compare.Cell | None, interval: bool = True) -> str:
    """The ratio, its marker and its interval (the terminal's matrix, 14 metrics wide, leaves the interval out)."""
    return "-" if cell is None else compare.ratio_text(cell, False, interval)


def regressed(p: Pair, case: str | None = None) -> bool:
    """The experiment (or its bench case) is in the regression summary."""
    return p.failed or any(c.b.verdict == "worse" and case in (None, c.case) for c in p.changes)


# ============================================================================ formats


def to_markdown(n: Nights) -> str:
    lines = [f"**{heading(n)}**", ""]
    lines += [f"- ▼ {s}" for s in summary_lines(n)] + [f"- {s}" for s in fact_lines(n)]
    heads = ["experiment", "case"] + [f"`{m}`" for m in n.metrics] + ["notes"]
    lines += ["", legend(), "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for line in matrix(n):
        p = line.pair
        row = [p.label if line.first else "", line.case] + [cell_text(line.cells.get(m)) for m in n.metrics]
        row.append("; ".join(p.notes) if line.first else "")
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in row) + " |")
    return "\n".join(lines) + "\n"


CSV_HEAD = ["run_a", "run_b", "experiment", "label", "gpu_a", "gpu_b", "status_a", "status_b", "case", "metric",
            "lower_is_better", "a_median", "a_cv", "a_n", "b_median", "b_cv", "b_n", "ratio", "ratio_low", "ratio_high",
            "p_value", "verdict",
            "regression", "notes"]


def to_csv(n: Nights) -> str:
    """One line per experiment, case and metric; an experiment that failed in B (verdict 'failed') or is in
    one run only ('added', 'removed') has a line of its own without a case."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_HEAD)
    for p in n.pairs:
        head = [n.run_a, n.run_b, p.experiment, p.label, p.a.gpu, p.b.gpu, p.a.status.value, p.b.status.value]
        notes = "; ".join(p.notes)
        if p.failed or not p.changes:  # the experiment's own line: B failed, or neither run has a number
            w.writerow(head + [""] * 13 + ["failed" if p.failed else "n/a", p.failed, notes])
        for c in p.changes:
            w.writerow(head + [c.case, c.metric, lower_is_better(c.metric), c.a.median, c.a.cv, c.a.n,
                               c.b.median, c.b.cv, c.b.n, c.b.ratio, c.b.low, c.b.high, c.b.p_value, c.b.verdict,
                               c.b.verdict == "worse", notes])
    for label, verdict in [(x, "added") for x in n.added] + [(x, "removed") for x in n.removed]:
        w.writerow([n.run_a, n.run_b, label.split(" @ ")[0], label] + [""] * 17 + [verdict, False, ""])
    return buf.getvalue()


def _side(cell: compare.Cell) -> dict[str, Any]:
    return {"median": cell.median, "cv": cell.cv, "n": cell.n, "samples": cell.samples}


def _change(c: Change) -> dict[str, Any]:
    return {"case": c.case, "metric": c.metric, "lower_is_better": lower_is_better(c.metric),
            "a": _side(c.a), "b": _side(c.b), "ratio": c.b.ratio, "ratio_low": c.b.low,
            "ratio_high": c.b.high, "p_value": c.b.p_value, "verdict": c.b.verdict}


def to_json(n: Nights) -> str:
    return json.dumps({
        "a": n.run_a, "b": n.run_b, "metrics": n.metrics, "alpha": compare.ALPHA,
        "min_samples": compare.MIN_SAMPLES,
        "regressions": [{"experiment": r.label, "case": r.case, "metric": r.metric, "text": r.text,
                         "ratio": r.change.b.ratio if r.change else None,
                         "p_value": r.change.b.p_value if r.change else None} for r in n.regressions()],
        "added": n.added, "removed": n.removed,
        "setup": [{"what": what, "a": a, "b": b} for what, a, b in n.setup],
        "experiments": [{"label": p.label, "experiment": p.experiment, "gpu_a": p.a.gpu, "gpu_b": p.b.gpu,
                         "status_a": p.a.status.value, "status_b": p.b.status.value, "comparable": p.comparable,
                         "failed": p.failed, "notes": p.notes, "changes": [_change(c) for c in p.changes]}
                        for p in n.pairs],
    }, indent=1)


def page_context(n: Nights) -> dict[str, Any]:
    """What the page's "against" section shows (templates/nights.html.j2): the summary, the facts, and the
    matrix with a class per verdict (its colour) and each ratio's p-value as its title."""
    noted = [p for p in n.pairs if p.notes]
    number = {p.label: i for i, p in enumerate(noted, 1)}
    rows = []
    for line in matrix(n):
        p, case, first = line.pair, line.case, line.first
        shown = []
        for m in n.metrics:
            cell = line.cells.get(m)
            shown.append({"text": cell_text(cell), "cls": f"v-{cell.verdict}" if cell else "",
                          "title": f"p = {cell.p_value:.3g} (Mann-Whitney)" if cell and cell.p_value is not None
                          else None})
        rows.append({"experiment": p.label if first else "", "name": p.label, "case": case,
                     "status": compare.status_text(p.b) if first else "", "failed": p.failed,
                     "regression": regressed(p, None if case == "-" else case), "cells": shown,
                     "note": number.get(p.label) if first else None})
    summary = [{"text": text, "experiment": label, "case": case or ""}
               for text, (label, case, _) in zip(summary_lines(n), n.summary())]
    return {"a": n.run_a, "b": n.run_b, "heading": heading(n), "summary": summary, "facts": fact_lines(n),
            "legend": legend(),
            "headers": [{"label": metric_label(m), "metric": m} for m in n.metrics], "rows": rows,
            "notes": [{"experiment": p.label, "text": "; ".join(p.notes)} for p in noted]}
