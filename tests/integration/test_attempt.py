"""One attempt end to end over a real sshd (and the local transport) against a simulated SGLang target.

Every test checks the promises that matter to a user of a shared GPU box: the tree is byte-identical
afterwards (checked independently of the agent), no process of the attempt is left, and the record
says what happened.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.experiments.files import read_experiment_file
from harness.experiments.resolve import resolve
from harness.results.store import ResultsStore, load_record, new_run_id
from harness.run.runner import run_attempt
from tests.conftest import PATCHES, marked_processes, tree_snapshot, write_experiment

pytestmark = pytest.mark.integration

BENCH = [{"name": "decode-bs1", "num_prompts": 3, "input_len": 32, "output_len": 16, "max_concurrency": 1},
         {"name": "conc4", "num_prompts": 8, "input_len": 32, "output_len": 16, "max_concurrency": 4}]


def attempt(tmp_path: Path, host, exp_file: Path):
    name, cfg = host
    exp = read_experiment_file(exp_file).experiment
    run_id = new_run_id()
    outcome = run_attempt(resolve(exp, exp_file, PATCHES), name, cfg, ResultsStore(tmp_path / "results"), run_id)
    # What is on disk is what counts: reload the record the harness wrote.
    return load_record(outcome.directory / "record.json"), outcome.directory, run_id


def assert_host_as_found(repo: Path, before: dict, run_id: str, record) -> None:
    assert tree_snapshot(repo) == before, "the target tree changed"
    assert record.revert is not None and record.revert.verified
    assert record.revert.tree_before == record.revert.tree_after
    assert marked_processes(run_id) == [], "a process of the attempt is still alive"
    assert not (repo / ".git" / "harness" / "journal.json").exists()


def test_stock_run_benchmarks_and_leaves_tree_identical(tmp_path, host, sim_target, port):
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "stock", port, backend="flashinfer-mla", bench=BENCH)
    rec, d, run_id = attempt(tmp_path, host, f)
    assert rec.status == "ok", rec.error
    for case in ("decode-bs1", "conc4"):
        m = rec.metrics[case]
        assert m.output_throughput > 0 and m.median_itl_ms > 0
        assert m.completed == (3 if case == "decode-bs1" else 8)
        rows = [json.loads(x) for x in (d / f"bench-{case}.jsonl").read_text().splitlines()]
        assert rows[-1]["output_throughput"] == m.output_throughput  # parsed from SGLang's JSONL
    assert rec.metrics["conc4"].output_throughput > rec.metrics["decode-bs1"].output_throughput
    assert "The server is fired up and ready to roll!" in (d / "server.log").read_text()
    assert rec.provenance.server_version == "0.5.23" and rec.provenance.base_commit
    stack = rec.provenance.stack  # the environment fingerprint, from the sim's Python and nvidia-smi
    assert stack is not None and (stack.torch, stack.cuda_runtime, stack.sgl_kernel, stack.triton, stack.sglang,
                                  stack.driver) == ("2.9.1+cu128", "12.8", "0.4.1", "3.5.1", "0.5.23", "570.133.20")
    assert stack.packages_sha256 and [g.power_limit_w for g in stack.gpus or []] == [700.0] * 8
    assert rec.timings["ready_s"] > 0 and rec.timings["bench_s"] > 0
    assert_host_as_found(sim_target.repo, before, run_id, rec)


def test_fp8_into_mla_plan_crash_is_reported_fast(tmp_path, host, sim_target, port):
    # The seed's patch on the default simulated target (SM90, FlashInfer 0.7.2, as SGLang 0.5.23 ships it):
    # FP8 MLA exists there, so the plan builds and run() refuses the missing dequant scales. (The seed's own
    # static_assert needs FlashInfer <= 0.6.13: tests/sim/test_sim_flashinfer.py.)
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "fp8-into-mla", port, backend="flashinfer-mla",
                         patches=["sim_fp8_kv_into_mla_plan"], expect="crash", bench=BENCH,
                         timeouts={"ready": 120, "no_progress": 120})
    rec, d, run_id = attempt(tmp_path, host, f)
    assert rec.status == "crashed"
    assert rec.verdict.category == "python-exception"
    assert rec.verdict.key_line == ("ValueError: Exactly one of ckv_scale or ckv_scale_arr is required when "
                                    "kv_data_type is FP8.")
    assert rec.verdict.phase == "cuda-graph-capture"
    assert rec.provenance.flashinfer_version == "0.7.2"
    assert rec.server is not None and rec.server.exit_code in (137, -9)
    assert rec.detect_latency_s is not None and rec.detect_latency_s < 1.0
    assert rec.timings["wait_s"] < 20, "the verdict must come long before the 120 s ready timeout"
    assert rec.expectation_met is True
    log = (d / "server.log").read_text()
    assert "Received sigquit from a child proc" in log
    assert_host_as_found(sim_target.repo, before, run_id, rec)


def test_hang_is_hung_at_ready_timeout_and_server_killed(tmp_path, host, sim_target, port):
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "hang", port, backend="flashinfer-mla", patches=["sim_nccl_init_hang"],
                         expect="hang", timeouts={"ready": 4, "no_progress": 60, "stop_grace": 2})
    rec, d, run_id = attempt(tmp_path, host, f)
    assert rec.status == "hung"
    assert rec.verdict.category == "hung"
    assert 3.5 <= rec.timings["wait_s"] < 15  # the 4 s ready timeout, measured from launch
    assert rec.server is not None and rec.server.stop is not None
    assert rec.server.stop.signal in ("TERM", "KILL") and rec.server.stop.left == []
    assert_host_as_found(sim_target.repo, before, run_id, rec)


def test_patch_that_does_not_apply_changes_nothing(tmp_path, host, sim_target, port):
    bad = tmp_path / "patches" / "bad"
    bad.mkdir(parents=True)
    good = next((PATCHES / "sim_fp8_kv_into_mla_plan").glob("*.patch")).read_text()
    (bad / "0001-good.patch").write_text(good)
    (bad / "0002-stale.patch").write_text(
        "--- a/python/sglang/srt/server_args.py\n+++ b/python/sglang/srt/server_args.py\n"
        "@@ -1,1 +1,1 @@\n-this line is not in the file\n+replacement\n")
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "bad-patch", port, patches=["bad"])
    name, cfg = host
    exp = read_experiment_file(f).experiment
    run_id = new_run_id()
    out = run_attempt(resolve(exp, f, tmp_path / "patches"), name, cfg, ResultsStore(tmp_path / "results"), run_id)
    rec = load_record(out.directory / "record.json")
    assert rec.status == "apply-failed"
    assert "0002" in rec.error and "server_args.py" in rec.error
    assert rec.revert is None  # nothing was applied, so nothing needed reverting
    assert tree_snapshot(sim_target.repo) == before
    assert not (out.directory / "server.log").exists()


def test_dirty_tree_is_refused_listing_the_files(tmp_path, host, sim_target, port):
    edited = sim_target.repo / "python" / "sglang" / "srt" / "server_args.py"
    edited.write_text(edited.read_text() + "\n# my local experiment\n")
    (sim_target.repo / "notes.txt").write_text("my notes\n")
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "stock", port, backend="flashinfer-mla")
    rec, d, run_id = attempt(tmp_path, host, f)
    assert rec.status == "preflight-failed"
    assert sorted(rec.dirty) == ["notes.txt", "python/sglang/srt/server_args.py"]
    assert "not clean" in rec.error and "notes.txt" in rec.error
    assert tree_snapshot(sim_target.repo) == before


def test_port_in_use_is_refused(tmp_path, host, sim_target, port):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    try:
        f = write_experiment(tmp_path, "stock", port, backend="flashinfer-mla")
        rec, d, run_id = attempt(tmp_path, host, f)
    finally:
        s.close()
    assert rec.status == "preflight-failed" and f"port {port}" in rec.error
