"""How a metric is named and a number is written (pure): the one table of what each metric a record keeps is —
its unit, its direction, its short label, its title — and the one number format of the tables, notes and charts.

Every view (the terminal table, markdown, the page, the charts, night against night, a bisect) takes its words
for a metric from here, so no two of them can disagree on a unit or on which way is better."""

from __future__ import annotations

import re

from ..results.metrics import MEDIAN_ITL_MS, MEDIAN_TTFT_MS

# The metrics whose unit is not read from their name (metrics.KEY_METRICS: SGLang's bench_serving names).
_UNITS = {"request_throughput": "req/s", "duration": "s", "completed": "requests", "total_output_tokens": "tokens"}
# The latencies a latency–throughput chart is drawn for: (short name, axis title).
LATENCY_NAMES = {MEDIAN_ITL_MS: ("median ITL", "median inter-token latency, ITL (ms)"),
                 MEDIAN_TTFT_MS: ("median TTFT", "median time to first token, TTFT (ms)")}


def lower_is_better(metric: str) -> bool:
    """Of the metrics a record keeps (metrics.KEY_METRICS): the latencies (every one ends in `_ms`) and the
    benchmark's duration; throughputs and counts are higher-is-better."""
    return metric.endswith("_ms") or metric == "duration"


def metric_unit(metric: str) -> str:
    """The unit of a metric a record keeps ('' when it has none: concurrency)."""
    if metric.endswith("_ms"):
        return "ms"
    if metric in _UNITS:
        return _UNITS[metric]
    if metric.endswith("_throughput"):
        return "tok/s"
    return ""


def direction(metric: str) -> str:
    """'lower is better' or 'higher is better'."""
    return f"{'lower' if lower_is_better(metric) else 'higher'} is better"


def metric_title(metric: str, *, better: bool = False) -> str:
    """'output_throughput (tok/s)'; with `better`: 'output_throughput (tok/s), higher is better'."""
    unit = metric_unit(metric)
    return f"{metric}{f' ({unit})' if unit else ''}" + (f", {direction(metric)}" if better else "")


def metric_label(metric: str) -> str:
    """A short column name for a metric: 'output tok/s', 'req/s', 'TTFT p50', 'ITL mean', 'E2E p50'."""
    if metric == "request_throughput":
        return "req/s"
    if metric.endswith("_throughput"):
        return f"{metric.removesuffix('_throughput')} {metric_unit(metric)}"
    m = re.fullmatch(r"(median|mean|p\d+)_([a-z0-9]+)(?:_latency)?_ms", metric)
    if m:
        return f"{m[2].upper()} {'p50' if m[1] == 'median' else m[1]}"
    return metric


def number(v: float | None) -> str:
    """A measured value as every table, note and chart writes it: '4,900.0' from 10 up, three significant
    digits below ('2.05', '0.0123'); '-' for none."""
    if v is None:
        return "-"
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
