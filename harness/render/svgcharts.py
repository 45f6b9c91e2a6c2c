"""The page's charts as inline SVG, with no extra installed (pure; drawn with svgdraw.py).

- `case_chart`: one bench case, a bar per row of the comparison at its median, a whisker over the range of
  its repeats and a dot per repeat; the baseline's bar hatched, its median a dashed line; a row without a
  result a red ✕ and its status (no bar: a zero would read as a measurement).
- `pareto_chart`: one family of cases (families.py) — latency (median ITL or TTFT) against output throughput,
  a line per row through its concurrency levels, each point labelled with its level, the points no other
  point beats on both axes (the Pareto front) ringed. Lower right is better.
"""

from __future__ import annotations

import math
from typing import Any

from ..analysis.compare import Cell, Row
from ..analysis.families import Family, level_text
from ..analysis.units import LATENCY_NAMES, direction, metric_title, number
from ..common.protocol import Status
from ..results.metrics import OUTPUT_THROUGHPUT
from .svgdraw import (
    FAIL,
    INK,
    MUTED,
    Chart,
    LegendEntry,
    Scale,
    clip,
    document,
    esc,
    legend,
    line_swatch,
    marker,
    num,
    stacked,
    style,
    text,
    text_width,
    ticks,
    x_axis,
    y_axis,
)

WIDTH = 760
BAND = 26  # px per row of a case chart
BAR = "#0072B2"
BASE = "#8c959f"
def no_result(row: Row) -> str:
    if row.status == Status.OK:
        return "no result"
    return f"{row.status.value}{' (expected)' if row.expected else ''}"


# ============================================================================ one bench case


def case_chart(rows: list[Row], case: str, metric: str, prefix: str) -> Chart:
    """The rows' medians of `metric` in bench case `case`, a horizontal bar each (names stay readable)."""
    labels = [r.label + (" (baseline)" if r.is_baseline else "") for r in rows]
    left = min(max([text_width(lb, 11) for lb in labels] + [60]) + 16, 320)
    right, top = WIDTH - 90, 58
    bottom = top + BAND * max(len(rows), 1)
    cells = [(r, r.cells.get(case)) for r in rows]
    values = [v for _, c in cells for v in _drawable(c)]
    xs = ticks(0, max(values) * 1.02 if values else 1.0)
    sx = Scale(xs[0], xs[-1], left, right)
    heading = metric_title(metric, better=True)
    body = [text(12, 22, f"{case}: {heading}", size=14, extra='font-weight="600"'),
            text(12, 40, "bar: median · whisker: lowest to highest repeat · dot: one repeat", size=11, fill=MUTED)]
    body += x_axis(sx, xs, bottom, top, heading)
    desc = []
    for i, ((row, cell), label) in enumerate(zip(cells, labels)):
        y = top + BAND * i + BAND / 2
        body.append(f'<text x="{num(left - 8)}" y="{num(y + 4)}" text-anchor="end" class="row-label">'
                    f'<title>{esc(label)}</title>{esc(clip(label, int((left - 16) / 6.6)))}</text>')
        samples = _drawable(cell)
        if cell is None or cell.median is None or not samples:
            body.append(f'<g class="no-result" transform="translate({num(sx(0))} {num(y)})">'
                        f'<path d="M-5,-5L5,5M-5,5L5,-5" stroke="{FAIL}" stroke-width="2"/>'
                        + text(10, 4, no_result(row), fill=FAIL, size=11) + "</g>")
            desc.append(f"{label}: {no_result(row)}")
            continue
        body += _bar(row, cell.median, samples, sx, y, prefix)
        desc.append(f"{label}: median {number(cell.median)}, {cell.n} repeats from {number(min(samples))} "
                    f"to {number(max(samples))}")
    for row, cell in cells:
        if row.is_baseline and cell is not None and cell.median is not None and _drawable(cell):
            x = num(sx(cell.median))
            body.append(f'<line class="baseline-line" x1="{x}" y1="{top - 4}" x2="{x}" y2="{num(bottom)}" '
                        f'stroke="{INK}" stroke-dasharray="5 3"/>')
    entries = [LegendEntry("median", f'<rect x="-2" y="-6" width="16" height="12" fill="{BAR}"/>'),
               LegendEntry("baseline median", f'<rect x="-2" y="-6" width="16" height="12" '
                                              f'fill="url(#{prefix}-hatch)"/>'),
               LegendEntry("lowest to highest repeat", f'<path d="M-1,-5V5M-1,0H13M13,-5V5" stroke="{INK}"/>'),
               LegendEntry("one repeat", '<circle cx="6" r="2.5" fill="#000000" fill-opacity="0.6"/>')]
    if any(not _drawable(c) for _, c in cells):
        entries.append(LegendEntry("no result", f'<path d="M1,-5L11,5M1,5L11,-5" stroke="{FAIL}" stroke-width="2"/>'))
    drawn, height = legend(entries, 12, bottom + 58, WIDTH - 24)
    body += drawn
    hatch = (f'<pattern id="{prefix}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
             f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{BASE}"/>'
             f'<line x1="0" y1="0" x2="0" y2="6" stroke="{INK}" stroke-width="1.5"/></pattern>')
    title = f"bench case {case}: {metric_title(metric)} per experiment, {direction(metric)}"
    return document(prefix, WIDTH, int(bottom + 58 + height), title, "; ".join(desc), body, defs=hatch,
                    extra=f'data-case="{esc(case)}"')


def _drawable(cell: Cell | None) -> list[float]:
    """A cell's repeats that can be drawn: none without a finite median (a JSONL line may hold NaN)."""
    if cell is None or cell.median is None or not math.isfinite(cell.median):
        return []
    return [v for v in cell.samples if math.isfinite(v)]


def _bar(row: Row, median: float, samples: list[float], sx: Scale, y: float, prefix: str) -> list[str]:
    fill = f"url(#{prefix}-hatch)" if row.is_baseline else BAR
    lo, hi = sx(min(samples)), sx(max(samples))
    out = [f'<g class="bar" data-label="{esc(row.label)}" data-median="{median:g}">',
           f'<rect x="{num(sx(0))}" y="{num(y - 8)}" width="{num(max(sx(median) - sx(0), 1))}" height="16" '
           f'fill="{fill}"><title>{esc(row.label)}: median {number(median)}</title></rect>',
           f'<path d="M{num(lo)},{num(y - 5)}V{num(y + 5)}M{num(lo)},{num(y)}H{num(hi)}M{num(hi)},{num(y - 5)}'
           f'V{num(y + 5)}" stroke="{INK}" stroke-width="1.2"/>']
    out += [f'<circle class="repeat" cx="{num(sx(v))}" cy="{num(y)}" r="2.5" fill="#000000" fill-opacity="0.6"/>'
            for v in samples]
    out.append(text(max(sx(median), hi) + 6, y + 4, number(median), size=11, fill=MUTED))
    return out + ["</g>"]


# ============================================================================ latency against throughput


def pareto_front(points: list[tuple[float, float]]) -> set[int]:
    """The points (throughput, latency) that no other point beats: as fast or faster *and* as quick or quicker,
    strictly better in one."""
    return {i for i, (x, y) in enumerate(points)
            if not any(x2 >= x and y2 <= y and (x2 > x or y2 < y) for x2, y2 in points)}


def pareto_chart(fam: Family, latency: str, prefix: str) -> Chart | None:
    """`latency` against output throughput for each row of the family, through its levels; None when no row
    has both."""
    short, axis_title = LATENCY_NAMES.get(latency, (latency, metric_title(latency)))
    series = [(i, s, [p for p in s.points if OUTPUT_THROUGHPUT in p.medians and latency in p.medians])
              for i, s in enumerate(fam.series)]
    series = [(i, s, pts) for i, s, pts in series if pts]
    if not series:
        return None
    flat = [(p.medians[OUTPUT_THROUGHPUT], p.medians[latency]) for _, _, pts in series for p in pts]
    front = pareto_front(flat)
    xs, ys = ticks(0, max(x for x, _ in flat) * 1.05), ticks(0, max(y for _, y in flat) * 1.08)
    left, right, top, bottom = 84, WIDTH - 24, 62, 372
    sx, sy = Scale(xs[0], xs[-1], left, right), Scale(ys[0], ys[-1], bottom, top)
    title = f"{fam.title}: {short} against output throughput"
    body = [text(12, 22, title, size=14, extra='font-weight="600"'),
            text(12, 40, f"cases {', '.join(fam.cases)} · point labels: max concurrency · lower right is better "
                         "(more tok/s, less latency) · ringed: the Pareto front", size=11, fill=MUTED)]
    body += x_axis(sx, xs, bottom, top, "output throughput (tok/s)") + y_axis(sy, ys, left, right, axis_title)
    entries, desc, k = [], [], 0
    for i, s, pts in series:
        st = style(i)
        label = s.label + (" (baseline)" if s.is_baseline else "")
        dash = f' stroke-dasharray="{st.dash}"' if st.dash else ""
        coords = " ".join(f"{num(sx(p.medians[OUTPUT_THROUGHPUT]))},{num(sy(p.medians[latency]))}" for p in pts)
        body.append(f'<g class="series" data-series="{esc(s.label)}">'
                    f'<polyline points="{coords}" fill="none" stroke="{st.color}" stroke-width="2"{dash}/>')
        for p in pts:
            x, y = p.medians[OUTPUT_THROUGHPUT], p.medians[latency]
            tip = f"{label}, max concurrency {level_text(p.level)} ({p.case}): {number(x)} tok/s, {number(y)} ms"
            ring = (f'<circle class="front" r="9" fill="none" stroke="{INK}" stroke-width="1.2"/>'
                    if k in front else "")
            body.append(f'<g class="point" data-series="{esc(s.label)}" data-level="{level_text(p.level)}" '
                        f'data-x="{x:g}" data-y="{y:g}" transform="translate({num(sx(x))} {num(sy(y))})">'
                        f"<title>{esc(tip)}</title>{ring}{marker(st.marker, st.color)}"
                        + text(8, -8, level_text(p.level), size=10, fill=MUTED) + "</g>")
            desc.append(tip + (" (on the Pareto front)" if k in front else ""))
            k += 1
        body.append("</g>")
        entries.append(LegendEntry(label, line_swatch(st)))
    entries.append(LegendEntry("Pareto front", f'<circle cx="6" r="7" fill="none" stroke="{INK}"/>'))
    drawn, height = legend(entries, 12, bottom + 60, WIDTH - 24)
    return document(prefix, WIDTH, int(bottom + 60 + height), title, "; ".join(desc), body + drawn,
                    extra=f'data-latency="{esc(latency)}"')


# ============================================================================ for the page


def case_plots(rows: list[Row], metric: str) -> list[dict[str, Any]]:
    """One chart per bench case: {case, svg, min_width, max_width} for the template."""
    cases = sorted({c for r in rows for c in r.cells})
    out = []
    for i, case in enumerate(cases):
        chart = case_chart(rows, case, metric, f"plot{i}")
        out.append({"case": case, "svg": chart.svg, "min_width": 480, "max_width": round(chart.width * 1.25)})
    return out


def pareto_plots(fams: list[Family]) -> list[dict[str, Any]]:
    """A chart per family and latency: {family, cases, latency, svg, min_width, max_width}."""
    out = []
    for i, fam in enumerate(fams):
        for latency in LATENCY_NAMES:
            chart = pareto_chart(fam, latency, f"pareto{i}-{latency.split('_')[1]}")
            if chart is not None:
                out.append({"family": fam.title, "cases": ", ".join(fam.cases), "latency": LATENCY_NAMES[latency][0],
                            "svg": chart.svg, "min_width": 480, "max_width": round(chart.width * 1.25)})
    return out


def case_plots_file(rows: list[Row], metric: str, mark: str) -> str:
    """Every case's chart, one under another, as a standalone SVG file carrying `mark` (`compare --plot x.svg`)."""
    cases = sorted({c for r in rows for c in r.cells})
    return stacked([case_chart(rows, case, metric, f"plot{i}") for i, case in enumerate(cases)], mark)
