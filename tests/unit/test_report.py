"""Comparison statistics and rendering (pure)."""

import csv
import io
import json

import pytest

from harness.report import build_rows, columns, table_rows, to_csv, to_json, to_markdown
from harness.results import ProfileOp, ProfileSummary, Record

GPU = [{"name": "NVIDIA H200", "compute_cap": "9.0"}]


def rec(exp, samples, status="ok", run="r1", gpu=GPU, commit="c" * 40, verdict=None, metric="output_throughput"):
    return Record(run_id=run, experiment=exp, attempt="01", host="h", backend=exp, status=status, verdict=verdict,
                  metrics={"bs1": {metric: samples[len(samples) // 2] if samples else None,
                                   "samples": {metric: samples}}} if samples else {},
                  provenance={"gpu": gpu, "server_version": "0.5.23", "base_commit": commit})


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
    from harness.report import plot

    rows = build_rows([rec("base", [100, 101, 99]), rec("fast", [150, 149, 151])], metric="output_throughput",
                      baseline="base")
    plot(rows, "output_throughput", str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_top_op_from_profiles_and_records_without_one():
    with_profile = rec("base", [100, 101, 99])
    with_profile.profile = ProfileSummary(total_gpu_us=100.0, steps=1, kernels=1,
                                          top=[ProfileOp(name="aten::copy_", gpu_us=69.0, share=0.69, calls=1)])
    without = rec("other", [100, 101, 99])
    without.profile = None
    rows = build_rows([with_profile, without], metric="output_throughput", baseline="base")
    assert row(rows, "base").top_op == "aten::copy_ 69%" and row(rows, "other").top_op is None


# ============================================================================ the markers a user reads
# Judged from the rendered tables (markdown, and the cells the terminal table prints), with the
# significance of each case checked here with scipy directly, not with the code under test.

METRICS = ["median_itl_ms", "output_throughput"]  # lower is better; higher is better
BASE = [10.0, 10.1, 9.9, 10.2, 9.8, 10.05]  # six repeats of the baseline
OVERLAPPING = [10.12, 10.22, 9.97, 10.27, 9.93, 10.17]  # a little off the baseline, well inside its spread


def scaled(samples, factor, metric):
    unit = 1.0 if metric.endswith("_ms") else 100.0  # ITL in ms around 10; throughput in tok/s around 1000
    return [round(v * factor * unit, 4) for v in samples]


def two_sided_p(a, b):
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def rendered_markers(records, metric):
    """label -> the `bs1 vs base` cell, from the markdown table and from the terminal table's cells."""
    rows = build_rows(records, metric=metric, baseline="base")
    lines = [line for line in to_markdown(rows, metric).splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    col = head.index("bs1 vs base")
    markdown = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        markdown[cells[0]] = cells[col]
    terminal_col = columns(rows).index("bs1 vs base")
    terminal = {line[0]: line[terminal_col] for line in table_rows(rows)}
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
