"""`harness compare --plot FILE`: the comparison drawn, one panel per bench case. An .svg file is drawn by
svgcharts.py (no extra, the page's own charts); PNG, PDF and the rest by matplotlib (the optional extra `plot`):
a bar per row at its median and every repeat as a dot."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.compare import Row
from ..analysis.units import direction, metric_title
from ..common.protocol import Status
from ..errors import ConfigError
from . import outdir
from .svgcharts import case_plots_file

if TYPE_CHECKING:
    from matplotlib.figure import Figure


MARK = "harness compare --plot"  # embedded in the file: how a plot of ours is told from anyone else's file
MARK_KEY = {"png": "Software", "svg": "Creator", "pdf": "Creator", "ps": "Creator", "eps": "Creator"}


def plot(rows: list[Row], metric: str, path: Path | str) -> None:
    """Write the plot in the format of `path`'s suffix (PNG without one; SVG without matplotlib), atomically;
    a file at `path` is replaced only when the harness wrote it (outdir.check_output_file)."""
    path = Path(path)
    fmt = path.suffix[1:].lower() or "png"
    if fmt == "svg":  # the page's charts, stacked: no matplotlib needed
        outdir.check_output_file(path, MARK.encode(), "--plot")
        outdir.replace_file(path, case_plots_file(rows, metric, MARK).encode("utf-8"))
        return
    fig = plot_figure(rows, metric)
    if fmt not in fig.canvas.get_supported_filetypes():
        raise ConfigError(f"{path}: matplotlib cannot write .{fmt} files",
                          hint="give --plot a .png, .svg or .pdf file name")
    key = MARK_KEY.get(fmt)
    outdir.check_output_file(path, MARK.encode() if key else None, "--plot")
    outdir.replace_file(path, lambda f: fig.savefig(f, format=fmt, dpi=120, metadata={key: MARK} if key else None))


BAR_COLORS = {"baseline": "tab:gray", "candidate": "tab:blue"}


def plot_figure(rows: list[Row], metric: str) -> Figure:
    """One panel per bench case: a bar per row at its median, every repeat as a dot on it; a row without a
    result gets no bar (a zero would read as a measurement) but a red cross and its status at the foot."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        raise ConfigError("--plot needs matplotlib for this file type",
                          hint="pip install 'harness[plot]', or give --plot an .svg file (no extra needed)") from None
    cases = sorted({c for r in rows for c in r.cells}) or ["-"]
    fig = Figure(figsize=(max(6, len(rows) * 1.1), 3.4 * len(cases)), layout="constrained")
    for ax, case in zip(fig.subplots(len(cases), 1, squeeze=False)[:, 0], cases):
        drawn = [(i, r, r.cells[case]) for i, r in enumerate(rows) if case in r.cells and r.cells[case].n]
        drawn_at = {i for i, _, _ in drawn}
        ax.bar([i for i, _, _ in drawn], [c.median for _, _, c in drawn],
               color=[BAR_COLORS["baseline" if r.is_baseline else "candidate"] for _, r, _ in drawn])
        for i, _, c in drawn:
            ax.plot([i] * c.n, c.samples, "o", color="black", markersize=3)
        for i, r in enumerate(rows):
            if i not in drawn_at:
                ax.plot([i], [0], "x", color="tab:red", markersize=8)
                what = r.status.value + (" (expected)" if r.expected else "") if r.status != Status.OK else "no result"
                ax.annotate(what, (i, 0), xytext=(0, 6),
                            textcoords="offset points", ha="center", va="bottom", rotation=90, fontsize=8,
                            color="tab:red")
        ax.set_xticks(range(len(rows)), [r.label for r in rows], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(metric_title(metric))
        ax.set_title(f"{case}: {metric}, {direction(metric)}")
        ax.legend(handles=[Patch(color=BAR_COLORS["baseline"], label="baseline (median)"),
                           Patch(color=BAR_COLORS["candidate"], label="median"),
                           Line2D([], [], ls="", marker="o", color="black", markersize=3, label="each repeat"),
                           Line2D([], [], ls="", marker="x", color="tab:red", label="no result")],
                  fontsize=7, loc="best")
    return fig
