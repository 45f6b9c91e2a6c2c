"""The simulated MLA backend patch sets: sim_flashinfer_mla_gather_cast and sim_custom_fp8_mla.

Each applies to a fresh simulated target (its `*.patch` with `git apply`, its `files/` copied in),
compiles, reverts to a clean tree, and serves; the cost model the server reports orders the
FP8-KV decode step: stock FlashInfer MLA (whole-pool cast) > gather-cast > custom_fp8_mla.
"""

from __future__ import annotations

import ast
import json
import os
import py_compile
import signal
import subprocess
import sys

import pytest
import yaml

from harness.experiments.patchsets import Variant, load_patch_set
from harness.sim import init_target
from tests.sim.simproc import PATCHES, READY_LINE, free_port, http, server_args

GATHER_CAST = "sim_flashinfer_mla_gather_cast"
CUSTOM = "sim_custom_fp8_mla"
PATCH_SETS = (GATHER_CAST, CUSTOM)
FAST = {"SGLANG_SIM_STARTUP_SCALE": "0"}
GLM5_TP8 = ("--tp", "8", "--mem-fraction-static", "0.85")
BATCH_SIZES = ("1", "8", "32")
REFERENCE_SEQ_LEN = 1024


def git(repo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def apply_patch_set(repo, name: str) -> Variant:
    """What the harness ships: the patches in order with `git apply`, then the files/ tree (the sim's
    patch sets have one variant, for the simulated target)."""
    (patch_set,) = load_patch_set(PATCHES, name).variants
    for patch in patch_set.patches:
        path = patch_set.folder / patch.name
        git(repo, "apply", "--check", str(path))
        git(repo, "apply", str(path))
    for new in patch_set.files:
        dest = repo / new.path
        assert not dest.exists(), f"{new.path} already exists in the target"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(new.content)
    return patch_set


def revert_patch_set(repo, patch_set: Variant) -> None:
    for new in patch_set.files:
        (repo / new.path).unlink()
    for patch in reversed(patch_set.patches):
        git(repo, "apply", "-R", str(patch_set.folder / patch.name))


def touched_paths(repo, patch_set: Variant) -> list[str]:
    paths = [new.path for new in patch_set.files]
    for patch in patch_set.patches:
        out = git(repo, "apply", "--numstat", str(patch_set.folder / patch.name))
        paths += [line.split("\t")[2] for line in out.splitlines()]
    return paths


# --------------------------------------------------------------------------- the patch sets as files


@pytest.mark.parametrize("name", PATCH_SETS)
def test_patch_set_layout(name):
    folder = PATCHES / name
    meta = yaml.safe_load((folder / "patchset.yaml").read_text())
    assert set(meta) == {"description", "applies_to"}
    assert meta["applies_to"] == "harness-sim" and meta["description"].strip()
    assert (folder / "README.md").is_file()
    patch_set = load_patch_set(PATCHES, name)  # the harness's own loader accepts it
    (variant,) = patch_set.variants  # one variant, for the simulated target
    assert variant.applies_to == ("harness-sim",)
    assert variant.patches and variant.files
    for patch in variant.patches:
        assert patch.text.startswith("diff --git a/python/sglang/"), patch.name
    for new in variant.files:
        assert new.path.startswith("python/sglang/srt/layers/attention/") and new.path.endswith(".py")


@pytest.mark.parametrize("name", PATCH_SETS)
def test_patch_set_applies_compiles_and_reverts(fresh_target, tmp_path, name):
    repo = fresh_target.repo
    head = git(repo, "rev-parse", "HEAD")
    patch_set = apply_patch_set(repo, name)
    status = git(repo, "status", "--porcelain").splitlines()
    assert status and all(line[:2] in (" M", "??") for line in status), status
    stdlib = set(sys.stdlib_module_names)
    for rel in touched_paths(repo, patch_set):
        path = repo / rel
        py_compile.compile(str(path), cfile=str(tmp_path / "check.pyc"), doraise=True)
        # Like the rest of the simulated checkout: Python 3.8 syntax, standard library only.
        tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] in stdlib | {"sglang"}, (rel, node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in stdlib | {"sglang"}, (rel, alias.name)
    # The patched checkout imports (in the target's own interpreter).
    modules = [rel[len("python/"):-len(".py")].replace("/", ".") for rel in touched_paths(repo, patch_set)]
    subprocess.run(
        [str(fresh_target.python), "-c", "import " + ", ".join(modules)],
        cwd=repo, check=True, capture_output=True, timeout=30,
    )
    revert_patch_set(repo, patch_set)
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "diff", "HEAD") == "" and git(repo, "rev-parse", "HEAD") == head


def test_both_patch_sets_apply_together(fresh_target):
    repo = fresh_target.repo
    first = apply_patch_set(repo, GATHER_CAST)
    second = apply_patch_set(repo, CUSTOM)
    subprocess.run(
        [str(fresh_target.python), "-c", "import sglang.srt.layers.attention.custom_fp8_mla_backend"],
        cwd=repo, check=True, capture_output=True, timeout=30,
    )
    revert_patch_set(repo, second)
    revert_patch_set(repo, first)
    assert git(repo, "status", "--porcelain") == ""


def test_custom_fp8_mla_is_an_invalid_choice_without_its_patch(shared_target, launch):
    proc = launch(shared_target, *server_args(free_port(), "--attention-backend", "custom_fp8_mla"))
    assert proc.wait_exit(timeout=30) == 2
    assert "argument --attention-backend: invalid choice: 'custom_fp8_mla'" in proc.output


# --------------------------------------------------------------------------- one attention layer, in process

# Runs in a target's interpreter: one attention layer of GLM-5 (TP8) through a named backend over a
# 100k-token pool, for a prefill (extend) batch and a decode batch; prints the simulated seconds by kind.
LAYER_PROBE = """
import json, sys
from sglang._sim import torch
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.attention.attention_registry import create_attention_backend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

class Runner(object):
    def __init__(self, kv_dtype):
        self.model_config = c = ModelConfig("zai-org/GLM-5-NVFP4")
        self.device, self.dtype, self.kv_cache_dtype = "cuda", c.dtype, kv_dtype
        self.tp_size, self.page_size, self.use_mla_backend, self.req_to_token_pool_size = 8, 1, True, 64
        self.token_to_kv_pool = MLATokenToKVPool(100000, 1, kv_dtype, c.kv_lora_rank, c.qk_rope_head_dim, 1)

def layer_cost(name, kv_dtype, batch):
    runner = Runner(kv_dtype)
    backend = create_attention_backend(name, runner)
    c, n = runner.model_config, batch.num_tokens
    heads = c.num_attention_heads // runner.tp_size
    head_dim = c.kv_lora_rank + c.qk_rope_head_dim
    layer = RadixAttention(heads, head_dim, c.scaling, 1, 0, v_head_dim=c.kv_lora_rank)
    q = torch.empty((n, heads, c.kv_lora_rank), dtype=runner.dtype)
    q_rope = torch.empty((n, heads, c.qk_rope_head_dim), dtype=runner.dtype)
    k = torch.empty((n, 1, c.kv_lora_rank), dtype=runner.dtype)
    k_rope = torch.empty((n, 1, c.qk_rope_head_dim), dtype=runner.dtype)
    torch.cuda.meter.reset()
    backend.init_forward_metadata(batch)
    backend.forward(q, k, k, layer, batch, q_rope=q_rope, k_rope=k_rope)
    return torch.cuda.meter.snapshot()

extend = ForwardBatch.extend([3000, 1000], [1000, 1000])  # 4000 KV rows, 2000 of them new
decode = ForwardBatch.decode([3000, 1000])
print(json.dumps({name: {
    "extend_fp8": layer_cost(name, torch.float8_e4m3fn, extend),
    "decode_fp8": layer_cost(name, torch.float8_e4m3fn, decode),
    "decode_bf16": layer_cost(name, torch.bfloat16, decode),
} for name in sys.argv[1:]}))
"""
PROBE_POOL_ROWS = 100000 + 1
PROBE_BATCH_ROWS = 4000


def probe_layers(target, *backends: str, env: dict[str, str] | None = None) -> dict:
    p = subprocess.run(
        [str(target.python), "-c", LAYER_PROBE, *backends], cwd=target.repo, capture_output=True, text=True,
        timeout=60, env={**os.environ, "SGLANG_SIM_STARTUP_SCALE": "0", **(env or {})},
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_gather_cast_prefill_and_decode_only_touch_used_rows(shared_target, tmp_path):
    gather_target = init_target(tmp_path / "gather-cast", arch="sm90", gpus=8)
    apply_patch_set(gather_target.repo, GATHER_CAST)
    stock = probe_layers(shared_target, "flashinfer", "flashmla")
    patched = probe_layers(gather_target, "flashinfer", "flashmla")
    for step in ("extend_fp8", "decode_fp8"):
        # Same BF16 kernel over the same rows; the cast moves 4000 rows instead of the 100001-row pool.
        assert patched["flashinfer"][step]["attention"] == stock["flashinfer"][step]["attention"]
        assert patched["flashinfer"][step]["cast"] == pytest.approx(
            stock["flashinfer"][step]["cast"] * PROBE_BATCH_ROWS / PROBE_POOL_ROWS, rel=1e-4
        )
    # A BF16 pool: nothing to gather (only the stock, negligible int64 -> int32 seq_lens cast).
    assert patched["flashinfer"]["decode_bf16"] == stock["flashinfer"]["decode_bf16"]
    # Subclasses with kernels of their own (FlashMLA, which reuses FlashInfer MLA prefill) keep stock.
    assert patched["flashmla"] == stock["flashmla"]
    # SGLANG_FLASHINFER_MLA_GATHER_CAST=0 restores the full-pool cast.
    off = probe_layers(gather_target, "flashinfer", env={"SGLANG_FLASHINFER_MLA_GATHER_CAST": "0"})
    assert off["flashinfer"] == stock["flashinfer"]


def test_custom_fp8_mla_decode_reads_fp8_rows_and_prefill_is_flashinfer(tmp_path):
    custom_target = init_target(tmp_path / "custom", arch="sm90", gpus=8)
    apply_patch_set(custom_target.repo, CUSTOM)
    costs = probe_layers(custom_target, "custom_fp8_mla", "flashinfer")
    custom, flashinfer = costs["custom_fp8_mla"], costs["flashinfer"]
    assert set(custom["decode_fp8"]) == {"attention"}  # no cast, no copy
    # FP8 rows (half the bytes of BF16), one launch: faster than FlashInfer MLA even on a BF16 pool.
    assert custom["decode_fp8"]["attention"] < custom["decode_bf16"]["attention"]
    assert custom["decode_bf16"]["attention"] < flashinfer["decode_bf16"]["attention"]
    # Prefill is FlashInfer MLA's, with its full-pool cast (as in the real plan).
    assert custom["extend_fp8"] == flashinfer["extend_fp8"]


# --------------------------------------------------------------------------- serving and the cost model


def serve_and_measure(launch, target, *args: str) -> dict:
    """Start a server, check it serves, return its sim_cost_model; stop it (SIGTERM, exit 0)."""
    port = free_port()
    proc = launch(target, *server_args(port, *args), env=FAST)
    proc.wait_for_line(READY_LINE, timeout=30)
    body = {"text": "The capital city of France is", "sampling_params": {"max_new_tokens": 4}}
    status, text = http(port, "POST", "/generate", body)
    assert status == 200 and json.loads(text)["meta_info"]["completion_tokens"] == 4, text
    status, text = http(port, "GET", "/server_info")
    assert status == 200
    model = json.loads(text)["internal_states"][0]["sim_cost_model"]
    assert "error" not in model["decode_step_ms"], model
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=10) == 0
    return model


@pytest.mark.parametrize("arch", ["sm90", "sm120"])
def test_fp8_decode_step_orders_stock_gather_cast_custom(tmp_path, launch, arch):
    # One checkout per patch set: stock FlashInfer MLA runs on the custom one (it leaves FlashInfer alone).
    gather_target = init_target(tmp_path / "gather-cast", arch=arch, gpus=8)
    custom_target = init_target(tmp_path / "custom", arch=arch, gpus=8)
    apply_patch_set(gather_target.repo, GATHER_CAST)
    apply_patch_set(custom_target.repo, CUSTOM)
    fp8 = (*GLM5_TP8, "--kv-cache-dtype", "fp8_e4m3")
    stock_model = serve_and_measure(launch, custom_target, *fp8, "--attention-backend", "flashinfer")
    stock = stock_model["decode_step_ms"]
    custom = serve_and_measure(launch, custom_target, *fp8, "--attention-backend", "custom_fp8_mla")
    custom = custom["decode_step_ms"]
    gather = serve_and_measure(launch, gather_target, *fp8, "--attention-backend", "flashinfer")
    gather = gather["decode_step_ms"]
    bf16 = serve_and_measure(
        launch, gather_target, *GLM5_TP8, "--kv-cache-dtype", "auto", "--attention-backend", "flashinfer"
    )["decode_step_ms"]
    pool_rows = stock_model["kv_pool_tokens"] + 1  # page_size 1: one spare page

    for bs in BATCH_SIZES:
        # The order the sweep must show, at every reference batch size.
        assert stock[bs]["total"] > gather[bs]["total"] > custom[bs]["total"], (bs, stock, gather, custom)
        # Gather-cast still pays for copying the used rows: slower than a BF16 cache...
        assert gather[bs]["total"] > bf16[bs]["total"]
        # ...and custom_fp8_mla is the fastest FlashInfer-family decode (no cast, FP8 bytes).
        assert custom[bs]["total"] < bf16[bs]["total"]
        assert custom[bs].get("cast", 0) == 0
        assert custom[bs]["attention"] < bf16[bs]["attention"] < gather[bs]["attention"] + gather[bs]["cast"]
        # Gather-cast's cast moves the rows the batch reads (bs x 1024 tokens), not the pool:
        # the stock whole-pool cast scaled by used rows / pool rows.
        rows = int(bs) * REFERENCE_SEQ_LEN
        assert gather[bs]["cast"] == pytest.approx(stock[bs]["cast"] * rows / pool_rows, rel=0.02)
        assert stock[bs]["cast"] > 10 * gather[bs]["cast"]
    # Clearly faster than stock: the whole-pool cast dominated the step.
    assert stock["1"]["total"] > 2 * gather["1"]["total"]
    # Stock's cast does not depend on the batch (the whole pool); gather-cast's grows with it.
    assert stock["1"]["cast"] == pytest.approx(stock["32"]["cast"], rel=1e-4)
    assert gather["32"]["cast"] == pytest.approx(32 * gather["1"]["cast"], rel=0.02)
