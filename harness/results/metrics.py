"""Benchmark metrics: the JSONL rows SGLang's bench_serving writes, summarised per case (pure)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from typing import Any

# Metrics other modules read by name (SGLang's own names).
OUTPUT_THROUGHPUT = "output_throughput"  # tok/s: what comparisons rank by unless told otherwise
MEDIAN_TTFT_MS = "median_ttft_ms"
MEDIAN_ITL_MS = "median_itl_ms"
SAMPLES = "samples"  # a case's summary: metric → every repeat's value

# The keys a record keeps per case (SGLang's own names); everything else stays in the JSONL file.
KEY_METRICS = (
    "output_throughput", "request_throughput", "input_throughput", "total_throughput",
    "median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms",
    "median_itl_ms", "mean_itl_ms", "p99_itl_ms",
    "median_tpot_ms", "mean_tpot_ms", "p99_tpot_ms",
    "median_e2e_latency_ms", "duration", "completed", "total_output_tokens", "concurrency",
)


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


def summarize(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Key metrics of one case over its repeats: the median, plus every repeat's value in `samples`."""
    rows = list(rows)
    out: dict[str, Any] = {"repeats": len(rows), SAMPLES: {}}
    for key in KEY_METRICS:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        if values:
            out[key] = statistics.median(values)
            out["samples"][key] = values
    return out
