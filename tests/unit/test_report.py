"""Comparison statistics and rendering (pure)."""

import csv
import io
import itertools
import json
import math
import re
import statistics
import sys

import pytest

from harness.analysis.compare import (
    build_rows,
    columns,
    short_key_line,
    table_rows,
)
from harness.analysis.significance import mann_whitney_p
from harness.analysis.units import lower_is_better
from harness.render.tableformats import to_csv, to_json, to_markdown
from harness.results.metrics import KEY_METRICS
from harness.results.schemas import ProfileOp, ProfileSummary, Record

GPU = [{"name": "NVIDIA H200", "compute_cap": "9.0"}]


def rec(exp, samples, status="ok", run="r1", gpu=GPU, commit="c" * 40, verdict=None, metric="output_throughput",
        host="h", version="0.5.23", expect=None, met=None):
    """A record of one bench case `bs1`; `samples` may instead be {case: samples} for several cases."""
    cases = samples if isinstance(samples, dict) else {"bs1": samples}
    return Record(run_id=run, experiment=exp, attempt="01", host=host, backend=exp, status=status, verdict=verdict,
                  metrics={case: {metric: s[len(s) // 2], "samples": {metric: s}} for case, s in cases.items() if s},
                  provenance={"gpu": gpu, "server_version": version, "base_commit": commit}, expect=expect,
                  expectation_met=met)


def row(rows, exp):
    return next(r for r in rows if r.experiment == exp)


def test_better_worse_and_not_significant():
    records = [rec("base", [100, 101, 99, 100, 102]), rec("fast", [150, 149, 151, 152, 150]),
               rec("slow", [80, 81, 79, 80, 82]), rec("same", [100, 102, 99, 101, 100])]
    rows = build_rows(records, metric="output_throughput", baseline="base")
    assert row(rows, "base").is_baseline
    assert row(rows, "fast").cells["bs1"].verdict == "better" and abs(row(rows, "fast").cells["bs1"].ratio - 1.5) < 0.02
    assert row(rows, "slow").cells["bs1"].verdict == "worse"
    assert row(rows, "same").cells["bs1"].verdict == "same"
    assert row(rows, "fast").cells["bs1"].p_value < 0.05


def test_lower_is_better_for_latency_metrics():
    records = [rec("base", [10, 10.1, 9.9, 10, 10.2], metric="median_itl_ms"),
               rec("fast", [5, 5.1, 4.9, 5, 5.2], metric="median_itl_ms")]
    rows = build_rows(records, metric="median_itl_ms", baseline="base")
    assert row(rows, "fast").cells["bs1"].verdict == "better"


def test_noise_few_samples_and_comparability():
    records = [rec("base", [100, 101, 99, 100]), rec("noisy", [100, 130, 70, 110]), rec("few", [120, 121]),
               rec("other-gpu", [150, 151, 149, 150], gpu=[{"name": "NVIDIA B200"}]),
               rec("other-commit", [150, 151, 149, 150], commit="d" * 40)]
    rows = build_rows(records, metric="output_throughput", baseline="base")
    assert any("noisy" in n for n in row(rows, "noisy").notes)
    assert row(rows, "few").cells["bs1"].verdict == "few" and any("few samples" in n for n in row(rows, "few").notes)
    assert any("not comparable" in n and "gpu" in n for n in row(rows, "other-gpu").notes)
    assert row(rows, "other-gpu").cells["bs1"].verdict == "n/a"
    assert any("base_commit" in n for n in row(rows, "other-commit").notes)


def test_failures_show_category_and_key_line():
    v = {"category": "oom", "key_line": "torch.OutOfMemoryError: CUDA out of memory.", "phase": "cuda-graph-capture"}
    rows = build_rows([rec("base", [100, 101, 99]), rec("bad", [], status="crashed", verdict=v)],
                      metric="output_throughput", baseline="base")
    bad = row(rows, "bad")
    assert (bad.status, bad.category, bad.key_line) == ("crashed", "oom", v["key_line"])
    md = to_markdown(rows, "output_throughput")
    assert "crashed: oom" in md and "CUDA out of memory" in md


def test_runs_compared_across_nights():
    records = [rec("base", [100, 101, 99, 100], run="night1"), rec("base", [120, 121, 119, 120], run="night2")]
    rows = build_rows(records, metric="output_throughput", baseline="night1:base")
    assert [r.label for r in rows] == ["night1:base", "night2:base"]
    assert row([r for r in rows if r.run_id == "night2"], "base").cells["bs1"].verdict == "better"


def test_csv_and_json_render():
    rows = build_rows([rec("base", [100, 101, 99]), rec("fast", [150, 149, 151])], metric="output_throughput",
                      baseline="base")
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert parsed[1]["experiment"] == "fast" and float(parsed[1]["bs1.ratio"]) > 1.4
    data = json.loads(to_json(rows, "output_throughput"))
    assert data["rows"][0]["is_baseline"] is True


def test_plot_writes_a_png(tmp_path):
    import pytest

    pytest.importorskip("matplotlib", reason="matplotlib not installed (optional extra `plot`)")
    from harness.render.plots import plot

    rows = build_rows([rec("base", [100, 101, 99]), rec("fast", [150, 149, 151])], metric="output_throughput",
                      baseline="base")
    plot(rows, "output_throughput", str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_replaces_only_its_own_file_never_a_users_or_through_a_link(tmp_path):
    import pytest

    pytest.importorskip("matplotlib", reason="matplotlib not installed (optional extra `plot`)")
    from harness.errors import ConfigError
    from harness.render.plots import plot

    rows = build_rows([rec("base", [100, 101, 99]), rec("fast", [150, 149, 151])], metric="output_throughput",
                      baseline="base")
    photo = tmp_path / "holiday.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n my own picture")
    with pytest.raises(ConfigError, match=r"holiday\.png: a file the harness did not write"):
        plot(rows, "output_throughput", photo)
    assert photo.read_bytes() == b"\x89PNG\r\n\x1a\n my own picture"
    link = tmp_path / "link.png"
    link.symlink_to(photo)
    with pytest.raises(ConfigError, match=r"link\.png: a symbolic link \(to .*holiday\.png\)"):
        plot(rows, "output_throughput", link)
    assert photo.read_bytes() == b"\x89PNG\r\n\x1a\n my own picture" and link.is_symlink()
    with pytest.raises(ConfigError, match=r"cannot write \.txt files"):
        plot(rows, "output_throughput", tmp_path / "p.txt")
    for name in ("p.png", "p.svg", "p.pdf"):  # a plot of ours is replaced: the command can run again
        plot(rows, "output_throughput", tmp_path / name)
        first = (tmp_path / name).stat().st_ino
        plot(rows, "output_throughput", tmp_path / name)
        assert (tmp_path / name).stat().st_ino != first  # written anew (atomically: a new file renamed over it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["holiday.png", "link.png", "p.pdf", "p.png", "p.svg"]


def test_top_op_from_profiles_and_records_without_one():
    with_profile = rec("base", [100, 101, 99])
    with_profile.profile = ProfileSummary(total_gpu_us=100.0, steps=1, kernels=1,
                                          top=[ProfileOp(name="aten::copy_", gpu_us=69.0, share=0.69, calls=1)])
    without = rec("other", [100, 101, 99])
    without.profile = None
    rows = build_rows([with_profile, without], metric="output_throughput", baseline="base")
    assert row(rows, "base").top_op == "aten::copy_ 69%" and row(rows, "other").top_op is None



def test_a_top_op_that_is_a_demangled_kernel_shows_the_kernels_name_not_void():
    """A kernel replayed from a CUDA graph has no framework op: the top op is the kernel's demangled name."""
    r = rec("base", [100, 101, 99])
    kernel = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
              "::{lambda()#3}::operator()() const::{lambda(c10::Float8_e4m3fn)#1}, std::array<char*, 2ul>, 4>(int)")
    r.profile = ProfileSummary(total_gpu_us=100.0, steps=1, kernels=1,
                               top=[ProfileOp(name=kernel, gpu_us=80.0, share=0.8, calls=1)])
    rows = build_rows([r], metric="output_throughput", baseline="base")
    assert row(rows, "base").top_op == "at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda…> 80%"

# ============================================================================ the markers a user reads
# Judged from the rendered tables (markdown, and the cells the terminal table prints), with the
# significance of each case taken from scipy's own p-values (hard-coded below), not from the code under test.

METRICS = ["median_itl_ms", "output_throughput"]  # lower is better; higher is better
BASE = [10.0, 10.1, 9.9, 10.2, 9.8, 10.05]  # six repeats of the baseline
OVERLAPPING = [10.12, 10.22, 9.97, 10.27, 9.93, 10.17]  # a little off the baseline, well inside its spread


def scaled(samples, factor, metric):
    unit = 1.0 if metric.endswith("_ms") else 100.0  # ITL in ms around 10; throughput in tok/s around 1000
    return [round(v * factor * unit, 4) for v in samples]


def order_pattern(a, b):
    """The merged order of two samples, value by value: (how many of a, how many of b) per distinct value. A rank
    test's p-value depends on nothing else, so one reference p serves every scaling of the same data."""
    return tuple((a.count(v), b.count(v)) for v in sorted(set(a) | set(b)))


A, B, AB = (1, 0), (0, 1), (1, 1)
# scipy 1.17.1: scipy.stats.mannwhitneyu(a, b, alternative="two-sided").pvalue for the data sets of the tests below.
SCIPY_TWO_SIDED_P = {
    (A,) * 6 + (B,) * 6: 0.0021645021645021645,  # six against six, no overlap (exact)
    (B,) * 6 + (A,) * 6: 0.0021645021645021645,
    (B, B, A, A, B, B, B, A, A, B, A, A): 0.24025974025974026,  # OVERLAPPING against BASE (exact)
    (A,) * 3 + (B,) * 3: 0.1,  # three against three, no overlap (exact): the best p there is
    (B,) * 3 + (A,) * 3: 0.1,
    ((0, 10), (10, 0), AB, (0, 10), (10, 0)): 0.010086582938911307,  # same median, other spread (ties: normal)
    ((0, 5), (5, 0)): 0.003976751709788651,  # [100] * 5 against [150] * 5 (ties: normal)
}


def two_sided_p(a, b):
    return SCIPY_TWO_SIDED_P[order_pattern(a, b)]


def rendered_markers(records, metric):
    """label -> the `bs1 vs base` cell, from the markdown table and from the terminal table's cells."""
    rows = build_rows(records, metric=metric, baseline="base")
    lines = [line for line in to_markdown(rows, metric).splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    col = head.index("bs1 vs base")
    markdown = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        markdown[cells[0]] = INTERVAL.sub("", cells[col])
    terminal_col = columns(rows).index("bs1 vs base")
    terminal = {line[0]: INTERVAL.sub("", line[terminal_col]) for line in table_rows(rows)}
    return markdown, terminal


@pytest.mark.parametrize("metric", METRICS)
def test_table_marks_a_clearly_better_candidate_up_and_a_clearly_worse_one_down(metric):
    lower = metric.endswith("_ms")
    faster, slower = (0.8, 1.2) if lower else (1.2, 0.8)  # faster: 20 % lower ITL, or 20 % more throughput
    base = scaled(BASE, 1.0, metric)
    better, worse = scaled(BASE, faster, metric), scaled(BASE, slower, metric)
    assert max(two_sided_p(better, base), two_sided_p(worse, base)) < 0.01  # no overlap: clearly different
    records = [rec("base", base, metric=metric), rec("better", better, metric=metric),
               rec("worse", worse, metric=metric)]
    for table in rendered_markers(records, metric):
        assert table["base"] == "baseline"
        assert table["better"].endswith("▲") and "▼" not in table["better"], table
        assert table["worse"].endswith("▼") and "▲" not in table["worse"], table


@pytest.mark.parametrize("metric", METRICS)
def test_table_marks_a_difference_inside_the_noise_as_not_significant(metric):
    base, close = scaled(BASE, 1.0, metric), scaled(OVERLAPPING, 1.0, metric)
    assert 0.05 < two_sided_p(close, base) < 0.5  # undecided: neither significant nor plainly the same
    for table in rendered_markers([rec("base", base, metric=metric), rec("close", close, metric=metric)], metric):
        assert table["close"].endswith("≈") and not {"▲", "▼", "?"} & set(table["close"]), table


@pytest.mark.parametrize("metric", METRICS)
def test_table_marks_three_samples_a_side_as_too_few_even_when_they_do_not_overlap(metric):
    # With 3 repeats a side the two-sided test cannot reach p < 0.05 at all (at best 2 / C(6, 3) = 0.1),
    # so "not significant" would be a false reassurance: the marker is "?" (too few samples).
    faster = 0.8 if metric.endswith("_ms") else 1.2
    base, fast = scaled(BASE[:3], 1.0, metric), scaled(BASE[:3], faster, metric)
    assert two_sided_p(fast, base) >= 0.05
    for table in rendered_markers([rec("base", base, metric=metric), rec("fast", fast, metric=metric)], metric):
        assert table["fast"].endswith("?") and not {"▲", "▼", "≈"} & set(table["fast"]), table


@pytest.mark.parametrize("metric", METRICS)
def test_a_significant_difference_without_a_median_gain_is_never_marked_better(metric):
    # The same median, the repeats spread differently around it: Mann-Whitney can call that significant, but ▲
    # claims that the typical run got better, and it did not.
    base = [90.0] * 10 + [100.0] + [100.1] * 10
    cand = [99.9] * 10 + [100.0] + [110.0] * 10
    assert statistics.median(base) == statistics.median(cand) and two_sided_p(cand, base) < 0.05
    for table in rendered_markers([rec("base", base, metric=metric), rec("cand", cand, metric=metric)], metric):
        assert "▲" not in table["cand"], table


def test_perfectly_steady_repeats_that_differ_are_significant():
    # Every repeat gives the same number (a deterministic benchmark, a count): both the medians and every single
    # repeat differ, which is as clear as five repeats a side can say it.
    assert two_sided_p([150] * 5, [100] * 5) < 0.05
    rows = build_rows([rec("base", [100] * 5), rec("fast", [150] * 5)], metric="output_throughput", baseline="base")
    assert row(rows, "fast").cells["bs1"].verdict == "better"


def test_identical_repeats_on_both_sides_are_the_same_with_p_value_one():
    rows = build_rows([rec("base", [100] * 5), rec("twin", [100] * 5)], metric="output_throughput", baseline="base")
    cell = row(rows, "twin").cells["bs1"]
    assert (cell.verdict, cell.p_value) == ("same", 1.0)
    assert float(list(csv.DictReader(io.StringIO(to_csv(rows))))[1]["bs1.p_value"]) == 1.0


# ============================================================================ which direction is better
# Every metric a record keeps (harness.results.metrics.KEY_METRICS), with the direction that is better: a metric added
# there must be decided here.

DIRECTION = {
    "output_throughput": "higher", "request_throughput": "higher", "input_throughput": "higher",
    "total_throughput": "higher",
    "median_ttft_ms": "lower", "mean_ttft_ms": "lower", "p99_ttft_ms": "lower",
    "median_itl_ms": "lower", "mean_itl_ms": "lower", "p99_itl_ms": "lower",
    "median_tpot_ms": "lower", "mean_tpot_ms": "lower", "p99_tpot_ms": "lower",
    "median_e2e_latency_ms": "lower", "duration": "lower",
    "completed": "higher", "total_output_tokens": "higher", "concurrency": "higher",
}


def test_every_metric_a_record_keeps_has_a_decided_direction():
    assert set(DIRECTION) == set(KEY_METRICS)


@pytest.mark.parametrize("metric", KEY_METRICS)
def test_the_comparison_says_which_direction_is_better_for_every_kept_metric(metric):
    assert lower_is_better(metric) is (DIRECTION[metric] == "lower")
    assert f"({DIRECTION[metric]} is better)" in to_markdown([], metric).splitlines()[0]
    assert json.loads(to_json([], metric))["lower_is_better"] is (DIRECTION[metric] == "lower")


# ============================================================================ which baseline, and what a row says


INTERVAL = re.compile(r" \[\d+\.\d\d–\d+\.\d\d\]$")  # the ratio's interval (tests/unit/test_intervals.py)


def table(rows):
    """label -> {column: cell}, as the table prints them, the ratios without their interval (this file tests
    the markers; test_intervals.py the interval)."""
    cols = columns(rows)
    return {line[0]: {c: INTERVAL.sub("", x) for c, x in zip(cols, line)} for line in table_rows(rows)}


def test_without_a_named_baseline_the_first_row_is_the_only_baseline():
    rows = build_rows([rec("a", [100, 101, 99, 100, 102]), rec("b", [150, 149, 151, 152, 150]),
                       rec("c", [100, 102, 99, 101, 100])], metric="output_throughput")
    assert [r.label for r in rows if r.is_baseline] == ["a"]
    t = table(rows)
    assert (t["a"]["bs1 vs base"], t["b"]["bs1 vs base"], t["c"]["bs1 vs base"]) == ("baseline", "1.50x ▲", "1.00x ≈")


def test_the_named_baseline_is_the_reference_wherever_it_sorts():
    rows = build_rows([rec("a-fast", [150, 149, 151, 152, 150]), rec("ref", [100, 101, 99, 100, 102])],
                      metric="output_throughput", baseline="ref")
    assert [r.label for r in rows if r.is_baseline] == ["ref"]
    t = table(rows)
    assert (t["ref"]["bs1 vs base"], t["a-fast"]["bs1 vs base"]) == ("baseline", "1.50x ▲")


def test_an_unknown_baseline_is_named_in_every_rows_notes_and_nothing_is_compared():
    rows = build_rows([rec("a", [100, 101, 99, 100]), rec("b", [150, 149, 151, 152])], metric="output_throughput",
                      baseline="nope")
    assert [r.notes for r in rows] == [["baseline 'nope' not found"]] * 2
    assert not any(r.is_baseline for r in rows)
    assert [line["bs1 vs base"] for line in table(rows).values()] == ["-", "-"]


def test_a_baseline_that_never_ran_stays_the_baseline_and_no_ratio_is_shown():
    rows = build_rows([rec("base", [], status="crashed"), rec("fast", [150, 149, 151, 152, 150])],
                      metric="output_throughput", baseline="base")
    assert row(rows, "base").is_baseline and not any("not found" in n for r in rows for n in r.notes)
    t = table(rows)
    assert (t["base"]["bs1 vs base"], t["fast"]["bs1 vs base"]) == ("baseline", "-")


def test_on_a_mixed_fleet_each_row_is_compared_with_the_baseline_measured_on_its_own_gpu():
    # The planner runs the baseline once per GPU kind. A candidate that ran on another host with the same kind of
    # GPU is compared with that GPU's baseline, never with the other GPU's.
    h200, b200 = [{"name": "NVIDIA H200"}], [{"name": "NVIDIA B200"}]
    records = [rec("base", [100, 101, 99, 100, 102], gpu=h200, host="h200-a"),
               rec("base", [200, 202, 198, 200, 204], gpu=b200, host="b200-a"),
               rec("fast", [150, 149, 151, 152, 150], gpu=h200, host="h200-b"),
               rec("fast", [300, 298, 302, 304, 300], gpu=b200, host="b200-a")]
    rows = build_rows(records, metric="output_throughput", baseline="base")
    for gpu in ("NVIDIA H200 x1", "NVIDIA B200 x1"):
        fast = next(r for r in rows if (r.experiment, r.gpu) == ("fast", gpu))
        assert not any("not comparable" in n for n in fast.notes), fast.notes
        assert fast.cells["bs1"].verdict == "better" and fast.cells["bs1"].ratio == pytest.approx(1.5), gpu


def test_a_row_not_comparable_with_the_baseline_says_what_differs_with_both_values():
    records = [rec("base", [100, 101, 99, 100]),
               rec("newer-server", [150, 151, 149, 150], version="0.5.24"),
               rec("elsewhere", [150, 151, 149, 150], gpu=[{"name": "NVIDIA B200"}], commit="d" * 40)]
    rows = build_rows(records, metric="output_throughput", baseline="base")
    assert row(rows, "newer-server").notes == ["not comparable to the baseline: server_version 0.5.24 vs 0.5.23"]
    assert row(rows, "elsewhere").notes == ["not comparable to the baseline: gpu NVIDIA B200 x1 vs NVIDIA H200 x1, "
                                            "base_commit dddddddddddd vs cccccccccccc"]
    assert [row(rows, n).cells["bs1"].verdict for n in ("newer-server", "elsewhere")] == ["n/a", "n/a"]


def test_rows_measured_like_the_baseline_carry_no_comparability_note():
    rows = build_rows([rec("base", [100, 101, 99, 100]), rec("fast", [150, 151, 149, 150])],
                      metric="output_throughput", baseline="base")
    assert (row(rows, "base").notes, row(rows, "fast").notes) == ([], [])


def test_each_bench_case_is_judged_on_its_own():
    base = {"bs1": [100, 101, 99, 100, 102], "bs8": [800, 808, 792, 800, 816]}
    faster_bs8 = [1200, 1190, 1210, 1205, 1195]
    records = [rec("base", base),
               rec("no-bs1", {"bs1": [], "bs8": faster_bs8}),  # bs1 gave no result
               rec("few-bs1", {"bs1": [150, 150], "bs8": faster_bs8}),  # bs1 ran too few repeats
               rec("other-gpu", {"bs1": [150, 151, 149, 150, 152], "bs8": faster_bs8}, gpu=[{"name": "NVIDIA B200"}])]
    t = table(build_rows(records, metric="output_throughput", baseline="base"))
    assert (t["no-bs1"]["bs1 vs base"], t["no-bs1"]["bs8 vs base"]) == ("-", "1.50x ▲")
    assert (t["few-bs1"]["bs1 vs base"], t["few-bs1"]["bs8 vs base"]) == ("1.50x ?", "1.50x ▲")
    # not comparable: every case shows its ratio, and no case a marker
    assert (t["other-gpu"]["bs1 vs base"], t["other-gpu"]["bs8 vs base"]) == ("1.50x", "1.50x")


def test_the_baseline_is_not_compared_with_itself_in_csv_and_json():
    rows = build_rows([rec("base", [100, 101, 99, 100, 102]), rec("fast", [150, 149, 151, 152, 150])],
                      metric="output_throughput", baseline="base")
    base, fast = csv.DictReader(io.StringIO(to_csv(rows)))
    assert (base["bs1.ratio"], base["bs1.p_value"], base["bs1.verdict"]) == ("", "", "n/a")
    assert float(fast["bs1.ratio"]) == pytest.approx(1.5) and fast["bs1.verdict"] == "better"
    cell = json.loads(to_json(rows, "output_throughput"))["rows"][0]["cells"]["bs1"]
    assert (cell["ratio"], cell["p_value"], cell["verdict"]) == (None, None, "n/a")


# ============================================================================ the Mann-Whitney test itself
# Reference p-values computed with scipy 1.17.1: float(scipy.stats.mannwhitneyu(a, b, alternative="two-sided",
# method=method).pvalue). Exact where scipy is exact (no ties, a side of at most 8), normal otherwise.

MWU_REFERENCES = [
    # a, b, method, scipy's p
    ([150, 149, 151, 152, 153], [100, 101, 99, 102, 98], "auto", 0.007936507936507936),  # 5 v 5 apart: exact
    ([1.1, 2.3, 3.7, 5.2], [0.9, 2.0, 2.9, 4.1, 4.8, 6.0, 7.3], "auto", 0.6484848484848484),  # 4 v 7 interleaved
    ([10.5, 11.2, 12.9], list(range(1, 13)), "auto", 0.03076923076923077),  # 3 v 12: exact (one side <= 8)
    ([1, 3, 5, 7, 9, 11, 13, 15], [2, 4, 6, 8, 10, 12, 14, 16.5, 17.5], "auto", 0.4807075277663513),  # 8 v 9: exact
    ([1, 3, 5, 7, 9, 11, 13, 15, 21], [2, 4, 6, 8, 10, 12, 14, 16.5, 17.5], "auto", 0.7910815129207817),  # 9 v 9
    ([x * 1.01 for x in range(10)], [x + 3.5 for x in range(12)], "auto", 0.011129227614007952),  # 10 v 12: normal
    ([10, 11, 12, 13, 14], [12, 15, 16, 17, 18, 19], "auto", 0.02810006355731762),  # one tied pair: normal
    ([1, 1, 2, 2, 3, 3], [2, 3, 3, 4, 4, 4], "auto", 0.03830311920937907),  # many ties
    ([150] * 5, [100] * 5, "auto", 0.003976751709788651),  # every value tied within its side
    ([1, 4, 5, 8], [2, 3, 6, 7], "auto", 1.0),  # U = n1*n2/2: twice the tail is over 1, clipped
    ([x * 1.01 for x in range(10)], [x + 3.5 for x in range(12)], "exact", 0.00895698728516066),
    ([1.1, 2.3, 3.7, 5.2], [0.9, 2.0, 2.9, 4.1, 4.8, 6.0, 7.3], "asymptotic", 0.6366016325636008),
    ([10, 11, 12, 13, 14], [12, 15, 16, 17, 18, 19], "exact", 0.030303030303030304),  # ties, exact as scipy does
]


@pytest.mark.parametrize("a, b, method, expected", MWU_REFERENCES)
def test_mann_whitney_p_matches_scipy(a, b, method, expected):
    assert mann_whitney_p(a, b, method) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert mann_whitney_p(b, a, method) == pytest.approx(expected, rel=1e-12, abs=1e-15)  # two-sided: symmetric


def test_mann_whitney_p_refuses_a_method_it_does_not_know():
    with pytest.raises(ValueError, match=r"^method 'exakt': auto, exact or asymptotic$"):
        mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8], "exakt")


@pytest.mark.parametrize("m, n", [(1, 1), (1, 4), (3, 3), (4, 2), (4, 6)])
def test_the_exact_u_distribution_counts_every_ordering(m, n):
    # Brute force: every way to place the m values of one sample among m + n untied ranks, and its U.
    from harness.analysis.significance import _u_counts

    expected = [0] * (m * n + 1)
    for ranks in itertools.combinations(range(m + n), m):
        expected[sum(ranks) - m * (m - 1) // 2] += 1  # U = rank sum - m(m+1)/2, with ranks from 1
    assert _u_counts(m, n) == expected and sum(expected) == math.comb(m + n, m)


def test_mann_whitney_p_without_any_spread_is_one():
    assert mann_whitney_p([3.0] * 4, [3.0] * 6) == 1.0  # scipy gives nan here


def test_the_test_needs_no_scipy(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)  # any `import scipy...` now fails
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    assert mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(0.02857142857142857)  # scipy: 2 / C(8, 4)


# ============================================================================ the terminal table, as printed
# Rendered with rich into a string at the widths people's terminals have, and read back as text.

LONG_KEY = ('[2026-11-30 12:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last): File '
            '"/root/sglang/python/sglang/srt/layers/attention/flashinfer_mla_backend.py", line 412, in forward_decode '
            'RuntimeError: FlashInfer MLA kernel only supports kv dtype float8_e4m3fn, got float8_e5m2')
ERROR = "RuntimeError: FlashInfer MLA kernel only supports kv dtype float8_e4m3fn, got float8_e5m2"


def fleet(mixed=False):
    """Long hyphenated names as sweeps make them, two bench cases, an unexpected and an expected crash."""
    two = lambda a, b: {"bs1": a, "bs8": b}  # noqa: E731
    records = [
        rec("glm5-flashinfer-mla", two([100, 101, 99, 100, 102], [800, 805, 790, 801, 799])),
        rec("glm5-flashinfer-mla-gather-cast", two([150, 149, 151, 152, 150], [1200, 1190, 1210, 1205, 1195])),
        rec("glm5-custom-fp8-mla", [], status="crashed",
            verdict={"category": "oom", "key_line": LONG_KEY.replace("RuntimeError", "torch.OutOfMemoryError")}),
        rec("glm5-flashinfer-mla-fp8-e5m2", [], status="crashed", expect="crash", met=True,
            verdict={"category": "unsupported-dtype", "key_line": LONG_KEY}),
    ]
    for r, backend in zip(records, ["flashinfer-mla", "flashinfer-mla-gather-cast", "custom-fp8-mla",
                                    "flashinfer-mla-fp8"]):
        r.backend = backend
    if mixed:
        records.append(rec("glm5-flashinfer-mla", two([200, 201, 199, 200, 202], [1600, 1605, 1590, 1601, 1599]),
                           gpu=[{"name": "NVIDIA B200"}]))
        records[-1].backend = "flashinfer-mla"
    return records


def render(rows, metric, width, chosen=False):
    from rich.console import Console

    from harness.cli.views import print_comparison

    console = Console(width=width, file=io.StringIO(), color_system=None, soft_wrap=True)  # as the CLI's
    print_comparison(console, rows, metric, chosen=chosen)
    return console.file.getvalue()


def table_parts(text):
    """(header columns, body lines split into their column fragments, the lines after the table)."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if "╇" in line)
    header = [line.split("┃") for line in lines[:rule] if "┃" in line]
    body_end = next((i for i in range(rule + 1, len(lines)) if "│" not in lines[i]), len(lines))
    body = [[f.strip() for f in line.split("│")] for line in lines[rule + 1:body_end]]
    heads = [" ".join(" ".join(h[i].split()) for h in header).strip() for i in range(len(header[0]))]
    return [" ".join(h.split()) for h in heads], body, lines[body_end:]


def words(*names):
    return {w for n in names for w in re.split(r"[-_:=@ ()\[\]]+", n) if w}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("mixed", [False, True])
def test_printed_table_never_cuts_a_name_status_or_number_mid_word(width, mixed):
    from harness.analysis.compare import cell_text, interval_text, ratio_text

    records = fleet(mixed)
    rows = build_rows(records, metric="output_throughput", baseline="glm5-flashinfer-mla")
    text = render(rows, "output_throughput", width)
    assert max(len(line) for line in text.splitlines()) <= width
    heads, body, _ = table_parts(text)
    allowed = {
        "experiment": words(*(r.experiment for r in records)),
        "backend": words(*(r.backend for r in records)),
        "status": words("crashed: oom as expected (crashed: unsupported-dtype)", "ok") | {str(i) for i in range(9)},
    }
    for column, vocabulary in allowed.items():
        col = heads.index(column)
        fragments = [line[col] for line in body if line[col]]
        assert fragments, column
        for fragment in fragments:
            assert words(fragment) <= vocabulary, (column, fragment, text)
    # numbers and ratios whole: every token under a value or ratio header is a token of some cell's own text
    numbers = {t for r in rows for c in r.cells.values()
               for t in (cell_text(c) + " " + ratio_text(c, r.is_baseline)).split() + [interval_text(c).strip("[]")]}
    value_columns = [i for i, h in enumerate(heads) if "median" in h or "vs base" in h]
    assert value_columns
    for line in body:
        for i in value_columns:
            assert set(line[i].split()) <= numbers, (line[i], text)


@pytest.mark.parametrize("width", [80, 120])
def test_printed_table_keeps_the_error_of_a_crash_and_names_the_unit_and_the_spread(width):
    rows = build_rows(fleet(), metric="output_throughput", baseline="glm5-flashinfer-mla")
    text = render(rows, "output_throughput", width)
    heads, body, after = table_parts(text)
    flat = " ".join(text.split())
    assert ERROR in flat and "torch.OutOfMemoryError: CUDA out of memory" not in flat  # (not in the fixture)
    assert "torch.OutOfMemoryError: FlashInfer MLA kernel only supports kv dtype float8_e4m3fn, got float8_e5m2" in flat
    assert "2026-11-30 12:00:01" not in flat  # the log prefix went, the error stayed
    assert any(h.endswith("median ± CV, tok/s") for h in heads), heads
    assert "output_throughput (tok/s), higher is better" in flat
    # the notes are numbered under the table, and the number is in the row it belongs to
    notes = " ".join(" ".join(after).split())
    n = re.search(r"\[(\d)\] glm5-custom-fp8-mla: …torch.OutOfMemoryError", notes)
    assert n and f"[{n.group(1)}]" in " ".join(f for line in body for f in line)


def test_printed_table_names_the_unit_of_a_latency_metric():
    records = [rec("base", [10, 10.1, 9.9, 10, 10.2], metric="median_itl_ms"),
               rec("fast", [5, 5.1, 4.9, 5, 5.2], metric="median_itl_ms")]
    heads, _, _ = table_parts(render(build_rows(records, metric="median_itl_ms"), "median_itl_ms", 120))
    assert "bs1 median ± CV, ms" in heads


@pytest.mark.parametrize("mixed", [False, True])
def test_the_gpu_column_appears_only_on_a_mixed_fleet(mixed):
    rows = build_rows(fleet(mixed), metric="output_throughput", baseline="glm5-flashinfer-mla")
    heads, body, _ = table_parts(render(rows, "output_throughput", 120))
    assert ("GPU" in heads) is mixed
    assert ("GPU" in columns(rows)) is mixed
    if mixed:
        gpus = " ".join(line[heads.index("GPU")] for line in body)
        assert "NVIDIA B200 x1" in " ".join(gpus.split()) and "NVIDIA H200 x1" in " ".join(gpus.split())


def test_an_expected_crash_reads_as_expected_and_an_unexpected_one_as_a_failure():
    rows = build_rows(fleet(), metric="output_throughput", baseline="glm5-flashinfer-mla")
    t = table(rows)
    assert t["glm5-flashinfer-mla-fp8-e5m2"]["status"] == "as expected (crashed: unsupported-dtype)"
    assert t["glm5-custom-fp8-mla"]["status"] == "crashed: oom"
    assert [r.label for r in rows if r.expected] == ["glm5-flashinfer-mla-fp8-e5m2"]
    parsed = {r["label"]: r["as_expected"] for r in csv.DictReader(io.StringIO(to_csv(rows)))}
    assert parsed["glm5-flashinfer-mla-fp8-e5m2"] == "True" and parsed["glm5-custom-fp8-mla"] == "False"


def test_an_expected_crash_that_ran_ok_says_so():
    rows = build_rows([rec("base", [100, 101, 99, 100]), rec("e5m2", [100, 101, 99, 100], expect="crash", met=False)],
                      metric="output_throughput", baseline="base")
    assert row(rows, "e5m2").notes == ["expected crash, ran ok"] and not row(rows, "e5m2").expected


# ============================================================================ key lines


def test_a_long_key_line_keeps_the_exception_and_its_message_and_drops_the_prefix():
    short = short_key_line(LONG_KEY)
    assert short == "…" + ERROR and len(short) <= 120


def test_a_key_line_whose_message_alone_is_too_long_starts_at_the_exception():
    line = "[TP0] noise " * 5 + "ValueError: " + "x" * 200
    short = short_key_line(line)
    assert short.startswith("ValueError: xxx") and short.endswith("…") and len(short) == 120


def test_a_key_line_without_an_exception_keeps_both_ends():
    line = "start " + "y" * 200 + " the end"
    short = short_key_line(line)
    assert short.startswith("start yy") and short.endswith("yy the end") and "…" in short and len(short) == 120


def test_a_short_key_line_is_kept_whole_and_the_last_exception_is_the_one_kept():
    assert short_key_line("torch.OutOfMemoryError: CUDA out of memory.") == "torch.OutOfMemoryError: CUDA out of memory."
    line = "KeyError: 'x' during handling " + "z" * 100 + " RuntimeError: boom"
    assert short_key_line(line) == "…RuntimeError: boom"
    assert short_key_line("a" * 120) == "a" * 120 and len(short_key_line("a" * 121)) == 120


# What a host that cannot run a backend says (the agent's preflight): the key words are at the start, the list of
# choices makes it long.
REFUSED = ("cannot run here: SGLang 0.5.23 on this host does not accept --attention-backend cutlass_mla (valid: "
           "triton, torch_native, flex_attention, dsa, nsa, qsa, dsv4, compressed, fa3, fa4, flashinfer, "
           "llada2_cfg_flashinfer, flashmla, trtllm_mla, cutedsl_mla, tokenspeed_mla, trtllm_mha, hpc_ops, "
           "minicpm_flashattn, minicpm_flashinfer, aiter, wave, intel_amx, ascend, intel_xpu)")
LONG_MESSAGE = ("[TP0] Scheduler hit an exception: ValueError: Exactly one of ckv_scale or ckv_scale_arr is required "
                "when kv_data_type is FP8, and the plan was made for a BF16 cache of 61 layers with page size 64 "
                "tokens, so the kernel was never built")


def _bare(token):
    return token.strip(",;:()[]…")


@pytest.mark.parametrize("width", [80, 120])
def test_printed_notes_keep_their_key_words_whole_and_wrap_between_words(width):
    """The notes under the table: a long line is shortened where it says least (a list of choices, then the
    middle) and only between words, and wrapped at spaces — no word cut, none glued to an ellipsis."""
    refused = rec("glm5-cutlass_mla", [], status="preflight-failed")
    refused.error = REFUSED
    crashed = rec("glm5-fp8-plan", [], status="crashed", verdict={"category": "python-exception",
                                                                   "key_line": LONG_MESSAGE})
    records = fleet() + [refused, crashed]
    rows = build_rows(records, metric="output_throughput", baseline="glm5-flashinfer-mla")
    text = render(rows, "output_throughput", width)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("[1] "))
    notes = [line for line in lines[first:] if not line.startswith("baseline:")]
    assert notes and max(len(line) for line in notes) <= width
    vocabulary = {_bare(t) for r in rows for t in " ".join([r.label, *r.notes]).split()}
    said = [r.error or "" for r in records] + [r.verdict.key_line or "" for r in records if r.verdict]
    vocabulary |= {_bare(t) for t in " ".join(said).split()}
    for line in notes:
        for token in line.split():
            assert "…" not in token.strip("…"), (token, line)  # an ellipsis glued inside a word: a word was cut
            assert _bare(token) in vocabulary | {""} or re.fullmatch(r"\[\d+\]", token), (token, line)
    flat = " ".join(" ".join(notes).split())
    assert "does not accept --attention-backend cutlass_mla (valid: triton," in flat
    assert "ValueError: Exactly one of ckv_scale or ckv_scale_arr is required" in flat


# ============================================================================ ratios, baselines, names


@pytest.mark.parametrize("ratio, verdict, text", [
    (1.004, "better", "1.00x"), (0.996, "worse", "1.00x"), (1.0, "worse", "1.00x"),
    (1.006, "better", "1.01x ▲"), (0.994, "worse", "0.99x ▼"),
    (1.0, "same", "1.00x ≈"), (1.004, "few", "1.00x ?"), (1.004, "n/a", "1.00x"),
])
def test_a_ratio_that_rounds_to_one_gets_no_up_or_down_arrow(ratio, verdict, text):
    from harness.analysis.compare import Cell, ratio_text

    assert ratio_text(Cell(100.0, 0.01, 5, [], ratio=ratio, verdict=verdict), False) == text


def test_equal_medians_are_neither_better_nor_worse():
    base = [90.0] * 10 + [100.0] + [100.1] * 10
    cand = [99.9] * 10 + [100.0] + [110.0] * 10
    for metric in METRICS:
        rows = build_rows([rec("base", base, metric=metric), rec("cand", cand, metric=metric)], metric=metric,
                          baseline="base")
        cell = row(rows, "cand").cells["bs1"]
        assert (cell.ratio, cell.verdict) == (1.0, "same") and cell.p_value < 0.05
        assert table(rows)["cand"]["bs1 vs base"] == "1.00x ≈"


def test_without_a_named_baseline_the_first_row_that_measured_the_metric_is_the_baseline():
    records = [rec("a-crashed", [], status="crashed"), rec("b-no-metric", [100, 101, 99, 100], metric="duration"),
               rec("c", [100, 101, 99, 100, 102]), rec("d", [150, 149, 151, 152, 150])]
    rows = build_rows(records, metric="output_throughput")
    assert [r.label for r in rows if r.is_baseline] == ["c"]
    assert table(rows)["d"]["bs1 vs base"] == "1.50x ▲"
    text = " ".join(render(rows, "output_throughput", 120, chosen=True).split())
    assert "baseline: c (the first row that measured output_throughput; choose another with --baseline)" in text


def test_without_a_named_baseline_and_nothing_measured_the_first_row_is_the_baseline():
    rows = build_rows([rec("a", [], status="crashed"), rec("b", [], status="hung")], metric="output_throughput")
    assert [r.label for r in rows if r.is_baseline] == ["a"]


def comparison_store(tmp_path):
    from harness.results.store import ResultsStore

    store = ResultsStore(tmp_path / "results")
    for r in [rec("base", [100, 101, 99, 100]), rec("fast", [150, 151, 149, 150], status="ok")]:
        r.run_id = "r1"
        store.write_record(store.new_attempt_dir("r1", r.experiment), r)
    return store


def test_an_unknown_metric_or_baseline_given_by_the_user_is_a_config_error_naming_the_known_ones(tmp_path):
    from rich.console import Console

    from harness.cli.views import show_comparison
    from harness.errors import ConfigError, ExitCode

    store = comparison_store(tmp_path)
    console = Console(file=io.StringIO())
    with pytest.raises(ConfigError) as e:
        show_comparison(console, [(store, "r1")], baseline=None, metric="output_thruput", fmt="table", plot_file=None)
    assert e.value.exit_code == ExitCode.CONFIG and "unknown metric 'output_thruput'" in str(e.value)
    assert "output_throughput" in e.value.hint and "median_itl_ms" in e.value.hint
    with pytest.raises(ConfigError) as e:
        show_comparison(console, [(store, "r1")], baseline="bsae", metric="output_throughput", fmt="json",
                        plot_file=None)
    assert "'bsae'" in str(e.value) and e.value.hint == "experiments: base, fast"
    assert console.file.getvalue() == ""  # nothing printed before the error


# ============================================================================ the plot


def test_the_plot_has_a_title_unit_legend_spread_and_no_bar_for_a_crash():
    pytest.importorskip("matplotlib", reason="matplotlib not installed (optional extra `plot`)")
    from harness.render.plots import plot_figure

    rows = build_rows(fleet(), metric="output_throughput", baseline="glm5-flashinfer-mla")
    fig = plot_figure(rows, "output_throughput")
    assert len(fig.axes) == 2  # bs1, bs8
    for ax, case in zip(fig.axes, ["bs1", "bs8"]):
        assert ax.get_title() == f"{case}: output_throughput, higher is better"
        assert ax.get_ylabel() == "output_throughput (tok/s)"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["baseline (median)", "median", "each repeat",
                                                                       "no result"]
        bars = ax.containers[0]
        assert len(bars) == 2  # the two crashed rows have no bar at all, not a bar of height 0
        assert sorted(b.get_height() for b in bars) == ([100, 150] if case == "bs1" else [800, 1200])
        assert sorted(t.get_text() for t in ax.texts) == ["crashed", "crashed (expected)"]
        dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
        assert sorted(len(d.get_ydata()) for d in dots) == [5, 5]  # every repeat of both measured rows
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == [r.label for r in rows]


def test_too_narrow_for_any_table_each_experiment_becomes_a_block_of_whole_words():
    """Seen in the demo at 80 columns: a GPU column and a top-op column beside the names left no layout that
    fits, and rich squeezed every column until "sim-flashinfer-mla" read "sim-fl / ashinf / er-mla"."""
    from harness.analysis.compare import cell_text, ratio_text
    from harness.results.schemas import ProfileOp, ProfileSummary

    records = fleet(mixed=True)
    for r in records:
        if r.status == "ok":
            r.profile = ProfileSummary(total_gpu_us=1e6, steps=5, kernels=10,
                                       top=[ProfileOp(name="aten::copy_", gpu_us=4.2e5, share=0.42, calls=5)])
    rows = build_rows(records, metric="output_throughput", baseline="glm5-flashinfer-mla")
    text = render(rows, "output_throughput", 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert "┃" not in text and "│" not in text  # not a squeezed table
    for r in records:  # each experiment's name and backend whole, on one line
        assert any(r.experiment in line and r.backend in line for line in lines), (r.experiment, text)
    for r in rows:
        for case, c in r.cells.items():
            if c.median is not None:
                assert any(line.split()[:1] == [case] and cell_text(c) in line
                           and ratio_text(c, r.is_baseline) in line for line in lines), (case, text)
    assert "aten::copy_" in text and ERROR in " ".join(text.split())
