"""The significance test `compare` marks ratios with (pure): a two-sided Mann-Whitney U test on two sets of
per-repeat samples, exact for small untied samples, else by the normal approximation — scipy's p-values,
without scipy; and the confidence interval that goes with it on a ratio: Hodges–Lehmann on log values."""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from statistics import NormalDist


def mann_whitney_p(a: list[float], b: list[float], method: str = "auto") -> float:
    """Two-sided Mann-Whitney U test: do the two sets of repeats differ? scipy.stats.mannwhitneyu's p-value
    (alternative="two-sided", continuity correction), in pure Python so that `compare` needs no scipy.

    method "auto" is scipy's choice: the exact null distribution when there are no ties and either side has
    at most 8 values, else the normal approximation with tie correction."""
    if method not in ("auto", "exact", "asymptotic"):
        raise ValueError(f"method {method!r}: auto, exact or asymptotic")
    if len(set(a) | set(b)) == 1:  # no spread at all: scipy gives nan; nothing differs
        return 1.0
    n1, n2 = len(a), len(b)
    # U of `a`: the pairs it wins, ties counting half (the same as the rank-sum form, without ranks).
    u1 = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    u = max(u1, n1 * n2 - u1)  # the larger U: its upper tail, doubled, is the two-sided p
    ties = [t for t in Counter(a + b).values() if t > 1]
    exact = method == "exact" or (method == "auto" and not ties and (n1 <= 8 or n2 <= 8))
    p = _exact_sf(int(u), n1, n2) if exact else _normal_sf(u, n1, n2, ties)
    return min(1.0, 2 * p)


def _u_counts(m: int, n: int) -> list[int]:
    """How many of the C(m+n, m) orderings of two untied samples of sizes m and n give each U = 0..m*n:
    the coefficients of the Gaussian binomial [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i),
    built factor by factor in exact integers (every partial product is itself a polynomial)."""
    counts = [1] + [0] * (m * n)
    for i in range(1, m + 1):
        for u in range(m * n, n + i - 1, -1):  # times (1 - q^(n+i)); downwards reads the old values
            counts[u] -= counts[u - n - i]
        for u in range(i, m * n + 1):  # divided by (1 - q^i); upwards reads the new values
            counts[u] += counts[u - i]
    return counts


def _exact_sf(u: int, n1: int, n2: int) -> float:
    """P(U >= u) under the null hypothesis, from the exact distribution (no ties)."""
    counts = _u_counts(min(n1, n2), max(n1, n2))
    return sum(counts[u:]) / sum(counts)


def _normal_sf(u: float, n1: int, n2: int, ties: list[int]) -> float:
    """P(U >= u) by the normal approximation, with the tie correction and the continuity correction."""
    n = n1 + n2
    tie_term = sum(t ** 3 - t for t in ties)
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    z = (u - n1 * n2 / 2 - 0.5) / sigma
    return 0.5 * math.erfc(z / math.sqrt(2))


EXACT_PAIRS = 2500  # up to this many pairs (50 against 50) the interval's rank comes from the exact distribution


def ratio_interval(a: list[float], b: list[float], alpha: float) -> tuple[float, float] | None:
    """A 1 - alpha confidence interval on the ratio B/A: the Hodges–Lehmann (Moses) interval for a shift of
    log values, the one that inverts the Mann-Whitney test. Of the m*n pairwise differences log b - log a,
    sorted, it runs from the k-th smallest to the k-th largest, where k is the largest rank with
    P(U <= k - 1) <= alpha / 2 under the null (exact up to EXACT_PAIRS pairs, else the normal approximation);
    exponentiated, a range of ratios. Distribution-free: it covers the true ratio with probability >= 1 - alpha
    whenever B is A scaled by a factor (then every quantile, the median too, moves by that factor).
    None when the test cannot reach alpha at these sizes (k < 1, e.g. 3 against 3) or a value is not positive."""
    if not a or not b or min(a + b) <= 0:
        return None
    m, n = len(a), len(b)
    k = _rank(m, n, alpha)
    if k < 1:
        return None
    diffs = sorted(math.log(y) - math.log(x) for y in b for x in a)
    return math.exp(diffs[k - 1]), math.exp(diffs[m * n - k])


@lru_cache(maxsize=256)
def _cached_counts(m: int, n: int) -> tuple[int, ...]:
    """_u_counts, kept: a table asks for the same sizes in every cell."""
    return tuple(_u_counts(m, n))


def _rank(m: int, n: int, alpha: float) -> int:
    """The k of ratio_interval: how many of the smallest (and largest) pairwise differences lie outside."""
    if m * n <= EXACT_PAIRS:
        counts = _cached_counts(min(m, n), max(m, n))
        total, below, k = sum(counts), 0, 0
        while k < len(counts) and (below + counts[k]) / total <= alpha / 2:
            below += counts[k]
            k += 1
        return k  # P(U <= k - 1) <= alpha / 2 < P(U <= k)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return max(0, math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12)))
