"""Preflight knows the target: backends the installed SGLang does not accept, GPU archs a backend's
kernels do not support and too few GPUs are refused before anything changes — unless the experiment
says `expect: crash`, in which case it runs and the record says whether the crash happened."""

from __future__ import annotations

import pytest

from harness.experiments.config import HostConfig
from harness.experiments.resolve import resolve_file
from harness.results.store import ResultsStore, load_record, new_run_id
from harness.run.runner import run_attempt
from harness.sim import init_target
from tests.conftest import PATCHES, tree_snapshot, write_experiment

pytestmark = pytest.mark.integration


def host_for(target, tmp_path, arch=None):
    return "sim", HostConfig(address="local", repo=str(target.repo), python=str(target.python), gpus=8, arch=arch,
                             workdir=str(tmp_path / "work"))


def run(tmp_path, host, f):
    name, cfg = host
    out = run_attempt(resolve_file(f, PATCHES), name, cfg, ResultsStore(tmp_path / "results"),
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


def sim_fp8_mla_patch_set(tmp_path):
    """The simulated target's analogue of flashinfer_mla_fp8: the seed's FP8 plan plus the dequant scales in
    run() (made here with git from the seed's patch; a patch set for the harness-sim target)."""
    import subprocess

    scratch = init_target(tmp_path / "scratch", arch="sm90", gpus=1)
    subprocess.run(["git", "apply", str(PATCHES / "sim_fp8_kv_into_mla_plan" /
                                        "0001-pass-fp8-kv-dtype-to-mla-plan.patch")], cwd=scratch.repo, check=True)
    backend = scratch.repo / "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
    backend.write_text(backend.read_text().replace(
        "            out=o,\n        )", "            out=o,\n            ckv_scale=1.0,\n            kpe_scale=1.0,\n        )"))
    diff = subprocess.run(["git", "diff"], cwd=scratch.repo, check=True, capture_output=True, text=True).stdout
    folder = tmp_path / "patches" / "sim_fp8_mla"
    folder.mkdir(parents=True)
    (folder / "0001-fp8-plan-and-scales.patch").write_text(diff)
    (folder / "patchset.yaml").write_text("description: FP8 KV into the MLA plan, scales to run()\n"
                                          "applies_to: harness-sim\n")
    (folder / "README.md").write_text("test patch set\n")
    return folder.parent


def run_with(tmp_path, host, f, patches):
    name, cfg = host
    out = run_attempt(resolve_file(f, patches), name, cfg, ResultsStore(tmp_path / "results"),
                      new_run_id())
    return load_record(out.directory / "record.json")


@pytest.mark.parametrize("version,status", [("0.6.13", "preflight-failed"), ("0.7.2", "ok")])
def test_flashinfer_floor_read_from_the_sim_venv(tmp_path, port, version, status):
    # The agent reads the server Python's flashinfer-python version (importlib.metadata): the simulated
    # target's venv carries the version it was made with, so the FP8 MLA backend's floor (0.6.14 on sm90) is
    # checked before anything changes; above it, FP8 plan + scales serve.
    patches = sim_fp8_mla_patch_set(tmp_path)
    target = init_target(tmp_path / "target", arch="sm90", flashinfer_version=version)
    before = tree_snapshot(target.repo)
    rec = run_with(tmp_path, host_for(target, tmp_path),
                   write_experiment(tmp_path, "fi-fp8", port, backend="flashinfer-mla-fp8",
                                    backend_patches={"flashinfer-mla-fp8": ["sim_fp8_mla"]}), patches)
    assert rec.status == status, rec.error
    assert rec.provenance.flashinfer_version == version
    if status == "preflight-failed":
        assert "needs FlashInfer >= 0.6.14 on sm90; this host's FlashInfer is 0.6.13" in rec.error
    assert tree_snapshot(target.repo) == before


def test_seed_patch_on_the_seeds_kind_of_host_gives_the_static_assert(tmp_path, port):
    # SM120 with FlashInfer <= 0.6.13: no FP8 MLA kernel, so the FA2 template meets the FP8 KV dtype.
    target = init_target(tmp_path / "seed", arch="sm120", gpus=2, flashinfer_version="0.6.13")
    rec = run(tmp_path, host_for(target, tmp_path),
              write_experiment(tmp_path, "seed", port, backend="flashinfer-mla", patches=["sim_fp8_kv_into_mla_plan"],
                               expect="crash", server={"tp": 2, "kv_cache_dtype": "fp8_e4m3"}))
    assert rec.status == "crashed" and rec.expectation_met is True
    assert rec.verdict.category == "jit-compile-error"
    assert 'mma.cuh(523): error: static assertion failed with "DType must be 16bit floating data type"' in \
        rec.verdict.key_line
    assert rec.provenance.flashinfer_version == "0.6.13"
