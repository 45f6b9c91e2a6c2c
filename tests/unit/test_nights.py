"""Night against night (harness/analysis/nights.py, nightstext.py, cli/nightsview.py): B's samples against A's
per experiment, case and metric with the table's rules, the regressions, and every format that carries them."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest

from harness.analysis import compare, nights
from harness.analysis.compare import Cell
from harness.analysis.units import lower_is_better, metric_label
from harness.cli.nightsview import print_nights
from harness.render import nightstext
from harness.results.schemas import Record
from harness.results.store import ResultsStore
from tests.support import nights as sim

# Six repeats of a quiet box (about 1 % CV), as two rounds of three give.
BASE = [100.0, 101.2, 99.1, 100.6, 98.8, 100.3]


def cell(samples: list[float]) -> Cell:
    return Cell(statistics.median(samples), statistics.pstdev(samples) / statistics.mean(samples), len(samples),
                samples)


def slower(metric: str, samples: list[float], factor: float = 1.2) -> list[float]:
    """The same repeats `factor` times slower: latencies grow, throughputs shrink."""
    return [x * factor if lower_is_better(metric) else x / factor for x in samples]


@pytest.mark.parametrize("metric", ["output_throughput", "median_itl_ms", "p99_ttft_ms", "request_throughput"])
def test_a_20_percent_slower_set_is_worse_whichever_way_the_metric_points(metric):
    b = compare.judge(cell(BASE), cell(slower(metric, BASE)), metric)
    assert b.verdict == "worse" and b.p_value is not None and b.p_value < compare.ALPHA
    faster = compare.judge(cell(BASE), cell(slower(metric, BASE, 1 / 1.2)), metric)
    assert faster.verdict == "better"


def test_equal_sets_are_the_same_and_so_is_a_reordered_remeasure():
    assert compare.judge(cell(BASE), cell(list(BASE)), "output_throughput").verdict == "same"
    again = [x * (1 + (-1) ** i * 0.001) for i, x in enumerate(reversed(BASE))]
    b = compare.judge(cell(BASE), cell(again), "median_itl_ms")
    assert b.verdict == "same" and b.p_value is not None and b.p_value >= compare.ALPHA


def test_fewer_than_4_repeats_a_side_is_too_few_even_when_clearly_apart():
    for n_a, n_b in ((3, 6), (6, 3), (3, 3)):
        b = compare.judge(cell(BASE[:n_a]), cell(slower("median_itl_ms", BASE[:n_b])), "median_itl_ms")
        assert b.verdict == "few" and b.ratio is not None and b.p_value is None
    assert compare.judge(cell(BASE[:4]), cell(slower("median_itl_ms", BASE[:4])), "median_itl_ms").verdict == "worse"


@pytest.mark.parametrize("metric", nights.SPEED_METRICS)
def test_every_judged_metric_has_its_direction(metric):
    up = compare.judge(cell(BASE), cell([x * 1.2 for x in BASE]), metric)
    assert up.verdict == ("worse" if metric.endswith("_ms") else "better")


def test_only_speed_is_judged_not_the_workload():
    assert "output_throughput" in nights.SPEED_METRICS and "median_itl_ms" in nights.SPEED_METRICS
    assert not {"duration", "completed", "total_output_tokens", "concurrency"} & set(nights.SPEED_METRICS)


def test_not_comparable_has_a_ratio_and_no_verdict():
    b = compare.judge(cell(BASE), cell(slower("median_itl_ms", BASE)), "median_itl_ms", comparable=False)
    assert b.verdict == "n/a" and round(b.ratio or 0, 2) == 1.2


# ============================================================================ two nights


@pytest.fixture
def store(tmp_path) -> ResultsStore:
    return ResultsStore(tmp_path / "results")


def judged(store: ResultsStore, a: str = "night-a", b: str = "night-b", **kw) -> nights.Nights:
    return nights.against(store.final_records(a), store.final_records(b), run_a=a, run_b=b, **kw)


def test_the_backend_made_20_percent_slower_is_the_only_regression(store):
    sim.two_nights(store, slower="sim-triton")
    n = judged(store)
    regs = n.regressions()
    assert {r.label for r in regs} == {"sim-triton"}
    # every metric of every case got worse: 14 metrics × 2 cases
    assert len(regs) == len(nights.SPEED_METRICS) * len(sim.CASES)
    itl = next(r for r in regs if r.metric == "median_itl_ms" and r.case == "c1")
    assert itl.change is not None and itl.text == "1.20x (+20.0%)"
    out = next(r for r in regs if r.metric == "output_throughput")
    assert out.text == "0.83x (-16.7%)"
    for p in n.pairs:
        if p.label != "sim-triton":
            assert {c.b.verdict for c in p.changes} <= {"same"}, p.label
    assert n.added == ["sim-trtllm_mla"] and n.removed == ["sim-cutlass_mla"]
    assert n.setup == [("base commit", "a" * 12, "b" * 12)]  # said once, for the whole run
    triton = next(p for p in n.pairs if p.label == "sim-triton")
    assert triton.notes == ["changed: patch set sim-triton-tune " + "e" * 12 + " → " + "f" * 12]
    crashed = next(p for p in n.pairs if p.label == sim.CRASHES)
    assert not crashed.failed and "crashed: kernel-error in B, crashed: kernel-error in A" in crashed.notes[0]


def test_the_same_night_twice_has_no_regressions(store):
    sim.two_nights(store, slower=None)
    n = judged(store)
    assert n.regressions() == [] and nightstext.heading(n).endswith(": no regressions")


def test_the_slowdown_is_flagged_whichever_backend_it_hits(store):
    sim.two_nights(store, slower="sim-flashmla", factor=1.1)
    assert {r.label for r in judged(store).regressions()} == {"sim-flashmla"}


def test_one_metric_only_with_metrics(store):
    sim.two_nights(store)
    n = judged(store, metrics=["median_itl_ms"])
    assert n.metrics == ["median_itl_ms"]
    assert [(r.label, r.case, r.metric) for r in n.regressions()] == [
        ("sim-triton", "c1", "median_itl_ms"), ("sim-triton", "c8", "median_itl_ms")]
    assert nightstext.summary_lines(n)[0] == "sim-triton c1: median_itl_ms 1.20x (+20.0%)"


GPU = [{"name": "NVIDIA H200"}]
B200 = [{"name": "NVIDIA B200"}]


def rec(run: str, exp: str, samples: list[float] | None, *, status: str = "ok", gpu=GPU, attempt: str = "01",
        expect: str | None = None, met: bool | None = None, verdict: dict | None = None) -> Record:
    metrics = {"c1": {"median_itl_ms": samples[0], "samples": {"median_itl_ms": samples}}} if samples else {}
    return Record(run_id=run, experiment=exp, attempt=attempt, host="h", backend=exp, status=status, metrics=metrics,
                  provenance={"gpu": gpu, "server_version": "0.5.23"}, expect=expect, expectation_met=met,
                  verdict=verdict)


def test_a_failure_in_b_that_ran_in_a_is_a_regression_an_expected_one_is_not():
    a = [rec("a", "breaks", BASE), rec("a", "meant-to", BASE), rec("a", "mended", None, status="hung")]
    b = [rec("b", "breaks", None, status="crashed", verdict={"category": "oom", "key_line": "torch.OutOfMemoryError"}),
         rec("b", "meant-to", None, status="crashed", expect="crash", met=True, verdict={"category": "oom"}),
         rec("b", "mended", BASE)]
    n = nights.against(a, b, run_a="a", run_b="b", metrics=["median_itl_ms"])
    assert [(r.label, r.case, r.text) for r in n.regressions()] == [("breaks", None, "crashed: oom (ran ok in A)")]
    breaks = next(p for p in n.pairs if p.label == "breaks")
    assert breaks.notes == ["crashed: oom in B, ran ok in A", "torch.OutOfMemoryError"]
    mended = next(p for p in n.pairs if p.label == "mended")
    assert not mended.failed and mended.notes == ["ran ok in B, hung in A"]
    assert nightstext.summary_lines(n) == ["breaks: crashed: oom (ran ok in A)"]


def test_matched_by_gpu_and_an_experiment_that_moved_gpu_is_not_comparable():
    slow = slower("median_itl_ms", BASE)
    a = [rec("a", "mixed", BASE), rec("a", "mixed", BASE, gpu=B200, attempt="02"), rec("a", "moved", BASE)]
    b = [rec("b", "mixed", BASE), rec("b", "mixed", slow, gpu=B200, attempt="02"), rec("b", "moved", slow, gpu=B200)]
    n = nights.against(a, b, run_a="a", run_b="b", metrics=["median_itl_ms"])
    assert [r.label for r in n.regressions()] == ["mixed @ NVIDIA B200 x1"]
    moved = next(p for p in n.pairs if p.label == "moved")
    assert not moved.comparable and {c.b.verdict for c in moved.changes} == {"n/a"}
    assert moved.notes == ["not comparable: GPU NVIDIA H200 x1 in A, NVIDIA B200 x1 in B"]


def test_noisy_and_too_few_samples_are_noted():
    noisy = [100.0, 112.0, 91.0, 104.0, 96.0, 109.0]
    a = [rec("a", "noisy", BASE), rec("a", "few", BASE[:3])]
    b = [rec("b", "noisy", noisy), rec("b", "few", BASE[:3])]
    n = nights.against(a, b, run_a="a", run_b="b", metrics=["median_itl_ms"])
    notes = {p.label: p.notes for p in n.pairs}
    cv = statistics.pstdev(noisy) / statistics.mean(noisy) * 100
    assert notes["noisy"] == [f"c1: noisy (CV over 5%): median_itl_ms (B {cv:.1f}%)"]
    assert notes["few"] == ["c1: too few samples for a verdict (n=3 in A, 3 in B; 4 a side needed)"]
    assert next(p for p in n.pairs if p.label == "few").changes[0].b.marker == "?"


def test_a_bench_case_measured_one_night_only_is_noted():
    a = [rec("a", "x", BASE)]
    b = [Record(run_id="b", experiment="x", attempt="01", host="h", backend="x", status="ok",
                provenance={"gpu": GPU, "server_version": "0.5.23"},
                metrics={case: {"samples": {"median_itl_ms": BASE}} for case in ("c1", "c16")})]
    n = nights.against(a, b, run_a="a", run_b="b", metrics=["median_itl_ms"])
    (pair,) = n.pairs
    assert pair.notes == ["only in B: c16"] and [c.case for c in pair.changes] == ["c1"]


# ============================================================================ the formats


def test_csv_has_a_line_per_metric_and_marks_only_the_regressions(store):
    sim.two_nights(store)
    rows = list(csv.DictReader(io.StringIO(nightstext.to_csv(judged(store)))))
    assert {r["experiment"] for r in rows if r["regression"] == "True"} == {"sim-triton"}
    triton = [r for r in rows if r["experiment"] == "sim-triton"]
    assert len(triton) == len(nights.SPEED_METRICS) * len(sim.CASES)
    assert all(r["verdict"] == "worse" and float(r["p_value"]) < 0.05 for r in triton)
    assert {r["verdict"] for r in rows if not r["metric"]} == {"n/a", "added", "removed"}


def test_json_carries_the_regressions_and_every_sample(store):
    sim.two_nights(store)
    data = json.loads(nightstext.to_json(judged(store)))
    assert {r["experiment"] for r in data["regressions"]} == {"sim-triton"}
    assert data["added"] == ["sim-trtllm_mla"] and data["removed"] == ["sim-cutlass_mla"]
    triton = next(e for e in data["experiments"] if e["label"] == "sim-triton")
    itl = next(c for c in triton["changes"] if c["metric"] == "median_itl_ms" and c["case"] == "c1")
    assert len(itl["a"]["samples"]) == sim.ROUNDS * sim.REPEATS and itl["verdict"] == "worse"
    assert itl["lower_is_better"] is True


def test_markdown_leads_with_the_summary(store):
    sim.two_nights(store)
    text = nightstext.to_markdown(judged(store))
    lines = text.splitlines()
    assert lines[0] == "**B = night-b against A = night-a: regressions in 1 of 5 experiments**"
    assert [x for x in lines if x.startswith("- ▼")] == [
        f"- ▼ sim-triton {case}: worse in 14 of 14 metrics: output_throughput 0.83x (-16.7%), median_ttft_ms 1.20x "
        f"(+20.0%), median_itl_ms 1.20x (+20.0%) and 11 more" for case in ("c1", "c8")]
    body = [[c.strip() for c in x.strip("|").split("|")] for x in lines if x.startswith("| sim-") or x.startswith("|  |")]
    assert worse_by_experiment(body) == {"sim-triton": True, "sim-fa3": False, "sim-flashinfer-mla": False,
                                         "sim-flashmla": False, sim.CRASHES: False}


def worse_by_experiment(body: list[list[str]]) -> dict[str, bool]:
    """Matrix lines (cells; an experiment's later lines leave its name blank) → does any of its lines show ▼?"""
    out: dict[str, bool] = {}
    name = ""
    for cells in body:
        name = cells[0].split(" [")[0] or name
        out[name] = out.get(name, False) or any("▼" in c for c in cells)
    return out


def printed(n: nights.Nights, width: int) -> str:
    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None, soft_wrap=True)  # as the CLI's
    print_nights(console, n)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 120, 200])
def test_printed_matrix_fits_the_console_and_shows_every_metric(store, width):
    sim.two_nights(store)
    text = printed(judged(store), width)
    lines = text.splitlines()
    assert lines[0] == "B = night-b against A = night-a: regressions in 1 of 5 experiments"
    assert lines[1].startswith("  ▼ sim-triton c1: worse in 14 of 14 metrics")
    assert all(len(x.rstrip()) <= width for x in lines), max(lines, key=len)
    for m in nights.SPEED_METRICS:
        for word in metric_label(m).split():
            assert word in text, (m, word)
    body = [[c.strip() for c in x.split("│")] for x in lines if "│" in x]
    assert worse_by_experiment(body) == {"sim-triton": True, "sim-fa3": False, "sim-flashinfer-mla": False,
                                         "sim-flashmla": False, sim.CRASHES: False}
    assert "[2] sim-triton: changed: patch set sim-triton-tune" in text.replace("\n", " ")


# ============================================================================ the command


def test_against_takes_one_run_and_no_baseline_or_plot(store):
    from typer.testing import CliRunner

    from harness.cli.app import app

    sim.two_nights(store)
    for args, says in ((["night-a", "night-b"], "compares one run with another"),
                       (["night-b", "--baseline", "sim-fa3"], "--baseline does not go with --against"),
                       (["night-b", "--plot", "x.png"], "--plot does not go with --against"),
                       (["night-b", "--metric", "nope"], "unknown metric 'nope'"),
                       (["nope"], "no run 'nope'")):
        r = CliRunner().invoke(app, ["compare", *args, "--against", "night-a", "--results-dir", str(store.root)])
        assert r.exit_code == 2 and says in r.output, (args, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit)
    r = CliRunner().invoke(app, ["compare", "night-b", "--against", "night-a", "--results-dir", str(store.root),
                                 "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.output)["b"] == "night-b"
