"""The environment fingerprint on the host (harness/agent/stack.py): the probe the target's Python runs, what
nvidia-smi prints, and what is None when a piece is missing — never an error."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.agent import stack
from harness.common.protocol import Final, GpuClocks, StackFacts, decode, encode
from harness.results import schemas
from harness.results.schemas import Record

# nvidia-smi --query-gpu=<stack.SMI_FIELDS> --format=csv,noheader,nounits on an H200 (driver 580), idle.
H200_ROW = ("0, GPU-7c3f1d2e-9a4b-4c5d-8e6f-0a1b2c3d4e5f, NVIDIA H200, 9.0, 143771, 0, 580.159.03, 345, 3201, "
            "1980, 3201, 1980, 3201, 1980, 3201, 700.00, 700.00, Enabled")
SMI_VERSION = ("NVIDIA-SMI version  : 580.159.03\nNVML version        : 580.159\nDRIVER version      : 580.159.03\n"
               "CUDA Version        : 13.0\n")


def probe_output(**over: object) -> str:
    data = {"dists": {"torch": "2.9.1+cu128", "Triton": "3.5.1", "sglang_kernel": "0.4.1",
                      "flashinfer_python": "0.7.2", "sglang": "0.5.23", "numpy": "2.2.6"},
            "torch_version_py": {"__version__": "2.9.1+cu128", "cuda": "12.8", "debug": False}}
    data.update(over)
    return json.dumps(data)


# ============================================================================ parsing (pure)


def test_the_probes_answer_names_each_package_by_its_normalised_name():
    facts = stack.stack_from_probe(probe_output())
    assert (facts.torch, facts.cuda_runtime, facts.sgl_kernel, facts.triton, facts.flashinfer, facts.sglang) == (
        "2.9.1+cu128", "12.8", "0.4.1", "3.5.1", "0.7.2", "0.5.23")
    assert facts.packages == 6
    lines = "\n".join(sorted(["torch==2.9.1+cu128", "triton==3.5.1", "sglang-kernel==0.4.1",
                              "flashinfer-python==0.7.2", "sglang==0.5.23", "numpy==2.2.6"]))
    assert facts.packages_sha256 == hashlib.sha256(lines.encode()).hexdigest()


def test_sgl_kernel_under_its_old_name_and_a_torch_without_metadata():
    facts = stack.stack_from_probe(probe_output(dists={"sgl-kernel": "0.3.9.post2"}))
    assert facts.sgl_kernel == "0.3.9.post2" and facts.packages == 1
    assert facts.torch == "2.9.1+cu128"  # from torch/version.py: a source build on the path has no metadata


def test_the_packages_hash_ignores_order_and_spelling_but_not_versions():
    a = stack.packages_sha256({"Torch": "2.9.1", "flashinfer_python": "0.7.2"})
    assert a == stack.packages_sha256({"flashinfer-python": "0.7.2", "torch": "2.9.1"})
    assert a != stack.packages_sha256({"flashinfer-python": "0.7.3", "torch": "2.9.1"})


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", json.dumps({"dists": "x", "torch_version_py": 3}),
                                  json.dumps({"dists": None, "torch_version_py": None})])
def test_a_probe_that_answered_nothing_usable_leaves_every_fact_unknown(text):
    assert stack.stack_from_probe(text) == StackFacts()


def test_a_cpu_torch_has_no_cuda_runtime():
    facts = stack.stack_from_probe(probe_output(torch_version_py={"__version__": "2.9.1+cpu", "cuda": None}))
    assert facts.cuda_runtime is None and facts.torch == "2.9.1+cu128"  # the metadata's version is the one kept


def test_an_nvidia_smi_row_becomes_clocks_and_power():
    row = dict(zip(stack.SMI_FIELDS, (x.strip() for x in H200_ROW.split(","))))
    assert stack.clocks_from_row(row) == GpuClocks(
        index="0", sm_mhz=345, mem_mhz=3201, sm_max_mhz=1980, mem_max_mhz=3201, app_sm_mhz=1980, app_mem_mhz=3201,
        default_app_sm_mhz=1980, default_app_mem_mhz=3201, power_limit_w=700.0, default_power_limit_w=700.0,
        persistence_mode=True)
    assert stack.driver_of([row, dict(row, index="1")]) == "580.159.03"


def test_what_a_gpu_does_not_show_is_unknown():
    row = {"index": "3", "clocks.applications.graphics": "[N/A]", "enforced.power.limit": "[Not Supported]",
           "persistence_mode": "Disabled", "clocks.sm": "1755"}
    clocks = stack.clocks_from_row(row)
    assert (clocks.app_sm_mhz, clocks.power_limit_w, clocks.persistence_mode, clocks.sm_mhz) == (None, None, False,
                                                                                                 1755)
    assert stack.driver_of([{"driver_version": "[N/A]"}]) is None


def test_the_drivers_cuda_version_from_either_text():
    assert stack.cuda_from_version_text(SMI_VERSION) == "13.0"
    assert stack.cuda_from_version_text("| NVIDIA-SMI 570.133.20   Driver Version: 570.133.20   CUDA Version: 12.8  |") \
        == "12.8"
    assert stack.cuda_from_version_text("Invalid combination of input arguments.") is None


# ============================================================================ the probe in a real Python


def fake_site(root: Path) -> Path:
    """A site folder as pip leaves it: three distributions' metadata and torch/version.py (typed, as torch's)."""
    for name, version in (("torch", "2.9.1+cu128"), ("sglang_kernel", "0.4.1"), ("Flashinfer_Python", "0.7.2")):
        info = root / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    (root / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.9.1+cu128'\n"
                                                "cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n")
    return root


PYTHONS = [sys.executable] + [p for p in ("/root/.pyenv/versions/3.8.18/bin/python3", shutil.which("python3.8"))
                              if p and os.access(p, os.X_OK)][:1]


@pytest.mark.parametrize("python", PYTHONS)
def test_the_probe_reads_the_servers_packages_without_importing_torch(tmp_path, python):
    site = fake_site(tmp_path / "site")
    facts = stack.probe_packages(python, {"PYTHONPATH": str(site), "PATH": os.environ["PATH"]})
    assert (facts.torch, facts.cuda_runtime, facts.sgl_kernel, facts.flashinfer) == ("2.9.1+cu128", "12.8", "0.4.1",
                                                                                    "0.7.2")
    assert facts.packages is not None and facts.packages >= 3 and facts.packages_sha256


def test_no_python_or_a_broken_one_gives_unknown_packages(tmp_path):
    assert stack.probe_packages(str(tmp_path / "no-such-python"), {}) == StackFacts()
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    assert stack.probe_packages(str(broken), {}) == StackFacts()


# ============================================================================ nvidia-smi on the host


def fake_smi(folder: Path, script: str) -> dict[str, str]:
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\nimport sys\n{script}\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_one_query_lists_the_gpus_and_their_clocks(tmp_path):
    second = H200_ROW.replace("0, GPU-7c3f", "1, GPU-99ff", 1).replace("700.00, 700.00", "500.00, 700.00")
    env = fake_smi(tmp_path / "bin", f"""
calls = open({str(tmp_path / 'calls')!r}, 'a'); calls.write(' '.join(sys.argv[1:]) + '\\n')
if sys.argv[1] == '--version':
    print({SMI_VERSION!r})
else:
    print({H200_ROW!r}); print({second!r})""")
    facts, gpus = stack.read_stack(None, {**env, "CUDA_VISIBLE_DEVICES": "1"})
    assert [g.index for g in gpus or []] == ["1"] and gpus[0].name == "NVIDIA H200"
    assert [(c.index, c.power_limit_w) for c in facts.gpus or []] == [("1", 500.0)]
    assert (facts.driver, facts.cuda_driver) == ("580.159.03", "13.0")
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and calls[0].startswith("--query-gpu=" + ",".join(stack.SMI_FIELDS))


def test_an_older_nvidia_smi_that_refuses_a_field_still_lists_the_gpus(tmp_path):
    env = fake_smi(tmp_path / "bin", """
if 'clocks.default_applications.memory' in sys.argv[1]:
    print('Field "clocks.default_applications.memory" is not a valid field to query.'); sys.exit(2)
print('0, GPU-1, Tesla V100-SXM2-32GB, 7.0, 32768, 0')""")
    facts, gpus = stack.read_stack(None, env)
    assert [(g.index, g.name) for g in gpus or []] == [("0", "Tesla V100-SXM2-32GB")]
    assert facts == StackFacts()


def test_without_nvidia_smi_nothing_is_known_and_nothing_fails(tmp_path):
    facts, gpus = stack.read_stack(str(tmp_path / "no-python"), {"PATH": str(tmp_path)})
    assert facts == StackFacts() and gpus is None


# ============================================================================ on the wire and in the record


def test_the_fingerprint_crosses_the_link_and_the_record_keeps_every_field():
    facts = stack.stack_from_probe(probe_output())
    facts.gpus = [GpuClocks(index="0", power_limit_w=700.0, persistence_mode=True)]
    final = Final()
    final.preflight.stack = facts
    assert decode(json.loads(json.dumps(encode(final)))) == final
    # the record keeps the agent's own dataclass: every field, read back as it was written
    rec = Record(run_id="r", experiment="e", attempt="01", host="h", status="ok",
                 provenance=schemas.Provenance(stack=facts))
    back = Record.model_validate_json(rec.to_json())
    assert back.provenance.stack == facts
    assert json.loads(rec.to_json())["provenance"]["stack"] == dataclasses.asdict(facts)


def test_a_record_from_before_the_fingerprint_still_loads():
    old = {"schema": 1, "run_id": "r", "experiment": "e", "attempt": "01", "host": "h", "status": "ok",
           "provenance": {"server_version": "0.5.23", "flashinfer_version": "0.7.2"}}
    rec = Record.model_validate_json(json.dumps(old))
    assert rec.provenance.stack is None


def test_a_hosts_words_in_the_fingerprint_are_kept_escaped():
    rec = Record(run_id="r", experiment="e", attempt="01", host="h", status="ok",
                 provenance={"stack": {"torch": "2.9.1\x1b]52;c;evil\x07", "gpus": [{"index": "0"}]}})
    assert rec.provenance.stack is not None and "\x1b" not in (rec.provenance.stack.torch or "")


def test_the_agents_preflight_fills_the_fingerprint_of_the_simulated_target(tmp_path):
    """In-process, the agent's own preflight (apply-revert mode) on the simulated target: its stack and its
    FlashInfer version come from the probe of the server's Python, its GPUs from the same nvidia-smi call."""
    from harness.agent.attempt import Attempt
    from harness.sim import init_target
    from tests.unit.test_agent_tree import RecordingLink, spec_for

    target = init_target(tmp_path / "sglang", arch="sm90", gpus=2)
    final = Attempt(spec_for(target.repo, tmp_path, [], argv=[str(target.python)]), RecordingLink()).run()
    assert final.status == "ok", final.error
    facts = final.preflight.stack
    assert facts is not None and final.preflight.flashinfer_version == facts.flashinfer == "0.7.2"
    assert (facts.torch, facts.cuda_runtime, facts.sgl_kernel, facts.triton, facts.sglang) == (
        "2.9.1+cu128", "12.8", "0.4.1", "3.5.1", "0.5.23")
    assert (facts.driver, facts.cuda_driver) == ("570.133.20", "12.8") and facts.packages_sha256
    assert [(c.index, c.power_limit_w, c.app_sm_mhz, c.default_app_sm_mhz) for c in facts.gpus or []] == [
        ("0", 700.0, 1980, 1980), ("1", 700.0, 1980, 1980)]
    assert [g.name for g in final.preflight.gpus or []] == ["NVIDIA H200"] * 2
    # The sim's torch is metadata and version.py only: importing it fails as a missing torch would.
    p = subprocess.run([str(target.python), "-c", "import torch"], capture_output=True, text=True)
    assert p.returncode != 0 and "ImportError" in p.stderr
