"""Preflight knows the target: backends the installed SGLang does not accept, GPU archs a backend's
kernels do not support and too few GPUs are refused before anything changes — unless the experiment
says `expect: crash`, in which case it runs and the record says whether the crash happened."""

from __future__ import annotations

import pytest

from harness.config import HostConfig, load_experiment
from harness.resolve import resolve
from harness.results import ResultsStore, load_record, new_run_id
from harness.runner import run_attempt
from harness.sim import init_target
from tests.conftest import PATCHES, tree_snapshot, write_experiment

pytestmark = pytest.mark.integration


def host_for(target, tmp_path, arch=None):
    return "sim", HostConfig(address="local", repo=str(target.repo), python=str(target.python), gpus=8, arch=arch,
                             workdir=str(tmp_path / "work"))


def run(tmp_path, host, f):
    name, cfg = host
    out = run_attempt(resolve(load_experiment(f), f, PATCHES), name, cfg, ResultsStore(tmp_path / "results"),
                      new_run_id())
    return load_record(out.directory / "record.json")


def test_cutlass_mla_refused_on_sglang_0523_and_hopper(tmp_path, sim_target, port):
    before = tree_snapshot(sim_target.repo)
    rec = run(tmp_path, host_for(sim_target, tmp_path), write_experiment(tmp_path, "cutlass", port,
                                                                         backend="cutlass_mla"))
    assert rec.status == "preflight-failed"
    assert "does not accept --attention-backend cutlass_mla" in rec.error
    assert "needs sm100/sm103" in rec.error and "sm90" in rec.error and "NVIDIA H200" in rec.error
    assert rec.provenance.arch == "sm90"  # detected through nvidia-smi
    assert tree_snapshot(sim_target.repo) == before


def test_expect_crash_runs_anyway_and_records_whether_it_happened(tmp_path, sim_target, port):
    rec = run(tmp_path, host_for(sim_target, tmp_path),
              write_experiment(tmp_path, "cutlass", port, backend="cutlass_mla", expect="crash"))
    assert rec.status == "crashed" and rec.expectation_met is True
    assert rec.verdict.category == "config-error" and "invalid choice" in rec.verdict.key_line
    assert any("cutlass_mla" in w for w in rec.preflight_warnings)


def test_trtllm_mla_refused_on_hopper_by_arch(tmp_path, sim_target, port):
    rec = run(tmp_path, host_for(sim_target, tmp_path), write_experiment(tmp_path, "trtllm", port,
                                                                         backend="trtllm_mla"))
    assert rec.status == "preflight-failed"
    assert "backend trtllm_mla needs sm100" in rec.error and "does not accept" not in rec.error


def test_arch_from_hosts_yaml_overrides_detection(tmp_path, sim_target, port):
    # The inventory says sm100: trust it (the user knows the box), so trtllm_mla is let through;
    # the simulated H200 then refuses it itself, in the server's own words.
    rec = run(tmp_path, host_for(sim_target, tmp_path, arch="sm100"),
              write_experiment(tmp_path, "trtllm", port, backend="trtllm_mla"))
    assert rec.status == "crashed" and rec.verdict.category == "unsupported-arch"


def test_too_few_gpus_refused(tmp_path, sim_target, port):
    rec = run(tmp_path, host_for(sim_target, tmp_path),
              write_experiment(tmp_path, "big", port, backend="flashinfer-mla", server={"tp": 16}))
    assert rec.status == "preflight-failed" and "needs 16 GPUs" in rec.error and "shows 8" in rec.error


def test_trtllm_mla_on_blackwell_sm120_reproduces_the_seeds_next_failure(tmp_path, port):
    target = init_target(tmp_path / "sm120", arch="sm120")
    rec = run(tmp_path, host_for(target, tmp_path), write_experiment(tmp_path, "trtllm", port, backend="trtllm_mla"))
    assert rec.status == "crashed"
    assert rec.verdict.category == "unsupported-arch" and "Unsupported architecture" in rec.verdict.key_line
