"""The simulated FlashInfer's version: how it is set and seen, and what FP8 MLA does in each version.

The facts are the team's FlashInfer and FlashMLA measurements (in harness/sim/README.md; measured on an
H200) and FlashInfer's own checks in plan()/run() from 0.6.14 on; harness/sim/README.md has the table.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from harness.agent.stack import probe_packages
from harness.sim import DEFAULT_FLASHINFER_VERSION, init_target
from tests.sim.simproc import FP8_PATCH, READY_LINE, free_port, http, server_args

FAST = {"SGLANG_SIM_STARTUP_SCALE": "0"}
STATIC_ASSERT = 'mma.cuh(523): error: static assertion failed with "DType must be 16bit floating data type"'
WGMMA = 'has no member "op"'
NEEDS_SCALES_072 = "ValueError: Exactly one of ckv_scale or ckv_scale_arr is required when kv_data_type is FP8."
NEEDS_SCALES_0614 = "ValueError: ckv_scale and kpe_scale are required when kv_data_type is FP8."
FA3_ONLY = "ValueError: FP8 kv_data_type for MLA is only supported with the fa3 backend on SM90, got backend='fa2'."

# One plan() + run() of the MLA wrapper, as SGLang's FlashInfer MLA backend calls it, in the target's Python.
PROBE = r"""
import json, sys
from sglang._sim import torch
from sglang._sim.flashinfer import BatchMLAPagedAttentionWrapper, __version__
kv, backend, scales = getattr(torch, sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
w = BatchMLAPagedAttentionWrapper(torch.empty(16, dtype=torch.uint8), backend=backend)
i32 = torch.int32
step = "plan"
try:
    w.plan(torch.tensor([0, 1], dtype=i32), torch.tensor([0, 4], dtype=i32), torch.empty(4, dtype=i32),
           torch.tensor([4], dtype=i32), 16, 512, 64, 1, False, 0.1, torch.bfloat16, kv)
    step = "run"
    w.run(torch.empty((1, 16, 512), dtype=torch.bfloat16), torch.empty((1, 16, 64), dtype=torch.bfloat16),
          torch.empty((5, 1, 512), dtype=kv), torch.empty((5, 1, 64), dtype=kv), **scales)
    out = "ok " + w._backend
except Exception as e:
    out = "%s %s: %s" % (step, type(e).__name__, e)
print(json.dumps({"version": __version__, "out": out}))
"""
SCALES = {"ckv_scale": 1.0, "kpe_scale": 1.0}


@pytest.fixture(scope="module")
def probe_target(tmp_path_factory):
    return init_target(tmp_path_factory.mktemp("fi") / "target", arch="sm90", gpus=1)


def probe(target, tmp_path, arch, version, kv="float8_e4m3fn", backend="auto", scales=None):
    """Run PROBE against simulated GPUs of `arch` with FlashInfer `version` (a state dir of its own)."""
    state = tmp_path / ("%s-%s" % (arch, version))
    state.mkdir(exist_ok=True)
    cap = {"sm90": "9.0", "sm100": "10.0", "sm120": "12.0"}[arch]
    (state / "gpus.json").write_text(
        json.dumps({"arch": arch, "count": 1, "compute_cap": cap, "flashinfer_version": version})
    )
    env = dict(os.environ, SGLANG_SIM_STATE_DIR=str(state), SGLANG_SIM_STARTUP_SCALE="0")
    env.pop("PYTHONPATH", None)
    p = subprocess.run(
        [str(target.python), "-c", PROBE, kv, backend, json.dumps(scales or {})],
        cwd=target.repo, env=env, capture_output=True, text=True, timeout=60,
    )
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["version"] == version
    return result["out"]


# (arch, version, backend, KV dtype, scales given) -> what happens; "auto" is fa3 on SM90, fa2 elsewhere.
CASES = [
    # SM90: FP8 e4m3 works with fa3 from 0.6.14 and with fa2 from 0.6.18, when run() gets the scales.
    ("sm90", "0.7.2", "auto", "float8_e4m3fn", True, "ok fa3"),
    ("sm90", "0.7.2", "fa2", "float8_e4m3fn", True, "ok fa2"),
    ("sm90", "0.6.18", "fa2", "float8_e4m3fn", True, "ok fa2"),
    ("sm90", "0.6.14", "auto", "float8_e4m3fn", True, "ok fa3"),
    ("sm90", "0.7.2", "auto", "float8_e4m3fn", False, "run " + NEEDS_SCALES_072),
    ("sm90", "0.7.2", "fa2", "float8_e4m3fn", False, "run " + NEEDS_SCALES_072),
    ("sm90", "0.6.14", "auto", "float8_e4m3fn", False, "run " + NEEDS_SCALES_0614),
    ("sm90", "0.6.17", "fa2", "float8_e4m3fn", True, "plan " + FA3_ONLY),
    # <= 0.6.13: no FP8 MLA kernel; the JIT build fails (fa2: the seed's static_assert; fa3: no WGMMA).
    ("sm90", "0.6.13", "fa2", "float8_e4m3fn", False, STATIC_ASSERT),
    ("sm90", "0.6.13", "fa2", "float8_e4m3fn", True, "plan RuntimeError: Ninja build failed."),
    ("sm90", "0.6.13", "auto", "float8_e4m3fn", False, WGMMA),
    ("sm120", "0.6.13", "auto", "float8_e4m3fn", False, STATIC_ASSERT),
    # e5m2 is not covered by the FP8 path: still the static_assert on new versions.
    ("sm90", "0.7.2", "auto", "float8_e5m2", True, STATIC_ASSERT),
    ("sm90", "0.7.2", "fa2", "float8_e5m2", False, STATIC_ASSERT),
    # FP8 MLA is SM90 only: newer versions refuse it in plan(), before any build.
    ("sm120", "0.7.2", "auto", "float8_e4m3fn", True,
     "plan ValueError: FP8 kv_data_type for MLA requires an SM90 (Hopper) device, got SM120."),
    ("sm100", "0.6.18", "auto", "float8_e4m3fn", True,
     "plan ValueError: FP8 kv_data_type for MLA requires an SM90 (Hopper) device, got SM100."),
    ("sm120", "0.6.14", "auto", "float8_e4m3fn", True, "plan " + FA3_ONLY),
    # 16-bit KV works everywhere, and scales are refused for it from 0.6.14 on.
    ("sm120", "0.6.13", "auto", "bfloat16", False, "ok fa2"),
    ("sm90", "0.7.2", "auto", "bfloat16", False, "ok fa3"),
    ("sm90", "0.7.2", "auto", "bfloat16", True,
     "run ValueError: ckv_scale / kpe_scale are only valid when kv_data_type is FP8."),
]


@pytest.mark.parametrize("arch,version,backend,kv,scales,expected", CASES)
def test_fp8_mla_plan_and_run_follow_the_flashinfer_version(probe_target, tmp_path, arch, version, backend, kv,
                                                            scales, expected):
    out = probe(probe_target, tmp_path, arch, version, kv, backend, SCALES if scales else None)
    assert expected in out, out
    if expected in (STATIC_ASSERT, WGMMA):
        assert out.startswith("plan RuntimeError: Ninja build failed. Ninja output:")
        assert "ninja: build stopped: subcommand failed." in out
        source = "attention/mla.cuh" if expected == STATIC_ASSERT else "attention/mla_hopper.cuh"
        assert source in out


def test_run_scale_arguments_follow_the_version(probe_target, tmp_path):
    # ckv_scale_arr (per-token scales) came with 0.6.18; 0.7.2 wants exactly one of the two, plus kpe_scale.
    both = {"ckv_scale": 1.0, "ckv_scale_arr": 1.0, "kpe_scale": 1.0}
    assert probe(probe_target, tmp_path, "sm90", "0.7.2", scales=both) == "run " + NEEDS_SCALES_072
    assert probe(probe_target, tmp_path, "sm90", "0.7.2", scales={"ckv_scale": 1.0}) == (
        "run ValueError: kpe_scale is required when kv_data_type is FP8.")
    assert probe(probe_target, tmp_path, "sm90", "0.7.2", scales={"ckv_scale_arr": 1.0, "kpe_scale": 1.0}) == "ok fa3"
    assert probe(probe_target, tmp_path, "sm90", "0.6.14", scales={"ckv_scale_arr": 1.0, "kpe_scale": 1.0}) == (
        "run TypeError: run() got an unexpected keyword argument 'ckv_scale_arr'")
    assert probe(probe_target, tmp_path, "sm90", "0.7.2", scales={"ckv_scale": 0.0, "kpe_scale": 1.0}) == (
        "run ValueError: ckv_scale must be a finite positive value, got 0.0")
    # Before 0.6.14 run() has no scale arguments at all.
    assert probe(probe_target, tmp_path, "sm90", "0.6.13", kv="bfloat16", scales=SCALES) == (
        "run TypeError: run() got an unexpected keyword argument 'ckv_scale'")


def test_init_records_the_version_where_the_agent_and_the_sim_read_it(tmp_path):
    target = init_target(tmp_path / "t", arch="sm90", gpus=1, flashinfer_version="0.6.13")
    facts = json.loads((target.repo / ".venv" / "sglang-sim" / "gpus.json").read_text())
    assert facts["flashinfer_version"] == "0.6.13"
    # What the harness agent runs on a host: importlib.metadata in the server's Python.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert probe_packages(str(target.python), env).flashinfer == "0.6.13"
    infos = list((target.repo / ".venv").glob("lib/python*/site-packages/flashinfer_python-*.dist-info"))
    assert [p.name for p in infos] == ["flashinfer_python-0.6.13.dist-info"]
    out = subprocess.run([str(target.python), "-c", "import sglang._sim.flashinfer as f; print(f.__version__)"],
                         cwd=target.repo, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "0.6.13", out.stderr
    # The checkout itself does not depend on the version: same template, same commit.
    default = init_target(tmp_path / "d", arch="sm90", gpus=1)
    head = ["git", "rev-parse", "HEAD"]
    assert subprocess.run(head, cwd=target.repo, capture_output=True, text=True).stdout == \
        subprocess.run(head, cwd=default.repo, capture_output=True, text=True).stdout
    assert probe_packages(str(default.python), env).flashinfer == DEFAULT_FLASHINFER_VERSION == "0.7.2"


def test_init_refuses_a_bad_version(tmp_path):
    for bad in ("", "latest", "0.7", "v0.7.2", "0.7.2 ", "0.7.2/x"):
        with pytest.raises(ValueError, match="flashinfer_version"):
            init_target(tmp_path / "t", flashinfer_version=bad)
        assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
    init_target(tmp_path / "rc", flashinfer_version="0.6.18rc7")


def test_cli_init_takes_the_version(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    p = subprocess.run([sys.executable, "-m", "harness", "sim", "init", str(tmp_path / "t"), "--arch", "sm120",
                        "--gpus", "2", "--flashinfer-version", "0.6.13"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FlashInfer 0.6.13" in p.stdout
    facts = json.loads((tmp_path / "t" / ".venv" / "sglang-sim" / "gpus.json").read_text())
    assert (facts["arch"], facts["count"], facts["flashinfer_version"]) == ("sm120", 2, "0.6.13")
    bad = subprocess.run([sys.executable, "-m", "harness", "sim", "init", str(tmp_path / "u"),
                          "--flashinfer-version", "latest"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "flashinfer_version" in (bad.stdout + bad.stderr)


# ------------------------------------------------------------------ the seed's patch on a server

def launch_fp8(target, launch, *extra):
    subprocess.run(["git", "apply", str(FP8_PATCH)], cwd=target.repo, check=True)
    port = free_port()
    proc = launch(target, *server_args(port, "--tp", "2", "--attention-backend", "flashinfer",
                                       "--kv-cache-dtype", "fp8_e4m3", *extra), env=FAST)
    return proc, port


def test_seed_patch_on_default_flashinfer_needs_the_scales(fresh_target, launch):
    """0.7.2 on SM90 (the default): the plan takes FP8, run() without scales raises -- not the static_assert."""
    proc, _ = launch_fp8(fresh_target, launch)
    assert proc.wait_exit(timeout=30) == -signal.SIGKILL
    out = proc.output
    assert NEEDS_SCALES_072 in out
    assert "static assertion" not in out and "Ninja" not in out
    assert "Scheduler hit an exception" in out and "decode_wrapper.run(" in out
    # SGLang's capture wraps only RuntimeErrors in "Capture cuda graph failed": a ValueError passes as it is.
    assert "Capture cuda graph failed" not in out
    assert "Received sigquit from a child process. It usually means the child failed." in out
    assert READY_LINE not in out


def test_seed_crash_as_on_its_host(tmp_path, launch):
    """The seed ran on an SM120 GPU with a FlashInfer of 0.6.13 or older: there the static_assert is what it saw."""
    target = init_target(tmp_path / "seed", arch="sm120", gpus=2, flashinfer_version="0.6.13")
    proc, _ = launch_fp8(target, launch)
    assert proc.wait_exit(timeout=30) == -signal.SIGKILL
    out = proc.output
    assert 'static_assert(sizeof(DType) == 2, "DType must be 16bit floating data type");' in out
    assert STATIC_ASSERT in out and "DType=__nv_fp8_e4m3" in out and "attention/mla.cuh" in out
    assert "Exception: Capture cuda graph failed: Ninja build failed." in out
    assert "ninja: build stopped: subcommand failed." in out


def test_seed_patch_with_scales_serves_fp8_without_the_cast(fresh_target, launch):
    """What flashinfer_mla_fp8 does for the real target: the same plan plus ckv_scale/kpe_scale in run()."""
    backend = fresh_target.repo / "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
    subprocess.run(["git", "apply", str(FP8_PATCH)], cwd=fresh_target.repo, check=True)
    text = backend.read_text()
    assert text.count("            out=o,\n        )") == 2
    backend.write_text(text.replace("            out=o,\n        )",
                                    "            out=o,\n            ckv_scale=1.0,\n            kpe_scale=1.0,\n        )"))
    port = free_port()
    proc = launch(fresh_target, *server_args(port, "--attention-backend", "flashinfer", "--kv-cache-dtype",
                                             "fp8_e4m3"), env=FAST)
    proc.wait_for_line(READY_LINE, timeout=30)
    cost = json.loads(http(port, "GET", "/server_info")[1])["internal_states"][0]["sim_cost_model"]["decode_step_ms"]
    assert cost["1"]["cast"] == 0 and cost["1"]["attention"] > 0
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=10) == 0
