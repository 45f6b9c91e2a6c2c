"""Bisecting a regression over the target's history (pure): what each tried commit's records say of it, which
commit to try next, and the first bad commit.

The commits are the first-parent line from the good end (index 0) to the bad end (the last index). The ends are
measured first — until each has `MIN_SAMPLES` samples of the metric and the bad end is significantly worse than
the good one (the comparison table's Mann-Whitney test), up to `max_attempts` attempts each — and never again,
so a verdict once made stays made (a resume replays the same decisions from the same records). Then each step
is one commit, judged against both ends with the same test and its Hodges–Lehmann interval:

    bad        its median is closer to the bad end's than to the good end's, and it differs significantly
               from the good end (whether or not it differs from the bad one: part of a slowdown is bad)
    good       closer to the good end, and significantly different from the bad end
    undecided  not significantly different from the end it is farther from (too noisy, or too few samples):
               measured again (another attempt, more samples), up to max_attempts
    skip       it did not run — its patch sets do not apply, the server did not start (`git bisect skip`)

A step is never called bad for being noisy: the test against the far end must say it differs.

The next commit is the middle one of the untried commits of the range still open (after the last good commit,
before the first bad one). When none is left the first bad commit is the open range's end; skipped or undecided
commits just before it make the answer a list (the first bad is one of them), as `git bisect` says.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Union

from ..common.protocol import Status
from ..results.schemas import Record
from .compare import MIN_SAMPLES, Cell, cell_of, judge, short_key_line


class Verdict(str, Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"
    UNDECIDED = "undecided"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Trial:
    """What the records say of one commit: the metric's samples over its attempts, how many attempts, and why it
    is skipped (its first failure: status, triage category, key line) — None while it ran."""

    samples: tuple[float, ...] = ()
    attempts: int = 0
    skip: str | None = None

    def __add__(self, other: Trial) -> Trial:
        return Trial(self.samples + other.samples, self.attempts + other.attempts, self.skip or other.skip)


@dataclass(frozen=True)
class Judged:
    """A step against both ends: its verdict, and its cells (ratio to that end, interval, p) against each."""

    verdict: Verdict
    vs_good: Cell
    vs_bad: Cell


@dataclass(frozen=True)
class Measure:
    """Run an attempt at commit `index` next (`again`: it was tried, and its verdict needs more samples)."""

    index: int
    again: bool = False


@dataclass(frozen=True)
class Found:
    """The bisect's answer: `first_bad`; when skipped or undecided commits just before it leave a gap, the first
    bad commit is one of `candidates` (those, then `first_bad`)."""

    first_bad: int
    candidates: tuple[int, ...]
    verdicts: Mapping[int, Verdict]


@dataclass(frozen=True)
class Stuck:
    """Nothing to bisect: an end does not run, or the ends do not differ (`reason` says which and by how much)."""

    reason: str


Decision = Union[Measure, Found, Stuck]


# ============================================================================ records → trials


def host_problem(rec: Record) -> bool:
    """Refused for the host's sake, not the commit's (a dirty tree, a busy port or repo, GPU memory still held):
    no verdict on the commit — the bisect stops, and a resume tries the commit again."""
    return rec.status == Status.PREFLIGHT_FAILED and bool(rec.dirty or rec.port_in_use or rec.locked_by
                                                          or rec.gpu_dirty)


def failure(rec: Record) -> str:
    """Why a commit is skipped, in a line: `crashed (import-error): ImportError: cannot import name …`."""
    error = (rec.error or "").strip()
    line = error.splitlines()[0] if error else ""
    if rec.verdict is not None and rec.verdict.key_line:
        line = rec.verdict.key_line
    category = f" ({rec.verdict.category})" if rec.verdict is not None else ""
    return f"{rec.status}{category}" + (f": {short_key_line(line)}" if line else "")


def samples_of(rec: Record, case: str, metric: str) -> tuple[float, ...]:
    summary = rec.metrics.get(case)
    return tuple(summary.values(metric)) if summary is not None else ()


def observations(records: Iterable[Record], commits: Sequence[str], case: str, metric: str
                 ) -> dict[int, list[Trial]]:
    """Each commit's attempts (final records, host problems aside) as one-attempt trials, in the records' order."""
    index = {sha: i for i, sha in enumerate(commits)}
    out: dict[int, list[Trial]] = {}
    for rec in records:
        i = index.get(rec.checkout or "")
        if i is None or not rec.is_final() or host_problem(rec):
            continue
        skip = None if rec.status == Status.OK else failure(rec)
        out.setdefault(i, []).append(Trial(samples_of(rec, case, metric) if skip is None else (), 1, skip))
    return out


def trials_of(obs: Mapping[int, Sequence[Trial]]) -> dict[int, Trial]:
    return {i: sum(ts, Trial()) for i, ts in obs.items()}


# ============================================================================ verdicts


def judge_step(good: Trial, bad: Trial, step: Trial, metric: str) -> Judged:
    """A step against both ends (see the module's table)."""
    return _judged(cell_of(list(good.samples)), cell_of(list(bad.samples)), step, metric)


def _judged(good: Cell, bad: Cell, step: Trial, metric: str) -> Judged:
    cell = cell_of(list(step.samples))
    vs_good, vs_bad = judge(good, cell, metric), judge(bad, cell, metric)
    if step.skip is not None:
        return Judged(Verdict.SKIP, vs_good, vs_bad)
    if vs_good.ratio is None or vs_bad.ratio is None:
        return Judged(Verdict.UNDECIDED, vs_good, vs_bad)
    closer_bad = abs(math.log(vs_bad.ratio)) < abs(math.log(vs_good.ratio))
    other = vs_good if closer_bad else vs_bad  # like the end it is closer to, if told apart from the other one
    if other.verdict in ("better", "worse"):
        return Judged(Verdict.BAD if closer_bad else Verdict.GOOD, vs_good, vs_bad)
    return Judged(Verdict.UNDECIDED, vs_good, vs_bad)


def judge_ends(good: Trial, bad: Trial, metric: str) -> Cell:
    """The bad end against the good one: "worse" is what a bisect needs."""
    return judge(cell_of(list(good.samples)), cell_of(list(bad.samples)), metric)


def ratio_words(cell: Cell) -> str:
    """'1.15x [1.12–1.18], p=0.002': a ratio with its interval and p-value, where the test was made."""
    if cell.ratio is None:
        return "-"
    interval = f" [{cell.low:.2f}–{cell.high:.2f}]" if cell.low is not None and cell.high is not None else ""
    p = f", p={cell.p_value:.3f}" if cell.p_value is not None else ""
    return f"{cell.ratio:.2f}x{interval}{p}"


# ============================================================================ the next step


def open_range(verdicts: Mapping[int, Verdict], n: int) -> tuple[int, int]:
    """(the last good commit before the first bad one, that first bad one): the answer lies after the one, up to
    the other. A good verdict after a bad one (noise, a history that is not monotonic) does not reopen the range."""
    hi = min([i for i, v in verdicts.items() if v == Verdict.BAD] + [n - 1])
    lo = max([i for i, v in verdicts.items() if v == Verdict.GOOD and i < hi] + [0])
    return lo, hi


def next_index(verdicts: Mapping[int, Verdict], n: int) -> int | None:
    """The middle one (the lower of two) of the open range's untried commits: each answer halves them. Skipped
    commits are no answer's side (the middle of the range itself would be: one step more after a skip)."""
    lo, hi = open_range(verdicts, n)
    untried = [i for i in range(lo + 1, hi) if i not in verdicts]
    return untried[(len(untried) - 1) // 2] if untried else None


def steps_left(verdicts: Mapping[int, Verdict], n: int) -> int:
    """At most this many more steps (no skips): a binary search over the untried commits of the open range."""
    lo, hi = open_range(verdicts, n)
    untried = sum(1 for i in range(lo + 1, hi) if i not in verdicts)
    return math.ceil(math.log2(untried + 1))


def answer(verdicts: Mapping[int, Verdict], n: int) -> Found:
    lo, hi = open_range(verdicts, n)
    return Found(first_bad=hi, candidates=tuple(range(lo + 1, hi + 1)), verdicts=dict(verdicts))


def decide(trials: Mapping[int, Trial], n: int, metric: str, max_attempts: int) -> Decision:
    """What to do next, from the trials so far (index → Trial) of `n` commits, good end first."""
    good, bad = trials.get(0, Trial()), trials.get(n - 1, Trial())
    for name, end in (("good", good), ("bad", bad)):
        if end.skip is not None:
            return Stuck(f"the {name} end does not run: {end.skip}")
    short = [(end.attempts, i) for i, end in ((0, good), (n - 1, bad))
             if len(end.samples) < MIN_SAMPLES and end.attempts < max_attempts]
    if short:  # the end with fewer attempts first: good, bad, good, bad when one attempt is not enough
        attempts, i = min(short)
        return Measure(i, again=attempts > 0)
    ends = judge_ends(good, bad, metric)
    if ends.verdict == "better":
        return Stuck(f"the bad end is better than the good end ({ratio_words(ends)}): are --good and --bad swapped?")
    if ends.verdict != "worse":
        fewer = 0 if good.attempts <= bad.attempts else n - 1
        if trials.get(fewer, Trial()).attempts < max_attempts:
            return Measure(fewer, again=True)
        if ends.verdict == "few":
            return Stuck(f"too few samples of the metric after {max_attempts} attempts at each end ({len(good.samples)}"
                         f" and {len(bad.samples)}; the test needs {MIN_SAMPLES} a side): give the case more repeats")
        return Stuck(f"the ends do not differ significantly after {max_attempts} attempts each "
                     f"({ratio_words(ends)}): nothing to bisect")
    verdicts = step_verdicts(trials, n, metric)
    for i, verdict in sorted(verdicts.items()):
        if verdict == Verdict.UNDECIDED and trials[i].attempts < max_attempts:
            return Measure(i, again=True)
    nxt = next_index(verdicts, n)
    return Measure(nxt) if nxt is not None else answer(verdicts, n)


def step_verdicts(trials: Mapping[int, Trial], n: int, metric: str) -> dict[int, Verdict]:
    """Every tried commit's verdict so far, the ends' included (undecided: maybe not for good)."""
    good, bad = trials.get(0, Trial()), trials.get(n - 1, Trial())
    good_cell, bad_cell = cell_of(list(good.samples)), cell_of(list(bad.samples))
    verdicts = {0: Verdict.GOOD, n - 1: Verdict.BAD}
    for i in sorted(trials):
        if 0 < i < n - 1:
            verdicts[i] = _judged(good_cell, bad_cell, trials[i], metric).verdict
    return verdicts


def replay(obs: Mapping[int, Sequence[Trial]], n: int, metric: str, max_attempts: int) -> list[int]:
    """The order the records were made in (the store keeps them by commit): the decisions again, fed one attempt
    at a time. Attempts no decision asks for (none, unless the records were edited) come last."""
    used = {i: 0 for i in obs}
    order: list[int] = []
    trials: dict[int, Trial] = {}
    while True:
        d = decide(trials, n, metric, max_attempts)
        if not isinstance(d, Measure) or used.get(d.index, 0) >= len(obs.get(d.index, ())):
            break
        trials[d.index] = trials.get(d.index, Trial()) + obs[d.index][used[d.index]]
        used[d.index] += 1
        order.append(d.index)
    return order + [i for i in sorted(obs) for _ in range(len(obs[i]) - used[i])]
