"""Outlier repeats (pure): which repeats of a row's bench case lie far from the others (a robust rule from 5
repeats on; under 5, a drift rule that works from 3), what each is called in a note, and the likely cause: the
prefix cache (the repeat's prefills found a share of their prompts cached unlike the others'), or what its logs
show — a JIT build, a CUDA graph capture, a batch shape run without a captured graph. Never dropped from the
median: the table marks a cell with a drifted repeat instead of judging it."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .units import number

# |x - median| > K * scale flags a repeat, scale = MAD_SCALE * MAD (the median absolute deviation, scaled to
# a normal distribution's standard deviation), at least FLOOR of the median. K = 3.5 is Iglewicz and
# Hoaglin's cut on the modified z-score: ~1 in 2,000 normal values crosses it. The floor keeps a quiet
# series (a simulated target's, MAD ~ 0) from calling a 0.5 % wobble an outlier, while a 4.9 s TTFT among
# 0.27 s ones is still flagged when the other repeats agree exactly.
K = 3.5
MAD_SCALE = 1.4826
FLOOR = 0.01
# Under 5 repeats the median and the MAD are the outlier's own values too often: the drift rule instead.
MIN_REPEATS = 5
# Drift (3 or 4 repeats): a repeat more than DRIFT off the median of the others, and more than DRIFT_AGREE
# times the others' own range, measured something else (a cold first repeat among prefix-cache hits: 3-8x).
# The floor keeps a loaded machine's 10-20 % wobble unflagged (the CV reports that as noise); the range rule
# keeps scattered values unflagged (noise too, not one repeat gone astray).
MIN_DRIFT_REPEATS = 3
DRIFT = 0.25
DRIFT_AGREE = 3.0
# A repeat whose prefills found a share of their prompt tokens cached this far from the others' took its
# time from another cache state.
CACHE_GAP = 0.2


@dataclass(frozen=True)
class Origin:
    """Where a sample came from: its attempt (folder name), the sweep round, the repeat within the case (1-), and
    how many repeats of the case that attempt measured (a log with more runs holds a warm-up before them)."""

    run_id: str
    experiment: str
    attempt: str
    round: int | None
    repeat: int
    of: int = 0


@dataclass
class Outlier:
    case: str
    origin: Origin
    value: float
    median: float  # of all the values (an outlier), of the others (a drift)
    cause: str | None = None  # what the logs show about that repeat, when they show something
    drift: bool = False  # found by the drift rule (3-4 repeats): the cell is not judged
    cache_cause: str | None = None  # the prefix cache's part, when the prefill counts show one

    def note(self) -> str:
        """'c8: outlier round 1 repeat 1 (4,900.0 vs median 270.0; a JIT build in its log)', or 'c8: drift
        repeat 1 (150.0 vs 410.0 for the others; prefix cache: 0 % of its prompt tokens cached, the others 98 %)'."""
        where = f"round {self.origin.round} " if self.origin.round is not None else ""
        causes = [c for c in (self.cache_cause, f"{self.cause} in its log" if self.cause else None) if c]
        why = "; " + "; ".join(causes) if causes else ("; no cause in its logs" if self.drift else "")
        against = f"vs {number(self.median)} for the others" if self.drift else f"vs median {number(self.median)}"
        kind = "drift" if self.drift else "outlier"
        return f"{self.case}: {kind} {where}repeat {self.origin.repeat} ({number(self.value)} {against}{why})"


def flagged(values: Sequence[float]) -> list[int]:
    """The indices of the values the rule calls outliers (none under MIN_REPEATS values)."""
    if len(values) < MIN_REPEATS:
        return []
    med = statistics.median(values)
    scale = max(MAD_SCALE * statistics.median(abs(v - med) for v in values), FLOOR * abs(med))
    if scale == 0:
        return []
    return [i for i, v in enumerate(values) if abs(v - med) > K * scale]


def drifted(values: Sequence[float]) -> list[int]:
    """The indices of the values the drift rule flags (3 or 4 values; none otherwise)."""
    if not MIN_DRIFT_REPEATS <= len(values) < MIN_REPEATS:
        return []
    out = []
    for i, v in enumerate(values):
        others = list(values[:i]) + list(values[i + 1:])
        med = statistics.median(others)
        if med == 0:
            continue
        spread = (max(others) - min(others)) / abs(med)
        if abs(v - med) / abs(med) > max(DRIFT, DRIFT_AGREE * spread):
            out.append(i)
    return out


def find(case: str, values: Sequence[float], origins: Sequence[Origin],
         cache_shares: Sequence[float | None] | None = None) -> list[Outlier]:
    """The outlier (or drifted) repeats of one row's case, each named by where it came from (`origins`,
    parallel to `values`), with the prefix cache as its cause where `cache_shares` (each repeat's share of
    prompt tokens found cached, parallel too) set it apart."""
    found = [Outlier(case, origins[i], values[i], statistics.median(values)) for i in flagged(values)]
    for i in drifted(values):
        others = list(values[:i]) + list(values[i + 1:])
        found.append(Outlier(case, origins[i], values[i], statistics.median(others), drift=True))
    index = {id(origins[i]): i for i in range(len(origins))}
    for o in found:
        o.cache_cause = cache_cause(list(cache_shares or []), index[id(o.origin)])
    return found


def cache_cause(shares: list[float | None], i: int) -> str | None:
    """'prefix cache: 0 % of its prompt tokens cached, the others 98 %' when repeat i's share stands apart."""
    if i >= len(shares) or shares[i] is None:
        return None
    others = [s for j, s in enumerate(shares) if j != i and s is not None]
    if not others:
        return None
    mine, theirs = float(shares[i] or 0.0), statistics.median(others)
    if abs(mine - theirs) < CACHE_GAP:
        return None
    return f"prefix cache: {mine * 100:.0f} % of its prompt tokens cached, the others {theirs * 100:.0f} %"


# ============================================================================ causes in the logs
# What SGLang and the libraries under it print (tests/fixtures/outliers/SOURCES.md says where each is from).
CAUSES: list[tuple[str, re.Pattern[str]]] = [
    # torch.utils.cpp_extension / FlashInfer's JIT run ninja and nvcc; Inductor and FlashInfer name themselves
    ("a JIT build", re.compile(r"\bninja\b|\bnvcc\b|[Bb]uilding extension|flashinfer\.jit|\bJIT\b|torch\._inductor"
                               r"|[Cc]ompiling (?:kernel|module|extension)")),
    # model_runner / cuda_graph_runner: "Capture cuda graph begin. This can take up to several minutes."
    ("a CUDA graph capture", re.compile(r"Capture cuda graph begin|Capturing batches")),
    # the scheduler's "Decode batch, ... cuda graph: False, ...": a batch size no graph was captured for
    ("a batch shape without a CUDA graph", re.compile(r"Decode batch\b.*cuda graph: False")),
]

RESULT_BANNER = "Serving Benchmark Result"  # bench_serving prints it once at the end of each run


def likely_cause(lines: Iterable[str]) -> str | None:
    """The first cause (in CAUSES' order) any of the lines shows, or None."""
    text = list(lines)
    for cause, pattern in CAUSES:
        if any(pattern.search(line) for line in text):
            return cause
    return None


def repeat_lines(bench_log: str, repeat: int, of: int = 0) -> list[str]:
    """The lines of a bench case's log that belong to its `repeat` (1-) of `of`: from after the previous run's
    result banner to this one's (bench_serving appends every run to the case's log). Runs beyond `of` come
    first (a warm-up pass, not measured) and are skipped. [] when the log has fewer runs than that."""
    segments: list[list[str]] = [[]]
    for line in bench_log.splitlines():
        segments[-1].append(line)
        if RESULT_BANNER in line:
            segments.append([])
    runs = segments[:-1]  # each ends with its banner; what follows the last banner is no run
    at = max(0, len(runs) - of) + repeat - 1 if of else repeat - 1
    return runs[at] if repeat > 0 and at < len(runs) else []


def attach_causes(found: list[Outlier], notes: list[str], read_log: Callable[[Origin, str], str | None]) -> None:
    """Each outlier's cause from its repeat's part of its bench case's log (`read_log`: the log's text, or None
    when there is none), its note in `notes` rewritten to say it; one whose lines show nothing stays "outlier"."""
    for o in found:
        before = o.note()
        text = read_log(o.origin, o.case)
        o.cause = likely_cause(repeat_lines(text, o.origin.repeat, o.origin.of)) if text else o.cause
        if before in notes:
            notes[notes.index(before)] = o.note()
