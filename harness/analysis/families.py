"""Bench cases as load curves (pure): cases that differ only in max_concurrency (and num_prompts) form a family,
and each row of the comparison gets a point per concurrency level — its median output throughput and
latencies — for the latency–throughput (Pareto) charts and the terminal's sparklines.

A record keeps each case's metrics, not its settings; max_concurrency and the load's other settings are read
from SGLang's own JSONL beside the record (`bench-<case>.jsonl`: bench_serving writes `max_concurrency`,
`dataset_name`, `random_input_len`, … in every line), through the reader `read_loads` is given.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..common.protocol import Status
from ..results.metrics import MEDIAN_ITL_MS, MEDIAN_TTFT_MS, OUTPUT_THROUGHPUT
from ..results.schemas import Record
from .compare import Row, group_records
from .units import metric_title, number

LEVEL = "max_concurrency"
# bench_serving's settings of a load (its JSONL keys) that must agree for two cases to be one family.
SETTINGS = ("dataset_name", "random_input_len", "random_output_len", "random_range_ratio", "sharegpt_output_len",
            "request_rate")
LATENCIES = (MEDIAN_ITL_MS, MEDIAN_TTFT_MS)  # a Pareto chart per latency, against output throughput
SPARKS = "▁▂▃▄▅▆▇█"

LoadKey = tuple[str, str, str]  # run, experiment, case


@dataclass(frozen=True)
class Load:
    """A bench case's load as bench_serving recorded it: the family's settings, and its concurrency level."""

    settings: tuple[tuple[str, str], ...]
    level: int | None  # max_concurrency; None: not capped


@dataclass(frozen=True)
class Point:
    case: str
    level: int | None
    medians: dict[str, float]  # metric → the median over the row's repeats of this case


@dataclass
class Series:
    label: str
    is_baseline: bool
    points: list[Point] = field(default_factory=list)  # by level


@dataclass
class Family:
    settings: tuple[tuple[str, str], ...]
    cases: list[str]
    levels: list[int | None]
    series: list[Series]

    @property
    def title(self) -> str:
        return describe(dict(self.settings))


def load_of(row: Mapping[str, Any]) -> Load | None:
    """The load of a bench_serving JSONL line; None for a line without `max_concurrency` (not bench_serving's)."""
    if LEVEL not in row:
        return None
    level = row[LEVEL]
    if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
        return None
    settings = tuple((k, json.dumps(row[k], sort_keys=True)) for k in SETTINGS if k in row)
    return Load(settings, level)


def read_loads(records: list[Record], read: Callable[[Record, str], list[dict[str, Any]]]) -> dict[LoadKey, Load]:
    """Each (run, experiment, case)'s load, from the first ok record whose JSONL (`read(record, case)`: its
    lines, [] when missing) names one."""
    out: dict[LoadKey, Load] = {}
    for rec in records:
        if rec.status != Status.OK:
            continue
        for case in rec.metrics:
            key = (rec.run_id, rec.experiment, case)
            if key not in out:
                lines = read(rec, case)
                load = load_of(lines[0]) if lines else None
                if load is not None:
                    out[key] = load
    return out


def _level_order(level: int | None) -> tuple[bool, int]:
    return (level is None, level or 0)


def families(rows: list[Row], records: list[Record], loads: Mapping[LoadKey, Load], metrics: tuple[str, ...] = (),
             min_levels: int = 2) -> list[Family]:
    """The families with at least `min_levels` concurrency levels: per row (one series each) a point per case
    of the family, with the medians of output throughput, the latencies and `metrics`."""
    wanted = (OUTPUT_THROUGHPUT, *LATENCIES, *metrics)
    groups = group_records(records)
    found: dict[tuple[tuple[str, str], ...], dict[str, Series]] = {}
    cases: dict[tuple[tuple[str, str], ...], set[str]] = {}
    for row in rows:
        ok = [r for r in groups.get((row.run_id, row.experiment, row.gpu), []) if r.status == Status.OK]
        for case in sorted({c for r in ok for c in r.metrics}):
            load = loads.get((row.run_id, row.experiment, case))
            medians = _medians(ok, case, wanted)
            if load is None or OUTPUT_THROUGHPUT not in medians:
                continue
            series = found.setdefault(load.settings, {}).setdefault(row.label, Series(row.label, row.is_baseline))
            series.points.append(Point(case, load.level, medians))
            cases.setdefault(load.settings, set()).add(case)
    out = []
    for settings, by_label in found.items():
        for s in by_label.values():
            s.points.sort(key=lambda p: (_level_order(p.level), p.case))
        levels = sorted({p.level for s in by_label.values() for p in s.points}, key=_level_order)
        if len(levels) >= min_levels:
            out.append(Family(settings, sorted(cases[settings]), levels, list(by_label.values())))
    return sorted(out, key=lambda f: (f.title, f.cases))


def _medians(ok: list[Record], case: str, wanted: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for m in wanted:
        samples = [v for r in ok if case in r.metrics for v in r.metrics[case].values(m)]
        if samples:
            out[m] = statistics.median(samples)
    return out


def describe(settings: Mapping[str, str]) -> str:
    """'random-ids, 128 in / 24 out tokens': a family's load in words (its settings are JSON texts)."""
    def get(k: str) -> Any:
        return json.loads(settings[k]) if k in settings else None

    words = [str(get("dataset_name") or "load")]
    if str(words[0]).startswith("random") and get("random_input_len") is not None:
        words.append(f"{get('random_input_len')} in / {get('random_output_len')} out tokens")
        if get("random_range_ratio") not in (None, 0, 0.0, 1, 1.0):
            words.append(f"range ratio {get('random_range_ratio')}")
    elif get("sharegpt_output_len"):
        words.append(f"{get('sharegpt_output_len')} out tokens")
    rate = get("request_rate")
    if isinstance(rate, (int, float)) and math.isfinite(rate):
        words.append(f"{rate:g} req/s")
    return ", ".join(words)


def level_text(level: int | None) -> str:
    return "∞" if level is None else str(level)


# ============================================================================ the terminal's sparklines


def sparkline(values: list[float | None], hi: float) -> str:
    """A bar per value, its height proportional to the value (0 .. `hi`); a blank where there is none."""
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            out.append(SPARKS[min(len(SPARKS) - 1, max(0, round(v / hi * (len(SPARKS) - 1)))) if hi > 0 else 0])
    return "".join(out)


def sparkline_lines(fams: list[Family], metric: str) -> list[str]:
    """Under the terminal table: per family, each row's `metric` across the concurrency levels as a sparkline
    (one scale per family, from 0: heights compare between rows), with its first and last value."""
    out: list[str] = []
    for fam in fams:
        rows = [(s.label, [_at(s, level, metric) for level in fam.levels]) for s in fam.series]
        values = [v for _, vs in rows for v in vs if v is not None]
        if not values:
            continue
        hi, width = max(values), min(max(len(label) for label, _ in rows), 40)
        out.append(f"{metric_title(metric)} across max concurrency "
                   f"{', '.join(level_text(level) for level in fam.levels)}: {fam.title} ({', '.join(fam.cases)})")
        for label, vs in rows:
            shown = [v for v in vs if v is not None]
            ends = f"{number(shown[0])} … {number(shown[-1])}" if len(shown) > 1 else number(shown[0]) if shown else "-"
            shown_label = label if len(label) <= width else label[: width - 1] + "…"
            out.append(f"  {shown_label.ljust(width)}  {sparkline(vs, hi)}  {ends}")
    return out


def _at(s: Series, level: int | None, metric: str) -> float | None:
    return next((p.medians[metric] for p in s.points if p.level == level and metric in p.medians), None)
