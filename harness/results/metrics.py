"""Benchmark metrics: the JSONL rows SGLang's bench_serving writes, summarised per case (pure)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict

# Metrics other modules read by name (SGLang's own names).
OUTPUT_THROUGHPUT = "output_throughput"  # tok/s: what comparisons rank by unless told otherwise
MEDIAN_TTFT_MS = "median_ttft_ms"
MEDIAN_ITL_MS = "median_itl_ms"

Number = Union[int, float]  # as bench_serving wrote it: an int stays an int on disk


class CaseSummary(BaseModel):
    """One bench case over its repeats, as a record keeps it (`summarize`): how many ran, every repeat's value of
    each key metric in `samples` (None: that repeat's line held no number), and each metric's median under its
    own name (SGLang's). Everything else stays in the case's JSONL file."""

    model_config = ConfigDict(extra="forbid")

    repeats: int = 0
    samples: dict[str, list[Optional[Number]]] = {}
    output_throughput: Optional[Number] = None
    request_throughput: Optional[Number] = None
    input_throughput: Optional[Number] = None
    total_throughput: Optional[Number] = None
    median_ttft_ms: Optional[Number] = None
    mean_ttft_ms: Optional[Number] = None
    p99_ttft_ms: Optional[Number] = None
    median_itl_ms: Optional[Number] = None
    mean_itl_ms: Optional[Number] = None
    p99_itl_ms: Optional[Number] = None
    median_tpot_ms: Optional[Number] = None
    mean_tpot_ms: Optional[Number] = None
    p99_tpot_ms: Optional[Number] = None
    median_e2e_latency_ms: Optional[Number] = None
    duration: Optional[Number] = None
    completed: Optional[Number] = None
    total_output_tokens: Optional[Number] = None
    concurrency: Optional[Number] = None

    def median(self, metric: str) -> Number | None:
        """The metric's median over the repeats (None: not measured, or not a key metric)."""
        value = getattr(self, metric, None) if metric in KEY_METRICS else None
        return value if isinstance(value, (int, float)) else None

    def values(self, metric: str) -> list[float]:
        """Every repeat's value of the metric that is a number, in repeat order."""
        return [float(v) for v in self.samples.get(metric) or [] if v is not None and math.isfinite(v)]


# The keys a record keeps per case: the summary's medians.
KEY_METRICS = tuple(name for name in CaseSummary.model_fields if name not in ("repeats", "samples"))


def parse_jsonl(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL text; blank, broken and non-object lines are skipped."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def summarize(rows: Iterable[dict[str, Any]]) -> CaseSummary:
    """Key metrics of one case over its repeats: the median of those that are numbers, plus every repeat's value
    in `samples` (a NaN or an infinity, which JSON cannot hold, as None)."""
    rows = list(rows)
    samples: dict[str, list[Number | None]] = {}
    medians: dict[str, Number] = {}
    for key in KEY_METRICS:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        if values:
            finite = [v for v in values if math.isfinite(v)]
            samples[key] = [v if math.isfinite(v) else None for v in values]
            if finite:
                medians[key] = statistics.median(finite)
    return CaseSummary(repeats=len(rows), samples=samples, **medians)
