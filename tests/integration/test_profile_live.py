"""Profiles through the agent: SGLang's /start_profile under a short load, traces fetched beside the
record and summarised; on the simulated target the stock FP8 path is dominated by the copy and the
gather-cast path is not. A hung server gets a py-spy stack dump."""

from __future__ import annotations

import shutil

import pytest

from harness.config import HostConfig, load_experiment
from harness.resolve import resolve
from harness.results import ResultsStore, load_record, new_run_id
from harness.runner import run_attempt
from tests.conftest import PATCHES, write_experiment

pytestmark = pytest.mark.integration
BENCH = [{"name": "bs1", "num_prompts": 2, "input_len": 32, "output_len": 16, "max_concurrency": 1}]


def run(tmp_path, sim_target, f):
    host = HostConfig(address="local", repo=str(sim_target.repo), python=str(sim_target.python), gpus=8,
                      workdir=str(tmp_path / "work"))
    out = run_attempt(resolve(load_experiment(f), f, PATCHES), "sim", host, ResultsStore(tmp_path / "results"),
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
