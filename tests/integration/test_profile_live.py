"""Profiles through the agent: SGLang's /start_profile under a short load, traces fetched beside the
record and summarised; on the simulated target the stock FP8 path is dominated by the copy and the
gather-cast path is not. Every way the profile failed on the real server ends within the profile
timeout, keeps the benchmark's status and results, and says why. A hung server gets a py-spy stack dump."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from harness.errors import Interrupted
from harness.experiments.config import HostConfig
from harness.experiments.resolve import resolve_file
from harness.results.store import ResultsStore, load_record, new_run_id
from harness.run.runner import run_attempt
from tests.conftest import PATCHES, marked_processes, tree_snapshot, wait_until, write_experiment

pytestmark = pytest.mark.integration
BENCH = [{"name": "bs1", "num_prompts": 2, "input_len": 32, "output_len": 16, "max_concurrency": 1}]


def run(tmp_path, sim_target, f):
    host = HostConfig(address="local", repo=str(sim_target.repo), python=str(sim_target.python), gpus=8,
                      workdir=str(tmp_path / "work"))
    out = run_attempt(resolve_file(f, PATCHES), "sim", host, ResultsStore(tmp_path / "results"),
                      new_run_id())
    return load_record(out.directory / "record.json"), out.directory


@pytest.mark.parametrize("backend, top_is_copy", [("flashinfer-mla", True), ("flashinfer-mla-gather-cast", False)])
def test_profile_names_the_op_that_eats_the_step(tmp_path, sim_target, port, backend, top_is_copy):
    f = write_experiment(tmp_path, "prof", port, backend=backend, bench=BENCH, profile={"steps": 3},
                         backend_patches={"flashinfer-mla-gather-cast": ["sim_flashinfer_mla_gather_cast"]},
                         server={"tp": 2})
    rec, d = run(tmp_path, sim_target, f)
    assert rec.status == "ok", rec.error
    prof = rec.profile
    assert prof is not None
    assert sorted(p.split("/")[-1].split("-TP-")[1] for p in prof.files) == ["0.trace.json.gz",
                                                                                  "1.trace.json.gz"]
    assert (d / prof.trace).is_file()
    top = prof.top[0]
    if top_is_copy:
        assert top.name == "aten::copy_" and top.share > 0.3
    else:
        assert top.name != "aten::copy_"
        assert all(o.name != "aten::copy_" or o.share < 0.05 for o in prof.top)
    assert prof.steps >= 3


@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is not installed (pip install py-spy)")
def test_hung_server_gets_a_stack_dump(tmp_path, sim_target, port):
    f = write_experiment(tmp_path, "hang", port, backend="flashinfer-mla", patches=["sim_nccl_init_hang"],
                         expect="hang", timeouts={"ready": 60, "no_progress": 3, "stop_grace": 3})
    rec, d = run(tmp_path, sim_target, f)
    assert rec.status == "hung"
    dump = (d / "stack-dump.txt").read_text()
    assert "Thread" in dump and "=== pid" in dump


# ============================================================================ the ways the live profile failed
# (docs/reference/sglang-0.5.16-profiler.md; on the H200 the trace never came, the attempt turned bench-failed
# and a controller terminated in this stage lost its finished benchmark)


def test_profile_records_exactly_its_steps_under_sglangs_own_names(tmp_path, sim_target, port):
    f = write_experiment(tmp_path, "steps", port, backend="flashinfer-mla", bench=BENCH, profile={"steps": 4})
    rec, d = run(tmp_path, sim_target, f)
    assert rec.status == "ok" and rec.profile_error is None, rec.profile_error
    assert rec.profile is not None and rec.profile.steps == 4
    assert re.fullmatch(r"profile/\d+\.\d+-TP-0\.trace\.json\.gz", rec.profile.trace)  # SGLang's own name
    log = (d / "server.log").read_text()
    assert log.index("Profiling starts") < log.index("Stop profiling...") < log.index("Profiling done")
    assert "with profile id" in log and rec.timings["profile_s"] < 20


def test_load_that_ends_before_the_steps_gets_its_profile_from_stop_profile(tmp_path, sim_target, port):
    f = write_experiment(tmp_path, "short", port, backend="flashinfer-mla", bench=BENCH, profile={"steps": 10000})
    rec, d = run(tmp_path, sim_target, f)
    assert rec.status == "ok" and rec.profile_error is None, rec.profile_error
    assert rec.profile is not None and 0 < rec.profile.steps < 10000  # what ran until /stop_profile


def test_no_trace_in_time_keeps_the_bench_status_with_profile_error(tmp_path, sim_target, port):
    """The H200 run: "Stop profiling..." logged, then no trace file. The stage ends at its own timeout, the
    attempt keeps the benchmark's status and results, the error says where the profile got stuck."""
    f = write_experiment(tmp_path, "noprof", port, backend="flashinfer-mla", bench=BENCH,
                         profile={"steps": 3, "timeout": 6}, server={"env": {"SGLANG_SIM_PROFILE_EXPORT_S": "3600"}})
    rec, d = run(tmp_path, sim_target, f)
    assert rec.status == "ok" and rec.error is None, rec.error
    assert rec.metrics["bs1"].median_itl_ms > 0
    assert rec.profile is None and rec.profile_error is not None
    assert "Stop profiling..." in rec.profile_error and "6.0s" in rec.profile_error
    assert 6 <= rec.timings["profile_s"] < 9
    assert rec.revert is not None and rec.revert.verified


def test_start_profile_that_never_answers_ends_the_stage_in_time(tmp_path, sim_target, port):
    f = write_experiment(tmp_path, "blocked", port, backend="flashinfer-mla", bench=BENCH,
                         profile={"steps": 3, "timeout": 5}, server={"env": {"SGLANG_SIM_PROFILE_STALL_S": "3600"}})
    rec, d = run(tmp_path, sim_target, f)
    assert rec.status == "ok" and rec.metrics["bs1"].median_itl_ms > 0
    assert rec.profile_error is not None and "/start_profile got no answer" in rec.profile_error
    assert 5 <= rec.timings["profile_s"] < 8
    assert rec.revert is not None and rec.revert.verified


def test_cancel_during_the_profile_keeps_the_finished_benchmark(tmp_path, sim_target, port):
    f = write_experiment(tmp_path, "cancel", port, backend="flashinfer-mla", bench=BENCH,
                         profile={"steps": 3, "timeout": 120}, server={"env": {"SGLANG_SIM_PROFILE_STALL_S": "3600"}})
    cancel = threading.Event()
    host = HostConfig(address="local", repo=str(sim_target.repo), python=str(sim_target.python), gpus=8,
                      workdir=str(tmp_path / "work"))
    store = ResultsStore(tmp_path / "results")
    t0 = time.monotonic()
    with pytest.raises(Interrupted):
        run_attempt(resolve_file(f, PATCHES), "sim", host, store, new_run_id(),
                    reporter=OnStage("profile", cancel.set), cancel=cancel)
    assert time.monotonic() - t0 < 60
    rec = load_record(next((tmp_path / "results").rglob("record.json")))
    assert rec.status == "ok" and rec.is_final() and rec.metrics["bs1"].median_itl_ms > 0
    assert rec.abort_reason == "controller-abort" and rec.profile_error.startswith("the profile stage was stopped")
    assert rec.revert is not None and rec.revert.verified
    assert not list((tmp_path / "results").rglob("record.partial.json"))


def test_controller_killed_during_the_profile_loses_no_finished_case(tmp_path, sim_target, port):
    """The first H200 run: the controller was terminated in the profile stage, and its two finished cases
    went with it. Now they are on disk as a provisional record the moment they arrive."""
    before = tree_snapshot(sim_target.repo)
    bench = BENCH + [{"name": "conc2", "num_prompts": 4, "input_len": 32, "output_len": 16, "max_concurrency": 2}]
    f = write_experiment(tmp_path, "killed", port, backend="flashinfer-mla", bench=bench,
                         profile={"steps": 3, "timeout": 120}, server={"env": {"SGLANG_SIM_PROFILE_STALL_S": "3600"}})
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": {
        "address": "local", "repo": str(sim_target.repo), "python": str(sim_target.python), "gpus": 8,
        "workdir": str(tmp_path / "work")}}}))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))  # this checkout's harness
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(f), "--results-dir", str(tmp_path / "results"),
                             "--patches-dir", str(PATCHES)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if line.rstrip().endswith(": profile"):
                break
        else:
            raise AssertionError("never reached the profile stage:\n" + "".join(seen))
        assert wait_until(lambda: any((tmp_path / "results").rglob("record.partial.json")), 10) is not None
        time.sleep(0.5)  # the checkpoint of the stage change itself
    finally:
        proc.kill()
        proc.wait(10)
    assert not list((tmp_path / "results").rglob("record.json"))
    (run_id,) = ResultsStore(tmp_path / "results").run_ids()
    (rec,) = ResultsStore(tmp_path / "results").iter_records(run_id)
    assert rec.provisional and rec.status == "ok" and rec.is_final()
    assert sorted(rec.metrics) == ["bs1", "conc2"] and rec.metrics["conc2"].median_itl_ms > 0
    assert "during the profile stage" in rec.error
    # The agent's dead man's switch: the controller's end stops the server and reverts the tree.
    assert wait_until(lambda: tree_snapshot(sim_target.repo) == before and not marked_processes(run_id), 60)


class OnStage:
    """A reporter that calls `action` when the attempt enters `stage`."""

    def __init__(self, stage, action):
        self.stage_name, self.action = stage, action

    def stage(self, label, stage):
        if stage == self.stage_name:
            self.action()

    def note(self, label, message):
        pass
