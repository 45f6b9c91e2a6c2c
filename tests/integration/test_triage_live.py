"""Triage live, through the agent: the simulated target's failure modes come back as verdicts in the
record, and a server that prints a fatal error and then hangs is called a crash within seconds."""

from __future__ import annotations

import subprocess

import pytest

from harness.experiments.config import HostConfig
from harness.experiments.resolve import resolve_file
from harness.results.store import ResultsStore, load_record, new_run_id
from harness.run.runner import run_attempt
from harness.sim import init_target
from tests.conftest import PATCHES, marked_processes, tree_snapshot, write_experiment

pytestmark = pytest.mark.integration


@pytest.fixture
def local_host(sim_target, tmp_path):
    return "sim-local", HostConfig(address="local", repo=str(sim_target.repo), python=str(sim_target.python), gpus=8,
                                   arch="sm90", workdir=str(tmp_path / "work"))


def run(tmp_path, host, f, patches_dir=PATCHES):
    name, cfg = host
    out = run_attempt(resolve_file(f, patches_dir), name, cfg, ResultsStore(tmp_path / "results"),
                      new_run_id())
    return load_record(out.directory / "record.json")


@pytest.mark.parametrize("server, category, phase, key", [
    ({"mem_fraction_static": 0.96}, "oom", "cuda-graph-capture", "CUDA out of memory"),
    ({"attention_backend": "trtllm_mla"}, "unsupported-arch", "args", "only supported on Blackwell"),
    ({"attention_backend": "cutlass_mla"}, "config-error", "args", "invalid choice"),
])
def test_sim_failure_modes_come_back_classified(tmp_path, local_host, sim_target, port, server, category, phase,
                                                key):
    f = write_experiment(tmp_path, "failing", port, server=server, expect="crash")
    rec = run(tmp_path, local_host, f)
    assert rec.status == "crashed"
    assert (rec.verdict.category, rec.verdict.phase) == (category, phase)
    assert key in rec.verdict.key_line
    assert rec.verdict.hint
    assert rec.timings["wait_s"] < 15


def test_fatal_line_then_hang_is_a_crash_after_the_grace_period(tmp_path, local_host, sim_target, port):
    # A patch that makes a scheduler log its exception but never tell the parent (so nothing exits).
    scratch = init_target(tmp_path / "scratch")
    sched = scratch.repo / "python/sglang/srt/managers/scheduler.py"
    text = sched.read_text()
    assert "os.kill(parent_pid, signal.SIGQUIT)" in text
    sched.write_text(text.replace("os.kill(parent_pid, signal.SIGQUIT)", "pass  # the parent is never told"))
    diff = subprocess.run(["git", "-C", str(scratch.repo), "diff"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "patches" / "silent_child_failure").mkdir(parents=True)
    (tmp_path / "patches" / "silent_child_failure" / "0001.patch").write_text(diff)

    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "error-then-hang", port, patches=["silent_child_failure"],
                         server={"mem_fraction_static": 0.96}, expect="crash",
                         timeouts={"ready": 120, "no_progress": 120, "fatal_grace": 1.0, "stop_grace": 3})
    rec = run(tmp_path, local_host, f, tmp_path / "patches")
    assert rec.status == "crashed"
    assert rec.verdict.category == "oom"
    assert rec.server is not None
    assert rec.server.exit_code is None or (rec.server.stop is not None and rec.server.stop.signal in ("TERM", "KILL"))
    assert rec.timings["wait_s"] < 15, "called a crash by the fatal line, not by the 120 s timeouts"
    assert tree_snapshot(sim_target.repo) == before
    assert marked_processes(rec.run_id) == []
