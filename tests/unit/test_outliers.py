"""Outlier repeats (analysis/outliers.py): the robust rule, the cause read from the repeat's part of its bench
log, and the note the table and the page show — the repeat named, never dropped from the median."""

from __future__ import annotations

import statistics

from harness.analysis import outliers
from harness.analysis.compare import build_rows
from harness.analysis.outliers import Origin
from harness.results.schemas import Record

# Real log lines (the scheduler's, torch's JIT build's), copied from public SGLang issues:
# sgl-project/sglang#1467 (cuda graph capture), #5389 (FlashInfer JIT via ninja during capture),
# #6801 (FlashInfer JIT "Error building extension"); the decode line is SGLang 0.5.16's on an H200
# (tests/fixtures/real-logs-live/healthy_05_sglang0516_h200_triton_fp8_served.log) with its graph flag False,
# as the scheduler prints it for a batch size no graph was captured for.
CAPTURE = "[2025-01-23 19:35:20 TP0] Capture cuda graph begin. This can take up to several minutes."
NINJA = "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1."
EXTENSION = "RuntimeError: Error building extension 'batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16'"
DECODE_NO_GRAPH = ("[2026-11-30 07:40:09] Decode batch, #running-req: 1, #token: 0, token usage: 0.00, "
                   "cuda graph: False, gen throughput (token/s): 1.12, #queue-req: 0")
DECODE_GRAPH = DECODE_NO_GRAPH.replace("cuda graph: False", "cuda graph: True")
BANNER = "\n============ Serving Benchmark Result ============\nSuccessful requests: 8\n"


def test_the_rule_flags_a_far_repeat_and_only_from_five_samples():
    assert outliers.flagged([270, 271, 269, 270, 4900]) == [4]
    assert outliers.flagged([270, 270, 270, 270, 4900]) == [4]  # the others agree exactly: MAD 0, floor 1 %
    assert outliers.flagged([270, 270, 270, 4900]) == []  # under MIN_REPEATS: no flag
    assert outliers.flagged([100, 101, 99, 100, 102, 98, 103]) == []  # ordinary noise
    assert outliers.flagged([100.0, 100.0, 100.0, 100.0, 100.5]) == []  # a 0.5 % wobble in a quiet series
    # just past and just inside K scaled MADs
    base = [90.0, 95, 100, 100, 105, 110]  # with one value above: median 100, MAD 5 → scale 7.413
    edge = 100 + outliers.K * outliers.MAD_SCALE * 5
    assert outliers.flagged(base + [edge + 1]) == [6] and outliers.flagged(base + [edge - 1]) == []


def test_likely_cause_from_real_log_lines():
    assert outliers.likely_cause(["Successful requests: 8", NINJA]) == "a JIT build"
    assert outliers.likely_cause([EXTENSION]) == "a JIT build"
    assert outliers.likely_cause([CAPTURE]) == "a CUDA graph capture"
    assert outliers.likely_cause([DECODE_NO_GRAPH]) == "a batch shape without a CUDA graph"
    assert outliers.likely_cause([DECODE_GRAPH, "Successful requests: 8"]) is None


def test_a_repeat_maps_to_its_own_part_of_the_bench_log():
    log = "warming\n" + BANNER + CAPTURE + "\n" + BANNER + "quiet\n" + BANNER
    assert outliers.likely_cause(outliers.repeat_lines(log, 1)) is None
    assert outliers.likely_cause(outliers.repeat_lines(log, 2)) == "a CUDA graph capture"
    assert outliers.likely_cause(outliers.repeat_lines(log, 3)) is None
    assert outliers.repeat_lines(log, 4) == [] and outliers.repeat_lines(log, 0) == []
    # a warm-up run before the measured ones (its own banner): with 2 measured repeats, the first run is skipped
    assert outliers.likely_cause(outliers.repeat_lines(log, 1, of=2)) == "a CUDA graph capture"
    assert outliers.likely_cause(outliers.repeat_lines(log, 2, of=2)) is None
    assert outliers.repeat_lines(log, 3, of=3) == outliers.repeat_lines(log, 3)


def rec(attempt: str, rnd: int, samples: list[float]) -> Record:
    return Record(run_id="r1", experiment="e", attempt=attempt, host="h", backend="e", status="ok", round=rnd,
                  metrics={"c8": {"median_ttft_ms": samples[0], "samples": {"median_ttft_ms": samples}}},
                  provenance={"gpu": [{"name": "NVIDIA H200"}], "server_version": "0.5.23", "base_commit": "c" * 40})


def test_the_note_names_the_repeat_and_its_cause_and_the_median_keeps_it():
    records = [rec("a1", 1, [270.0, 4900.0, 271.0]), rec("a2", 2, [269.0, 270.0, 272.0])]
    [row] = build_rows(records, metric="median_ttft_ms")
    pooled = [270.0, 4900.0, 271.0, 269.0, 270.0, 272.0]
    assert row.cells["c8"].samples == pooled and row.cells["c8"].median == statistics.median(pooled)  # kept
    [o] = row.outliers
    assert o.origin == Origin("r1", "e", "a1", 1, 2, 3) and o.value == 4900.0
    assert "c8: outlier round 1 repeat 2 (4,900.0 vs median 270.5)" in row.notes
    logs = {("a1", "c8"): "x\n" + BANNER + NINJA + "\n" + BANNER + "y\n" + BANNER}
    outliers.attach_causes(row.outliers, row.notes, lambda origin, case: logs.get((origin.attempt, case)))
    assert "c8: outlier round 1 repeat 2 (4,900.0 vs median 270.5; a JIT build in its log)" in row.notes
    assert not any(n.endswith("median 270.5)") for n in row.notes)  # the old note replaced, not doubled


def test_an_outlier_without_lines_stays_plain_outlier():
    records = [rec("a1", 1, [270.0, 4900.0, 271.0]), rec("a2", 2, [269.0, 270.0, 272.0])]
    [row] = build_rows(records, metric="median_ttft_ms")
    outliers.attach_causes(row.outliers, row.notes, lambda origin, case: None)
    assert row.outliers[0].cause is None and "c8: outlier round 1 repeat 2 (4,900.0 vs median 270.5)" in row.notes


def test_compare_and_the_page_name_the_outlier_and_the_cause_in_its_bench_log(tmp_path):
    """Through the commands' own path (views.comparison_rows, read from the results folder): the repeat whose
    part of bench-c8.log shows a JIT build is named with it, on the terminal and on the page."""
    import io

    from rich.console import Console

    from harness.cli import views
    from harness.results.store import ResultsStore

    store = ResultsStore(tmp_path / "results")
    for attempt, rnd, samples in [("a1", 1, [4900.0, 270.0, 271.0]), ("a2", 2, [269.0, 270.0, 272.0])]:
        r = rec(attempt, rnd, samples)
        d = store.new_attempt_dir("r1", "e", attempt)
        store.write_record(d, r)
        # repeat 1 of attempt a1 waited on a FlashInfer JIT build; a2's log is quiet
        (d / "bench-c8.log").write_text((NINJA + "\n" if attempt == "a1" else "") + BANNER + "x\n" + BANNER * 2)
    want = "c8: outlier round 1 repeat 1 (4,900.0 vs median 270.5; a JIT build in its log)"
    _, rows, _, _ = views.comparison_rows([(store, "r1")], baseline=None, metric="median_ttft_ms")
    assert want in rows[0].notes
    out = Console(width=120, file=io.StringIO(), color_system=None)
    views.show_comparison(out, [(store, "r1")], baseline=None, metric="median_ttft_ms", fmt="table", plot_file=None)
    assert want in " ".join(out.file.getvalue().split())
    page = views.write_report([(store, "r1")], tmp_path / "page", baseline=None, metric="median_ttft_ms")
    assert want in " ".join(page.read_text().split())


# ---------------------------------------------------------------------------------------------- drift (n = 3, 4)
# The live sweep behind issue 43 (V3-shaped, 128 heads, one H200): a 16-prompt 4K case at concurrency 8 gave
# 144-171 tok/s in repeat 1 and 387-464 after; an 8K "hit" case 853-1028 ms TTFT in repeat 1, 93-126 after.


def test_the_drift_rule_flags_one_repeat_far_from_two_that_agree():
    assert outliers.drifted([160.0, 400.0, 420.0]) == [0]
    assert outliers.drifted([950.0, 110.0, 120.0]) == [0]  # the cold "hit" repeat
    assert outliers.drifted([400.0, 160.0, 420.0, 410.0]) == [1]  # any repeat, 4 of them too
    assert outliers.drifted([100.0, 101.0, 99.0]) == []  # ordinary noise
    assert outliers.drifted([100.0, 100.0, 120.0]) == []  # under the 25 % floor, however quiet the others
    assert outliers.drifted([100.0, 100.0, 130.0]) == [2]
    assert outliers.drifted([100.0, 150.0, 220.0]) == []  # scattered: noise (the CV says so), not one repeat astray
    assert outliers.drifted([160.0, 400.0]) == [] and outliers.drifted([160.0, 400.0, 410.0, 420.0, 415.0]) == []


def cached(attempt: str, rnd: int, samples: list[float], shares: list[float]) -> Record:
    r = rec(attempt, rnd, samples)
    prefill = [{"repeat": i, "new": round(1000 * (1 - s)), "cached": round(1000 * s), "batches": 4}
               for i, s in enumerate(shares)]
    return Record.model_validate({**r.model_dump(), "bench_cases": {"c8": {"prefix_cache": "hit", "prefill": prefill}}})


def test_a_drifted_cell_names_the_repeat_and_the_cache_and_is_not_judged():
    base = cached("b1", 1, [120.0, 110.0, 112.0], [0.99, 0.99, 0.99])
    base = base.model_copy(update={"experiment": "base"})
    cold_first = cached("a1", 1, [950.0, 110.0, 120.0], [0.0, 0.99, 0.99])
    rows = {r.experiment: r for r in build_rows([base, cold_first], metric="median_ttft_ms", baseline="base")}
    row = rows["e"]
    cell = row.cells["c8"]
    assert cell.drift and cell.verdict == "drift" and cell.marker == "⚠" and cell.ratio is not None
    assert ("c8: drift round 1 repeat 1 (950.0 vs 115.0 for the others; prefix cache: 0 % of its prompt tokens "
            "cached, the others 99 %)") in row.notes
    assert not rows["base"].cells["c8"].drift and compare_text(cell).endswith("⚠")


def test_a_drift_with_no_cause_says_so():
    [row] = build_rows([rec("a1", 1, [950.0, 110.0, 120.0])], metric="median_ttft_ms")
    assert "c8: drift round 1 repeat 1 (950.0 vs 115.0 for the others; no cause in its logs)" in row.notes


def compare_text(cell) -> str:
    from harness.analysis.compare import cell_text
    return cell_text(cell)


def test_a_row_against_a_drifted_baseline_is_not_judged_either():
    base = rec("b1", 1, [950.0, 110.0, 120.0, 115.0]).model_copy(update={"experiment": "base"})
    row = rec("a1", 1, [300.0, 310.0, 305.0, 302.0])
    rows = {r.experiment: r for r in build_rows([base, row], metric="median_ttft_ms", baseline="base")}
    assert rows["base"].cells["c8"].drift and not rows["e"].cells["c8"].drift
    assert rows["e"].cells["c8"].verdict == "drift" and rows["e"].cells["c8"].p_value is None
    quiet = rec("b1", 1, [120.0, 110.0, 112.0, 115.0]).model_copy(update={"experiment": "base"})
    judged = {r.experiment: r for r in build_rows([quiet, row], metric="median_ttft_ms", baseline="base")}
    assert judged["e"].cells["c8"].verdict == "worse"  # the same row, judged, against a baseline that held
