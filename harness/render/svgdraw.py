"""SVG drawn by hand (pure, standard library only): the pieces the charts of svgcharts.py are made of.

Escaped text (a name from YAML or a GPU name from a host never becomes markup), nice axis ticks, a linear
scale, axes with their titles, markers and a legend that tell series apart by colour *and* shape *and* dash
(so a page printed in grey still reads), and the <svg> element itself: `role="img"`, a <title> and a <desc>
for screen readers, every id scoped by the chart's prefix so that several charts share a page. Same input,
same bytes: coordinates are rounded and nothing random, dated or locale-dependent is written.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..safetext import display_line

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
FONT_SIZE = 12
INK = "#1b1f24"
MUTED = "#57606a"
GRID = "#d0d7de"
FAIL = "#cf222e"
# Okabe & Ito's palette, distinct for the common colour-vision deficiencies (yellow last: faint on white).
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("circle", "square", "triangle", "diamond", "triangle-down")
DASHES = ("", "7 3", "2 3", "9 3 2 3")  # solid, dashed, dotted, dash-dot: told apart without colour
_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Chart:
    """One drawn chart: its natural size in px and the <svg> element."""

    width: int
    height: int
    svg: str


@dataclass(frozen=True)
class Style:
    """How a series is drawn: the colour, the marker shape and the line's dash."""

    color: str
    marker: str
    dash: str


def style(i: int) -> Style:
    """The i-th series' style: colour, shape and dash each cycle, so neighbours differ in all three."""
    return Style(COLORS[i % len(COLORS)], MARKERS[i % len(MARKERS)], DASHES[i % len(DASHES)])


def esc(text: object) -> str:
    """Text (or an attribute's value) as XML: control characters shown escaped (safetext), then & < > " '."""
    shown = display_line(str(text)).replace("\ufffe", "\\ufffe").replace("\uffff", "\\uffff")
    return html.escape(shown, quote=True)


def num(v: float) -> str:
    """A coordinate: one decimal at most, no '-0'."""
    s = f"{v:.1f}"
    s = s[:-2] if s.endswith(".0") else s
    return "0" if s == "-0" else s


def clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "…"


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """About how wide `text` is drawn (no font metrics here: an average glyph of 0.6 em)."""
    return len(text) * size * 0.6


# ============================================================================ scales and ticks


def ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 × 10^k) covering lo..hi: of the steps that give `n` to `n` + 2
    intervals, the one that wastes least room past the data (fewer ticks on a tie)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    mag = 10 ** math.floor(math.log10((hi - lo) / n))
    best: tuple[float, int, float] | None = None
    for step in (m * mag * e for e in (0.1, 1, 10) for m in (1, 2, 2.5, 5)):
        start, end = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
        if n - 2 <= end - start <= n + 2:
            key = ((end - start) * step, end - start, step)
            best = key if best is None or key < best else best
    step = best[2] if best else (hi - lo) / n
    start, end = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [_round(k * step, step) for k in range(start, end + 1)]


def _decimals(step: float) -> int:
    return next((d for d in range(7) if abs(round(step, d) - step) <= 1e-9 * step), 6)


def _round(v: float, step: float) -> float:
    return round(v, _decimals(step))


def tick_label(v: float, values: Sequence[float]) -> str:
    """A tick's text, with as many decimals as the step between ticks needs and thousands separated."""
    step = values[1] - values[0] if len(values) > 1 else 1.0
    return f"{v:,.{_decimals(step)}f}"


@dataclass(frozen=True)
class Scale:
    """Data lo..hi onto pixels a..b (b < a for a y axis: up is more)."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, v: float) -> float:
        return self.a + (v - self.lo) / ((self.hi - self.lo) or 1.0) * (self.b - self.a)


# ============================================================================ pieces


def text(x: float, y: float, s: str, *, anchor: str = "start", size: int = FONT_SIZE, fill: str = INK,
         extra: str = "") -> str:
    return (f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}" font-size="{size}" fill="{fill}"'
            f'{" " + extra if extra else ""}>{esc(s)}</text>')


def marker(shape: str, color: str, r: float = 4.5, fill: str | None = None) -> str:
    """A marker centred on (0, 0): place it with a translate."""
    paint = f'fill="{fill or color}" stroke="{color}" stroke-width="1.5"'
    if shape == "circle":
        return f'<circle r="{num(r)}" {paint}/>'
    if shape == "square":
        return f'<rect x="{num(-r * .85)}" y="{num(-r * .85)}" width="{num(r * 1.7)}" height="{num(r * 1.7)}" {paint}/>'
    points = {"triangle": ((0, -1.15), (1.05, .75), (-1.05, .75)), "triangle-down": ((0, 1.15), (1.05, -.75),
              (-1.05, -.75)), "diamond": ((0, -1.25), (1.05, 0), (0, 1.25), (-1.05, 0))}[shape]
    return f'<polygon points="{" ".join(f"{num(x * r)},{num(y * r)}" for x, y in points)}" {paint}/>'


def x_axis(scale: Scale, values: list[float], y: float, top: float, title: str) -> list[str]:
    """Ticks, their labels and grid lines (up to `top`) along the bottom at `y`, the title under them."""
    out = ['<g class="x-axis">', f'<line x1="{num(scale.a)}" y1="{num(y)}" x2="{num(scale.b)}" y2="{num(y)}" '
           f'stroke="{INK}"/>']
    for v in values:
        x = scale(v)
        out.append(f'<line x1="{num(x)}" y1="{num(top)}" x2="{num(x)}" y2="{num(y)}" stroke="{GRID}"/>')
        out.append(f'<line x1="{num(x)}" y1="{num(y)}" x2="{num(x)}" y2="{num(y + 4)}" stroke="{INK}"/>')
        out.append(text(x, y + 17, tick_label(v, values), anchor="middle", size=11, fill=MUTED,
                        extra='class="tick"'))
    out.append(text((scale.a + scale.b) / 2, y + 36, title, anchor="middle", extra='class="axis-title"'))
    return out + ["</g>"]


def y_axis(scale: Scale, values: list[float], x: float, right: float, title: str) -> list[str]:
    """Ticks, labels and grid lines (to `right`) along the left at `x`, the title turned upright beside them."""
    out = ['<g class="y-axis">', f'<line x1="{num(x)}" y1="{num(scale.a)}" x2="{num(x)}" y2="{num(scale.b)}" '
           f'stroke="{INK}"/>']
    for v in values:
        y = scale(v)
        out.append(f'<line x1="{num(x)}" y1="{num(y)}" x2="{num(right)}" y2="{num(y)}" stroke="{GRID}"/>')
        out.append(f'<line x1="{num(x - 4)}" y1="{num(y)}" x2="{num(x)}" y2="{num(y)}" stroke="{INK}"/>')
        out.append(text(x - 7, y + 4, tick_label(v, values), anchor="end", size=11, fill=MUTED,
                        extra='class="tick"'))
    mid = (scale.a + scale.b) / 2
    width = max(text_width(tick_label(v, values), 11) for v in values)
    tx = x - width - 18
    out.append(text(tx, mid, title, anchor="middle", extra=f'class="axis-title" transform="rotate(-90 {num(tx)} '
                                                           f'{num(mid)})"'))
    return out + ["</g>"]


@dataclass(frozen=True)
class LegendEntry:
    label: str
    swatch: str  # SVG drawn around (0, 0), about 24 px wide


def legend(entries: list[LegendEntry], x: float, y: float, width: float) -> tuple[list[str], float]:
    """Entries laid out left to right, wrapping at `width`; the SVG and the height it takes."""
    out, cx, cy = ['<g class="legend">'], x, y
    for e in entries:
        w = 34 + text_width(e.label)
        if cx > x and cx + w > x + width:
            cx, cy = x, cy + 20
        out.append(f'<g class="legend-entry" transform="translate({num(cx)} {num(cy)})">{e.swatch}'
                   + text(18, 4, e.label) + "</g>")
        cx += w + 14
    return out + ["</g>"], cy - y + 20


def line_swatch(st: Style) -> str:
    dash = f' stroke-dasharray="{st.dash}"' if st.dash else ""
    return (f'<line x1="-2" y1="0" x2="14" y2="0" stroke="{st.color}" stroke-width="2"{dash}/>'
            f'<g transform="translate(6 0)">{marker(st.marker, st.color, 4)}</g>')


def document(prefix: str, width: int, height: int, title: str, desc: str, body: list[str], defs: str = "",
             extra: str = "") -> Chart:
    """The <svg> element: sized by its viewBox (the page scales it), a white ground (readable in dark mode and
    in print), <title> and <desc> named by aria-labelledby. `prefix` scopes every id of the chart."""
    if not _PREFIX.match(prefix):
        raise ValueError(f"chart id prefix {prefix!r}: a letter, then letters, digits, - or _")
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{prefix}" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-labelledby="{prefix}-title '
           f'{prefix}-desc" font-family="{esc(FONT)}" font-size="{FONT_SIZE}"{" " + extra if extra else ""}>'
           f'<title id="{prefix}-title">{esc(title)}</title><desc id="{prefix}-desc">{esc(desc)}</desc>'
           + (f"<defs>{defs}</defs>" if defs else "")
           + f'<rect width="{width}" height="{height}" fill="#ffffff"/>' + "".join(body) + "</svg>")
    return Chart(width, height, svg)


def stacked(charts: list[Chart], mark: str, gap: int = 16) -> str:
    """Charts one under another as one standalone SVG file (`compare --plot x.svg`), carrying `mark`."""
    width = max((c.width for c in charts), default=200)
    height, parts = 0, []
    for c in charts:
        parts.append(f'<g transform="translate(0 {height})">{c.svg}</g>')
        height += c.height + gap
    height = max(height - gap, 40)
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}"><metadata>{esc(mark)}</metadata>'
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>' + "".join(parts) + "</svg>\n")
