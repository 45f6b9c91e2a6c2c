"""Comparison statistics and rendering (pure)."""

import csv
import io
import json

from harness.report import build_rows, to_csv, to_json, to_markdown
from harness.results import Record

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
    with_profile.__pydantic_extra__["profile"] = {"top": [{"name": "aten::copy_", "share": 0.69}]}
    without = rec("other", [100, 101, 99])
    without.__pydantic_extra__["profile"] = None
    rows = build_rows([with_profile, without], metric="output_throughput", baseline="base")
    assert row(rows, "base").top_op == "aten::copy_ 69%" and row(rows, "other").top_op is None
