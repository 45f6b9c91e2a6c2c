"""The interval on a ratio (significance.ratio_interval): Hodges–Lehmann on log values, checked against a known
distribution (lognormal samples with a known ratio of medians), exact small cases, and the table's display."""

from __future__ import annotations

import math
import random
from itertools import combinations

import pytest

from harness.analysis import significance
from harness.analysis.compare import build_rows, ratio_text
from harness.render.tableformats import to_csv, to_json
from harness.results.schemas import Record


def lognormal(rng: random.Random, median: float, n: int, sigma: float = 0.3) -> list[float]:
    return [median * math.exp(rng.gauss(0, sigma)) for _ in range(n)]


def coverage_and_width(n: int, trials: int, seed: int, ratio: float = 1.48) -> tuple[float, float]:
    rng = random.Random(seed)
    covered, widths = 0, []
    for _ in range(trials):
        a, b = lognormal(rng, 100.0, n), lognormal(rng, 100.0 * ratio, n)
        got = significance.ratio_interval(a, b, 0.05)
        assert got is not None
        covered += got[0] <= ratio <= got[1]
        widths.append(math.log(got[1] / got[0]))
    return covered / trials, sum(widths) / len(widths)


@pytest.mark.parametrize("n", [5, 8, 60])  # exact ranks (25, 64 pairs) and the normal approximation (3,600)
def test_the_95_interval_covers_a_known_ratio_of_lognormal_medians_about_95_percent(n):
    cov, _ = coverage_and_width(n, trials=300 if n < 60 else 100, seed=n)
    # exact: >= 95 % by construction (discrete U: 96-97 % at these sizes); 300 trials: ±2.5 % is ~2 sigma
    assert 0.90 <= cov <= 0.995, cov


def test_the_interval_narrows_as_n_grows():
    widths = [coverage_and_width(n, trials=60, seed=7)[1] for n in (4, 8, 16, 32)]
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 3, widths


def test_exact_rank_matches_the_mann_whitney_distribution():
    """k from the exact null distribution of U, counted here by brute force over every split of the ranks."""
    for m, n in [(4, 4), (4, 6), (5, 5), (6, 6), (7, 9)]:
        total = 0
        hist = [0] * (m * n + 1)
        for picked in combinations(range(m + n), m):  # the ranks of the smaller side
            u = sum(r for r in picked) - m * (m - 1) // 2
            hist[u] += 1
            total += 1
        k, below = 0, 0
        while (below + hist[k]) / total <= 0.025:
            below += hist[k]
            k += 1
        assert significance._rank(m, n, 0.05) == k, (m, n)
    assert significance._rank(10, 10, 0.05) == 24  # the printed tables' C for 10 against 10 at 95 %


def test_exact_small_cases():
    # 4 against 4: only U = 0 lies under 2.5 % (1/70), so k = 1: the smallest and largest pairwise ratio
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0]
    low, high = significance.ratio_interval(a, b, 0.05)
    assert low == pytest.approx(2 / 4) and high == pytest.approx(8 / 1)
    # every B exactly twice its A in a scaled copy: 5 against 5, k = 3 (P(U <= 2) = 4/252 <= 0.025 < 7/252)
    a = [1.0, 1.1, 1.2, 1.3, 1.4]
    low, high = significance.ratio_interval(a, [2 * x for x in a], 0.05)
    diffs = sorted(y / x for y in [2 * v for v in a] for x in a)
    assert (low, high) == pytest.approx((diffs[2], diffs[-3])) and low < 2 < high
    # below the test's reach, or a value a log cannot take: no interval
    assert significance.ratio_interval([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], 0.05) is None
    assert significance.ratio_interval([0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], 0.05) is None


def rec(exp: str, samples: list[float]) -> Record:
    return Record(run_id="r1", experiment=exp, attempt="01", host="h", backend=exp, status="ok",
                  metrics={"bs1": {"output_throughput": samples[0], "samples": {"output_throughput": samples}}},
                  provenance={"gpu": [{"name": "NVIDIA H200"}], "server_version": "0.5.23", "base_commit": "c" * 40})


def test_the_table_shows_the_interval_and_json_csv_carry_it():
    rows = build_rows([rec("base", [100, 101, 99, 100, 102]), rec("fast", [150, 149, 151, 152, 150]),
                       rec("few", [150, 149, 151])], metric="output_throughput", baseline="base")
    fast = next(r for r in rows if r.experiment == "fast").cells["bs1"]
    want = significance.ratio_interval([100, 101, 99, 100, 102], [150, 149, 151, 152, 150], 0.05)
    assert (fast.low, fast.high) == want and fast.low < fast.ratio < fast.high
    assert ratio_text(fast, False) == f"1.50x ▲ [{fast.low:.2f}–{fast.high:.2f}]"
    few = next(r for r in rows if r.experiment == "few").cells["bs1"]
    assert ratio_text(few, False) == "1.50x ?" and few.low is None  # "?" stays, no interval under MIN_SAMPLES
    assert f"{fast.low}" in to_json(rows, "output_throughput") and "bs1.ratio_low" in to_csv(rows)


def test_night_against_night_carries_the_same_interval():
    from harness.analysis import compare
    from harness.analysis.compare import Cell
    from harness.render import nightstext

    a_s, b_s = [100.0, 101, 99, 100, 102], [80.0, 81, 79, 80, 82]
    a, b = Cell(100.0, 0.01, 5, a_s), Cell(80.0, 0.01, 5, b_s)
    cell = compare.judge(a, b, "output_throughput")
    assert (cell.low, cell.high) == significance.ratio_interval(a_s, b_s, 0.05) and cell.verdict == "worse"
    assert nightstext.cell_text(cell).endswith(f"[{cell.low:.2f}–{cell.high:.2f}]")
    assert compare.judge(Cell(100.0, 0, 3, a_s[:3]), Cell(80.0, 0, 3, b_s[:3]), "output_throughput").low is None
    assert "ratio_low" in nightstext.CSV_HEAD


def test_the_terminal_table_shows_the_interval_whole_under_the_ratio_at_120_columns():
    import io

    from rich.console import Console

    from harness.cli.views import print_comparison

    rows = build_rows([rec("base", [100, 101, 99, 100, 102]), rec("fast", [150, 149, 151, 152, 150])],
                      metric="output_throughput", baseline="base")
    fast = next(r for r in rows if r.experiment == "fast").cells["bs1"]
    console = Console(width=120, file=io.StringIO(), color_system=None, soft_wrap=True)
    print_comparison(console, rows, "output_throughput")
    lines = console.file.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if "1.50x ▲" in line)
    col = lines[at].index("1.50x ▲")
    assert max(len(line) for line in lines) <= 120 and "╇" in "".join(lines)  # the table, not the blocks
    assert lines[at + 1][col:].startswith(f"{fast.low:.2f}–{fast.high:.2f}")  # the second line, same column
