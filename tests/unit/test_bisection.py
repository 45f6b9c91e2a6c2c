"""The bisect's pure logic (harness/analysis/bisection.py): verdicts of a step against both ends, the next commit,
the first bad commit with skips, the step bound — over many histories (where the slow commit and the broken one
sit, and the measurement noise), with a stand-in for the measurements."""

from __future__ import annotations

import math
import random

import pytest

from harness.analysis import bisection
from harness.analysis.bisection import Found, Measure, Stuck, Trial, Verdict, decide, judge_step, next_index
from harness.common.protocol import Status
from harness.results.schemas import Record
from harness.triage.verdict import Verdict as Triage

ITL = "median_itl_ms"  # lower is better
TPUT = "output_throughput"  # higher is better


def noisy(rng: random.Random, median: float, n: int = 6, cv: float = 0.02) -> tuple[float, ...]:
    return tuple(median * (1 + rng.gauss(0, cv)) for _ in range(n))


class History:
    """A stand-in target: commit k (0 = the good end, n-1 = the bad end) decodes `factor` times slower from
    `slow_at` on and does not start at `broken_at`; each attempt gives `repeats` noisy samples."""

    def __init__(self, n: int, slow_at: int, broken_at: int | None = None, factor: float = 1.15, seed: int = 0,
                 repeats: int = 6, cv: float = 0.02) -> None:
        self.n, self.slow_at, self.broken_at, self.factor = n, slow_at, broken_at, factor
        self.rng, self.repeats, self.cv = random.Random(seed), repeats, cv

    def attempt(self, k: int) -> Trial:
        if k == self.broken_at:
            return Trial((), 1, "crashed (import-error): ImportError: cannot import name 'x'")
        return Trial(noisy(self.rng, 8.0 * (self.factor if k >= self.slow_at else 1.0), self.repeats, self.cv), 1)

    def bisect(self, max_attempts: int = 3) -> tuple[bisection.Decision, list[int]]:
        trials: dict[int, Trial] = {}
        tried: list[int] = []
        for _ in range(200):
            d = decide(trials, self.n, ITL, max_attempts)
            if not isinstance(d, Measure):
                return d, tried
            trials[d.index] = trials.get(d.index, Trial()) + self.attempt(d.index)
            tried.append(d.index)
        raise AssertionError("the bisect never ended")


def steps(tried: list[int], n: int) -> int:
    """Steps: the distinct commits tried between the ends."""
    return len({k for k in tried if 0 < k < n - 1})


def test_every_layout_of_thirty_commits_is_found_in_at_most_six_steps_five_without_a_skip():
    """The search alone, with true verdicts: every slow commit, every broken commit (but the one just before the
    slow one, which leaves two candidates), 30 commits after the good end."""
    n, worst = 31, {False: 0, True: 0}
    for slow_at in range(1, n):
        for broken_at in [None] + [j for j in range(1, n - 1) if j not in (slow_at - 1, slow_at)]:
            verdicts = {0: Verdict.GOOD, n - 1: Verdict.BAD}
            while (k := next_index(verdicts, n)) is not None:
                verdicts[k] = Verdict.SKIP if k == broken_at else Verdict.BAD if k >= slow_at else Verdict.GOOD
            found = bisection.answer(verdicts, n)
            assert (found.first_bad, found.candidates) == (slow_at, (slow_at,)), (slow_at, broken_at)
            skipped = broken_at in verdicts
            worst[skipped] = max(worst[skipped], len(verdicts) - 2)
    assert worst == {False: 5, True: 6} and math.ceil(math.log2(30)) == 5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_measurements_find_the_slow_commit_and_skip_the_broken_one(seed):
    rng = random.Random(seed)
    for _ in range(8):
        n = rng.randrange(8, 41)
        slow_at = rng.randrange(1, n)
        broken_at = rng.choice([j for j in range(1, n - 1) if j not in (slow_at - 1, slow_at)])
        d, tried = History(n, slow_at, broken_at, seed=rng.randrange(10**6)).bisect()
        assert isinstance(d, Found) and d.first_bad == slow_at and d.candidates == (slow_at,), (n, slow_at, d)
        assert tried[:2] == [0, n - 1] and len(tried) == len(set(tried))  # the ends first; each commit once
        assert steps(tried, n) <= math.ceil(math.log2(n - 1)) + 1


def test_without_a_skip_thirty_commits_take_at_most_five_steps_measured():
    assert max(steps(History(31, k, seed=k).bisect()[1], 31) for k in range(1, 31, 3)) <= 5


def test_a_skipped_commit_right_before_the_slow_one_leaves_both_as_candidates():
    d, tried = History(31, slow_at=17, broken_at=16).bisect()
    assert isinstance(d, Found) and d.first_bad == 17 and d.candidates == (16, 17)
    assert d.verdicts[16] == Verdict.SKIP and 16 in tried


def test_a_throughput_metric_bisects_the_same_way():
    class Throughput(History):
        def attempt(self, k: int) -> Trial:
            return Trial(noisy(self.rng, 300.0 / (self.factor if k >= self.slow_at else 1.0)), 1)

    trials: dict[int, Trial] = {}
    h = Throughput(12, slow_at=5)
    while isinstance(d := decide(trials, 12, TPUT, 3), Measure):
        trials[d.index] = trials.get(d.index, Trial()) + h.attempt(d.index)
    assert isinstance(d, Found) and d.first_bad == 5


def test_few_repeats_an_attempt_make_more_attempts_at_the_ends_alternating():
    h = History(9, slow_at=4, repeats=2)
    d, tried = h.bisect()
    assert tried[:4] == [0, 8, 0, 8]  # 2 samples an attempt: two attempts each for the test's 4 a side
    assert isinstance(d, Found) and d.first_bad == 4


def test_a_step_that_cannot_be_told_apart_is_measured_again_then_left_undecided():
    good, bad = Trial((8.0, 8.1, 7.9, 8.05, 7.95, 8.0), 1), Trial((9.2, 9.3, 9.1, 9.25, 9.15, 9.2), 1)
    noisy_step = Trial((7.0, 10.0, 8.5, 9.0, 7.5, 9.5), 1)  # spread over both ends
    assert judge_step(good, bad, noisy_step, ITL).verdict == Verdict.UNDECIDED
    d = decide({0: good, 6: bad, 3: noisy_step}, 7, ITL, max_attempts=2)
    assert d == Measure(3, again=True)
    d = decide({0: good, 6: bad, 3: noisy_step + noisy_step}, 7, ITL, max_attempts=2)
    assert isinstance(d, Measure) and d.index == 2 and not d.again  # undecided: passed over, like a skip


def test_a_noisy_step_near_the_good_end_is_not_called_bad_for_differing_from_it_a_little():
    """Seen on a loaded box: a step 4 % slower than the good end (p < 0.05 against it), too noisy to tell from the
    bad end 15 % slower. Closer to the good end, and not told apart from the bad one: undecided, not bad."""
    good = Trial((21.1, 21.12, 21.08, 21.11, 21.1, 21.13), 1)
    bad = Trial((24.4, 23.2, 25.6, 24.3, 22.9, 24.5), 1)
    step = Trial((21.4, 21.5, 21.6, 24.7, 24.1, 21.7), 1)
    j = judge_step(good, bad, step, ITL)
    assert j.vs_good.verdict == "worse" and j.vs_bad.verdict == "same"
    assert j.verdict == Verdict.UNDECIDED


def test_a_step_between_the_ends_goes_to_the_end_it_is_closer_to():
    good, bad = Trial((8.0, 8.02, 7.98, 8.01, 7.99, 8.0), 1), Trial((10.0, 10.02, 9.98, 10.01, 9.99, 10.0), 1)
    near_bad = Trial(tuple(x * 9.6 / 8.0 for x in good.samples), 1)
    near_good = Trial(tuple(x * 8.4 / 8.0 for x in good.samples), 1)
    j = judge_step(good, bad, near_bad, ITL)
    assert j.verdict == Verdict.BAD and j.vs_good.verdict == "worse" and j.vs_bad.verdict == "better"
    assert judge_step(good, bad, near_good, ITL).verdict == Verdict.GOOD
    assert judge_step(good, bad, good, ITL).verdict == Verdict.GOOD
    assert judge_step(good, bad, bad, ITL).verdict == Verdict.BAD


@pytest.mark.parametrize(("good", "bad", "says"), [
    (Trial((8.0,) * 3 + (8.1,) * 3, 3), Trial((8.05,) * 3 + (8.0,) * 3, 3), "do not differ significantly"),
    (Trial((9.0, 9.1, 9.2, 9.05), 1), Trial((8.0, 8.1, 8.2, 8.05), 1), "are --good and --bad swapped"),
    (Trial((), 1, "crashed (import-error): no module"), Trial((8.0,) * 4, 1), "the good end does not run: crashed"),
    (Trial((8.0,) * 2, 3), Trial((9.0,) * 2, 3), "too few samples"),
])
def test_nothing_to_bisect_says_why(good, bad, says):
    d = decide({0: good, 5: bad}, 6, ITL, max_attempts=3)
    assert isinstance(d, Stuck) and says in d.reason, d


def test_the_next_commit_is_the_middle_one_of_the_open_ranges_untried_commits():
    v = {0: Verdict.GOOD, 30: Verdict.BAD}
    assert next_index(v, 31) == 15
    assert next_index({**v, 15: Verdict.SKIP}, 31) == 14
    assert next_index({**v, 15: Verdict.SKIP, 14: Verdict.GOOD}, 31) == 22
    # 7 good, 11 skipped, 15 bad: 8 9 10 12 13 14 are left, and 10 halves them (not 11's neighbours by distance)
    assert next_index({**v, 7: Verdict.GOOD, 11: Verdict.SKIP, 15: Verdict.BAD}, 31) == 10
    assert next_index({**v, 10: Verdict.GOOD, 11: Verdict.SKIP, 15: Verdict.BAD}, 31) == 13
    assert next_index({**v, 15: Verdict.BAD, 16: Verdict.GOOD}, 31) == 7  # a good after a bad does not reopen
    assert next_index({0: Verdict.GOOD, 1: Verdict.BAD}, 2) is None
    assert bisection.steps_left(v, 31) == 5


def record(status: Status = Status.OK, checkout: str = "c1", samples: list | None = None, **kw) -> Record:
    metrics = {"dec": {"samples": {ITL: samples}}} if samples is not None else {}
    return Record(run_id="r", experiment="e", attempt="01", host="h", status=status, metrics=metrics,
                  checkout=checkout, **kw)


def test_records_become_trials_host_problems_and_unfinished_attempts_left_out():
    recs = [record(samples=[8.0, float("nan"), 8.2], checkout="c0"),
            record(samples=[8.1, 8.3], checkout="c0"),
            record(Status.CRASHED, "c1", error="server died\nmore",
                   verdict=Triage(category="import-error", key_line="ImportError: cannot import name 'x'")),
            record(Status.PREFLIGHT_FAILED, "c2", error="not clean", dirty=["a.py"]),  # the host's problem
            record(Status.ABORTED, "c2"),  # not final: runs again
            record(Status.APPLY_FAILED, "c2", error="patch set p, 0001.patch does not apply\ndetails"),
            record(checkout="other")]
    obs = bisection.observations(recs, ["c0", "c1", "c2"], "dec", ITL)
    trials = bisection.trials_of(obs)
    assert trials[0] == Trial((8.0, 8.2, 8.1, 8.3), 2, None)
    assert trials[1] == Trial((), 1, "crashed (import-error): ImportError: cannot import name 'x'")
    assert trials[2] == Trial((), 1, "apply-failed: patch set p, 0001.patch does not apply")
    assert bisection.host_problem(recs[3]) and not bisection.host_problem(recs[5])


def test_replay_gives_the_order_the_attempts_were_made_in():
    h = History(31, slow_at=17, broken_at=9)
    trials: dict[int, Trial] = {}
    made: list[int] = []
    obs: dict[int, list[Trial]] = {}
    while isinstance(d := decide(trials, 31, ITL, 3), Measure):
        one = h.attempt(d.index)
        trials[d.index] = trials.get(d.index, Trial()) + one
        obs.setdefault(d.index, []).append(one)
        made.append(d.index)
    assert bisection.replay(obs, 31, ITL, 3) == made


def test_ratio_words_give_the_interval_and_p_where_the_test_was_made():
    j = judge_step(Trial((8.0, 8.1, 7.9, 8.0), 1), Trial((9.2, 9.3, 9.1, 9.2), 1), Trial((9.2, 9.3, 9.1, 9.25), 1),
                   ITL)
    assert bisection.ratio_words(j.vs_good).startswith("1.15x [") and ", p=0.0" in bisection.ratio_words(j.vs_good)
    assert bisection.ratio_words(judge_step(Trial(), Trial(), Trial(), ITL).vs_good) == "-"
