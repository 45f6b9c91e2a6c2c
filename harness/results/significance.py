"""The significance test `compare` marks ratios with (pure): a two-sided Mann-Whitney U test on two sets of
per-repeat samples, exact for small untied samples, else by the normal approximation — scipy's p-values,
without scipy."""

from __future__ import annotations

import math
from collections import Counter


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
