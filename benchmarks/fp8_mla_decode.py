"""Benchmark: MLA decode attention over an FP8 KV cache on one GPU (written for the H200).

Four implementations, same shapes, same data:

* ``full-cast``     the seed's path: cast the whole KV pool (at least 495,000 tokens) to BF16
                    with PyTorch (``pool.to(bfloat16)``, as SGLang's FlashInfer MLA backend does),
                    then BF16 attention over the rows the batch uses;
* ``gather-cast``   gather only the used rows, cast them to BF16, BF16 attention over them;
* ``ours``          ``kernels.fp8_mla_decode`` reading the FP8 rows directly;
* ``sglang-triton`` SGLang 0.5.23's ``decode_attention_fwd`` with the FP8 cache, loaded from the
                    PyPI wheel at run time (``--wheel``), called the way its Triton backend calls it
                    on an H200 (PDL on, ``max_kv_splits`` 256, splits from its own
                    ``get_num_kv_splits_triton``).

The BF16 attention in the two cast paths is our kernel compiled for BF16 KV (FlashInfer is not on
the benchmark machine); in ``full-cast`` the cast is 90-99% of the time anyway.

Timing: each implementation is captured in a CUDA graph (as SGLang runs decode) and the graph is
replayed; the median of per-replay CUDA-event times is reported. A graph runs several "layers",
each over its own random KV rows, so that the KV read per replay is several times the 60 MB L2 and
the numbers are DRAM numbers, not cache numbers; time is per layer. ``fp8_tbps`` is always the FP8
bytes of the used rows (batch * context * 576) over the time, for every implementation, so rows
compare directly; ``copy_tbps`` is a device-to-device copy measured in the same run (bytes read +
written). Usage::

    python benchmarks/fp8_mla_decode.py --wheel .sglang-wheel/sglang-0.5.23-*.whl --out DIR [--sweep]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
import types
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    from kernels.fp8_mla_decode import (
        D_KV,
        D_NOPE,
        DecodeConfig,
        default_config,
        mla_decode,
        reference_mla_decode,
    )
except ImportError as _exc:  # --report needs neither triton nor a GPU
    D_KV, D_NOPE = 576, 512
    _KERNELS_MISSING: ImportError | None = _exc
else:
    _KERNELS_MISSING = None

SEED_POOL_TOKENS = 495_000
L2_FLUSH_BYTES = 256 << 20  # KV bytes per replay to stay well outside the 60 MiB L2
MAX_LAYERS = 128
# SGLang's Triton kernel forms byte offsets as int32 (slot * 576): a pool past 2**31 bytes makes
# it fault (seen: illegal address at 8.4M tokens). Its real per-layer pools stay far below this.
MAX_POOL_TOKENS = (2**31 - 1) // D_KV - 1024
SM_SCALE = 1.0 / math.sqrt(192 + 64)  # GLM-5: qk_nope_head_dim 192 + qk_rope_head_dim 64
SGLANG_MAX_KV_SPLITS = 256  # 0.5.23 triton backend, MLA on 132 SMs: max(8, min(npow2(132), npow2(ctx/32)))
# ours = the CUDA kernel on Hopper (mla_decode's default there), ours-triton = the portable Triton kernel.
IMPLS = ("ours", "ours-triton", "flashmla-fp8", "flashinfer-fp8", "sglang-triton")
OTHER_IMPLS = ("full-cast", "gather-cast")  # the seed's paths (BF16 over a cast), with --impls
HEADS = (8, 16, 64, 128)
SHAPES = [(h, b, c) for h in HEADS for b in (1, 8, 64, 128) for c in (2048, 8192, 32768, 131072)]
PAGE = 64  # FlashMLA's page size; the others read the same slots one by one


# ----------------------------------------------------------------------------------------------
# SGLang's Triton kernel, straight from the wheel


def load_sglang_triton(wheel: str) -> types.SimpleNamespace:
    """Import ``decode_attention.py`` (and the two small modules it needs) from the wheel.

    Only these files are extracted; SGLang's heavy package imports are replaced by stubs that
    give the CUDA answers (not HIP, no gfx tuning, env defaults).
    """
    root = Path(tempfile.mkdtemp(prefix="sglang_wheel_"))
    pkg = "sglang/kernels/ops/attention/"
    with zipfile.ZipFile(wheel) as zf:
        for name in ("decode_attention.py", "score_mod.py", "metadata.py"):
            zf.extract(pkg + name, root)
    packages = ("sglang", "sglang.srt", "sglang.kernels", "sglang.kernels.ops",
                "sglang.kernels.ops.attention")
    for mod in packages:
        m = types.ModuleType(mod)
        m.__path__ = [str(root / mod.replace(".", "/"))]
        sys.modules[mod] = m

    class _Env:
        def __init__(self, default):
            self.default = default

        def get(self):
            return self.default

    environ = types.ModuleType("sglang.srt.environ")
    environ.envs = types.SimpleNamespace(SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=_Env(False),
                                         SGLANG_MLA_DECODE_TUNE=_Env(False),
                                         SGLANG_FORCE_LEAN_GRID_CU_MULT=_Env(1.0))
    utils = types.ModuleType("sglang.srt.utils")
    utils.get_device_core_count = lambda idx=0: torch.cuda.get_device_properties(idx).multi_processor_count
    utils.is_gfx95_supported = utils.is_gfx1250_supported = utils.is_hip = lambda: False
    sys.modules["sglang.srt.environ"] = environ
    sys.modules["sglang.srt.utils"] = utils

    def load(name: str):
        full = "sglang.kernels.ops.attention." + name
        spec = importlib.util.spec_from_file_location(full, root / pkg / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        return module

    load("score_mod")
    decode = load("decode_attention")
    metadata = load("metadata")
    return types.SimpleNamespace(decode_attention_fwd=decode.decode_attention_fwd,
                                 get_num_kv_splits_triton=metadata.get_num_kv_splits_triton,
                                 source=wheel)


def sglang_num_kv_splits(sgl, seq_lens: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Per-row split counts exactly as SGLang's TritonAttnBackend.get_num_kv_splits computes them."""
    import triton

    num_seq = seq_lens.numel()
    out = torch.empty(num_seq, dtype=torch.int32, device=seq_lens.device)
    sgl.get_num_kv_splits_triton[(1,)](
        out, seq_lens, num_seq, 1, num_heads, 1, SGLANG_MAX_KV_SPLITS,
        torch.cuda.get_device_properties(seq_lens.device).multi_processor_count,
        MAX_NUM_SEQ=max(256, triton.next_power_of_2(num_seq)),
    )
    return out


# ----------------------------------------------------------------------------------------------
# Data


@dataclass
class Case:
    heads: int
    batch: int
    context: int
    layers: int
    pool: torch.Tensor  # [P, 1, 576] float8_e4m3fn
    indptr: torch.Tensor  # [B + 1] int32
    indices: list[torch.Tensor]  # one [B * context] int32 per layer: absolute pool slots
    q: torch.Tensor  # [B, H, 576] bf16
    page: int = 1  # rows come in whole pages of this many consecutive slots
    region: int = 0  # slots per layer region: layer l reads only slots [l * region, (l + 1) * region)
    rel_pages: torch.Tensor | None = None  # [B, context / page] int32 pages within a region (all layers)

    @property
    def kv_bytes(self) -> int:
        return self.batch * self.context * D_KV  # FP8 bytes of the used rows, per layer

    def rel_indices(self) -> torch.Tensor:
        """The slots of every layer relative to its region, one by one ([B * context] int32)."""
        offs = torch.arange(self.page, dtype=torch.int32, device=self.pool.device)
        return (self.rel_pages[..., None] * self.page + offs).reshape(-1)

    def region_of(self, layer: int) -> torch.Tensor:
        return self.pool[layer * self.region:(layer + 1) * self.region]


def random_fp8(tokens: int, device: torch.device) -> torch.Tensor:
    """Random e4m3 bytes with the top exponent bit cleared: |x| <= 1.875, never NaN, never all zero."""
    raw = torch.randint(0, 256, (tokens, 1, D_KV), dtype=torch.uint8, device=device)
    raw.bitwise_and_(0xBF)
    return raw.view(torch.float8_e4m3fn)


def make_case(heads: int, batch: int, context: int, device: torch.device, layers: int | None = None,
              page: int = PAGE) -> Case:
    """Random pool and rows, as a paged cache holds them: each row is random whole pages.

    The pool is cut into one region per layer; every layer uses the same page table *within* its
    region (so FlashInfer and FlashMLA plan once and each layer passes its region's view), and all
    implementations read the same bytes. Regions are disjoint while the layers' rows fit under
    MAX_POOL_TOKENS; past that (batch * context > 3.7M tokens, one layer) rows share pages, as
    requests sharing a prefix do."""
    per_layer = batch * context
    if layers is None:
        layers = max(1, min(MAX_LAYERS, math.ceil(L2_FLUSH_BYTES / (per_layer * D_KV))))
    pool_tokens = min(MAX_POOL_TOKENS, max(SEED_POOL_TOKENS, layers * per_layer))
    region = pool_tokens // layers // page * page
    pool = random_fp8(region * layers, device)
    units, needed = region // page, per_layer // page
    perms = [torch.randperm(units, device=device).to(torch.int32) for _ in range(math.ceil(needed / units))]
    rel_pages = torch.cat(perms)[:needed].view(batch, context // page).contiguous()
    offs = torch.arange(page, dtype=torch.int32, device=device)
    indices = [((rel_pages + layer * units)[..., None] * page + offs).reshape(-1) for layer in range(layers)]
    indptr = torch.arange(0, batch + 1, dtype=torch.int32, device=device) * context
    q = torch.randn(batch, heads, D_KV, dtype=torch.bfloat16, device=device)
    return Case(heads, batch, context, layers, pool, indptr, indices, q, page, region, rel_pages)


# ----------------------------------------------------------------------------------------------
# Implementations: each returns a zero-argument callable running one step over all layers


def impl_ours(case: Case, config: DecodeConfig | None = None, impl: str = "auto") -> Callable[[], torch.Tensor]:
    out = torch.empty(case.batch, case.heads, D_NOPE, dtype=torch.bfloat16, device=case.q.device)
    q_nope, q_rope = case.q[..., :D_NOPE], case.q[..., D_NOPE:]

    def step():
        for idx in case.indices:
            mla_decode(q_nope, q_rope, case.pool, case.indptr, idx, SM_SCALE, out=out, config=config, impl=impl)
        return out

    return step


def _bf16_attention(q: torch.Tensor, kv_bf16: torch.Tensor, indptr, idx, out, config) -> None:
    mla_decode(q[..., :D_NOPE], q[..., D_NOPE:], kv_bf16, indptr, idx, SM_SCALE, out=out, config=config)


def impl_full_cast(case: Case) -> Callable[[], torch.Tensor]:
    out = torch.empty(case.batch, case.heads, D_NOPE, dtype=torch.bfloat16, device=case.q.device)
    config = default_config(case.batch, case.heads, case.q.device)

    def step():
        for idx in case.indices:
            kv_bf16 = case.pool.to(torch.bfloat16)  # the seed: every layer, the whole pool
            _bf16_attention(case.q, kv_bf16, case.indptr, idx, out, config)
        return out

    return step


def impl_gather_cast(case: Case) -> Callable[[], torch.Tensor]:
    out = torch.empty(case.batch, case.heads, D_NOPE, dtype=torch.bfloat16, device=case.q.device)
    config = default_config(case.batch, case.heads, case.q.device)
    compact = torch.arange(case.batch * case.context, dtype=torch.int32, device=case.q.device)
    pool_u8 = case.pool.view(torch.uint8)  # index_select on the bytes: fp8 gathers are not everywhere

    def step():
        for idx in case.indices:
            rows = pool_u8.index_select(0, idx).view(torch.float8_e4m3fn)
            _bf16_attention(case.q, rows.to(torch.bfloat16), case.indptr, compact, out, config)
        return out

    return step


def impl_sglang(case: Case, sgl) -> Callable[[], torch.Tensor]:
    dev = case.q.device
    b, h = case.batch, case.heads
    out = torch.empty(b, h, D_NOPE, dtype=torch.bfloat16, device=dev)
    logits = torch.empty(b, h, SGLANG_MAX_KV_SPLITS, D_NOPE, dtype=torch.float32, device=dev)
    lse = torch.empty(b, h, SGLANG_MAX_KV_SPLITS, dtype=torch.float32, device=dev)
    seq_lens = torch.full((b,), case.context, dtype=torch.int32, device=dev)
    splits = sglang_num_kv_splits(sgl, seq_lens, h)  # metadata: computed outside the step, as SGLang does
    v_buffer = case.pool[..., :D_NOPE]

    def step():
        for idx in case.indices:
            sgl.decode_attention_fwd(case.q, case.pool, v_buffer, out, case.indptr, idx, logits, lse,
                                     splits, SGLANG_MAX_KV_SPLITS, SM_SCALE, 1.0, 1.0,
                                     has_mla=True, use_pdl=True)
        return out

    step.splits = splits
    return step


def impl_flashmla(case: Case) -> Callable[[], torch.Tensor]:
    """FlashMLA's dense FP8 decode (``sgl_kernel.flash_mla``), called as SGLang's flashmla backend calls
    it for an FP8 cache: page 64, Q quantized to e4m3 with scale 1 (here once, outside the step; SGLang
    runs ``scaled_fp8_quant`` each step), descales of 1, metadata from ``get_mla_metadata`` once."""
    from sgl_kernel.flash_mla import flash_mla_with_kvcache, get_mla_metadata

    if case.page != 64:
        raise ValueError("FlashMLA needs page size 64")
    dev = case.q.device
    b, h = case.batch, case.heads
    q8 = case.q.to(torch.float8_e4m3fn).view(b, 1, h, D_KV)
    seqlens = torch.full((b,), case.context, dtype=torch.int32, device=dev)
    meta, splits = get_mla_metadata(seqlens, h, 1, is_fp8_kvcache=True)
    ones = torch.ones(1, dtype=torch.float32, device=dev)
    caches = [case.region_of(layer).view(-1, case.page, 1, D_KV) for layer in range(case.layers)]
    result = {}

    def step():
        for cache in caches:
            o, _ = flash_mla_with_kvcache(q=q8, k_cache=cache, block_table=case.rel_pages, cache_seqlens=seqlens,
                                          head_dim_v=D_NOPE, tile_scheduler_metadata=meta, num_splits=splits,
                                          softmax_scale=SM_SCALE, causal=True, descale_q=ones, descale_k=ones)
            result["out"] = o
        return result["out"].view(b, h, D_NOPE)

    return step


def impl_flashinfer(case: Case) -> Callable[[], torch.Tensor]:
    """FlashInfer's MLA (``BatchMLAPagedAttentionWrapper``, backend fa3) planned on FP8 KV, page 1,
    per-tensor scales of 1; planned once (every layer has the same page table in its region)."""
    import flashinfer

    dev = case.q.device
    b, h = case.batch, case.heads
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend="fa3")
    qo_indptr = torch.arange(b + 1, dtype=torch.int32, device=dev)
    kv_len = torch.full((b,), case.context, dtype=torch.int32, device=dev)
    wrapper.plan(qo_indptr, case.indptr, case.rel_indices(), kv_len, h, D_NOPE, D_KV - D_NOPE, 1, False, SM_SCALE,
                 torch.bfloat16, torch.float8_e4m3fn)
    out = torch.empty(b, h, D_NOPE, dtype=torch.bfloat16, device=dev)
    q_nope, q_pe = case.q[..., :D_NOPE], case.q[..., D_NOPE:]
    regions = [case.region_of(layer) for layer in range(case.layers)]

    def step():
        for reg in regions:
            wrapper.run(q_nope, q_pe, reg[..., :D_NOPE], reg[..., D_NOPE:], out=out, ckv_scale=1.0, kpe_scale=1.0)
        return out

    step.keep = ws  # the workspace lives as long as the step
    return step


# ----------------------------------------------------------------------------------------------
# Timing


def time_graph(step: Callable[[], torch.Tensor], replays: int = 15, warmup: int = 3) -> float:
    """Median microseconds of one replay of ``step`` captured in a CUDA graph."""
    step()  # compile and autotune outside the capture
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm the caching allocator on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        step()
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    del graph
    return statistics.median(times)


def copy_bandwidth_tbps(nbytes: int = 2 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written (TB/s)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    return 2 * nbytes / statistics.median(times) / 1e12


def max_rel_error(out: torch.Tensor, case: Case, rows: list[int]) -> float:
    """‖out - ref‖ / ‖ref‖ over a few batch rows of the last layer (fp32 reference)."""
    idx = case.indices[-1]
    worst = 0.0
    for r in rows:
        sub_indptr = torch.tensor([0, case.context], dtype=torch.int32, device=idx.device)
        sub_idx = idx[r * case.context:(r + 1) * case.context]
        ref = reference_mla_decode(case.q[r:r + 1], case.pool, sub_indptr, sub_idx, SM_SCALE)[0]
        worst = max(worst, ((out[r].float() - ref).norm() / ref.norm()).item())
    return worst


# ----------------------------------------------------------------------------------------------
# Runs


def build_step(impl: str, case: Case, sgl, ours_config: DecodeConfig | None) -> tuple[Case, Callable]:
    """The case an implementation actually runs over, and its step."""
    if impl == "full-cast":
        # One layer: its working set (the whole pool, cast) is far beyond L2 already.
        used = replace(case, layers=1, indices=case.indices[:1])
        return used, impl_full_cast(used)
    builders = {
        "gather-cast": lambda: impl_gather_cast(case),
        "ours": lambda: impl_ours(case, ours_config),
        "ours-triton": lambda: impl_ours(case, ours_config, impl="triton"),
        "sglang-triton": lambda: impl_sglang(case, sgl),
        "flashmla-fp8": lambda: impl_flashmla(case),
        "flashinfer-fp8": lambda: impl_flashinfer(case),
    }
    if impl not in builders:
        raise ValueError(f"unknown implementation {impl!r}")
    return case, builders[impl]()


def run_shape(heads: int, batch: int, context: int, sgl, copy_tbps: float, impls=IMPLS,
              ours_config: DecodeConfig | None = None) -> list[dict]:
    dev = torch.device("cuda")
    rows = []
    case = make_case(heads, batch, context, dev)
    for impl in impls:
        row = {"impl": impl, "heads": heads, "batch": batch, "context": context, "layers": case.layers,
               "pool_tokens": case.pool.shape[0], "copy_tbps": round(copy_tbps, 3)}
        step = None
        try:
            if impl == "sglang-triton" and sgl is None:
                raise RuntimeError("no SGLang wheel given")
            used, step = build_step(impl, case, sgl, ours_config)
            t = time_graph(step) / used.layers
            out = step()  # its last layer's output, checked against the reference below
            torch.cuda.synchronize()
            row.update(time_us=round(t, 2), fp8_tbps=round(case.kv_bytes / (t * 1e-6) / 1e12, 3),
                       rel_err=round(max_rel_error(out, used, sorted({0, batch - 1})), 5))
            row["copy_share"] = round(row["fp8_tbps"] / copy_tbps, 3)
            if impl == "ours-triton":
                row["config"] = asdict(ours_config or default_config(batch, heads, dev))
            if impl == "sglang-triton":
                row["sglang_splits"] = int(step.splits[0].item())
        except Exception as exc:  # noqa: BLE001 -- a failing implementation must not lose the other rows
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        del step
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    del case
    torch.cuda.empty_cache()
    return rows


def host_overhead_us(heads: int, batch: int, context: int, impl: str, calls: int = 300) -> float:
    """Mean host time of one eager ``mla_decode`` call (CPU side only: the calls are queued, not
    waited for; the GPU work of all calls is far shorter than the queue allows)."""
    case = make_case(heads, batch, context, torch.device("cuda"), layers=1)
    out = torch.empty(batch, heads, D_NOPE, dtype=torch.bfloat16, device="cuda")
    qn, qr, idx = case.q[..., :D_NOPE], case.q[..., D_NOPE:], case.indices[0]
    for _ in range(10):
        mla_decode(qn, qr, case.pool, case.indptr, idx, SM_SCALE, out=out, impl=impl)
    torch.cuda.synchronize()
    times = []
    for _ in range(5):  # best of 5 rounds: the host's own noise (other processes) only adds time
        t0 = time.perf_counter()
        for _ in range(calls):
            mla_decode(qn, qr, case.pool, case.indptr, idx, SM_SCALE, out=out, impl=impl)
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return round(min(times), 2)


SWEEP_SHAPES = [(8, 64, 8192), (16, 64, 32768), (8, 1, 131072), (16, 128, 2048)]


def sweep_configs(base: DecodeConfig, batch: int, heads: int, sms: int) -> list[DecodeConfig]:
    """Tile/warp/stage grid at the default split count, then split counts around it."""
    configs = [replace(base, block_n=n, num_warps=w, num_stages=st)
               for n, w, st in ((32, 4, 5), (32, 4, 6), (32, 8, 5), (32, 8, 6), (64, 4, 5), (64, 8, 5),
                                (64, 4, 3), (16, 4, 6))]
    tiles = math.ceil(heads / base.block_h)
    for k in (1, 3, 4):
        splits = max(1, min(256, round(k * sms / (batch * tiles))))
        configs += [replace(base, num_splits=splits),
                    replace(base, num_splits=splits, num_warps=8, num_stages=6)]
    configs.append(replace(base, use_pdl=True))
    return configs


def sweep(out_dir: Path, shapes=SWEEP_SHAPES) -> list[dict]:
    """Time ``ours`` over launch geometries on representative shapes (feeds ``default_config``)."""
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for heads, batch, context in shapes:
        case = make_case(heads, batch, context, dev)
        base = default_config(batch, heads, dev)
        for cfg in sweep_configs(base, batch, heads, sms):
            row = dict(heads=heads, batch=batch, context=context, **asdict(cfg))
            try:
                t = time_graph(impl_ours(case, cfg), replays=7, warmup=2) / case.layers
                row.update(time_us=round(t, 2), fp8_tbps=round(case.kv_bytes / t / 1e6, 3))
            except Exception as exc:  # noqa: BLE001 -- record it, keep sweeping
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            print("sweep", json.dumps(row), flush=True)
        del case
        torch.cuda.empty_cache()
        (out_dir / "sweep.json").write_text(json.dumps(rows, indent=1))  # each shape: a timeout keeps it
    return rows


def profile_once(shape: tuple[int, int, int], config: DecodeConfig | None) -> None:
    """A few eager launches of ``ours`` on one shape, one layer: something for ncu to look at."""
    heads, batch, context = shape
    case = make_case(heads, batch, context, torch.device("cuda"), layers=1)
    step = impl_ours(case, config)
    for _ in range(3):
        step()
    torch.cuda.synchronize()


def best_configs(rows: list[dict]) -> dict[tuple[int, int, int], DecodeConfig]:
    best: dict[tuple[int, int, int], dict] = {}
    for r in rows:
        if "time_us" not in r:
            continue
        key = (r["heads"], r["batch"], r["context"])
        if key not in best or r["time_us"] < best[key]["time_us"]:
            best[key] = r
    fields = DecodeConfig.__dataclass_fields__
    return {k: DecodeConfig(**{f: v[f] for f in fields}) for k, v in best.items()}


# ----------------------------------------------------------------------------------------------
# Report


NOTES_HEADING = "## Notes (by hand)"
ERR_BAR = 2e-3  # the correctness bar for ours, vs the fp32 reference
HOST_BAR_US = 20.0


def _by(rows: list[dict]) -> dict[tuple, dict]:
    return {(r["impl"], r["heads"], r["batch"], r["context"]): r for r in rows if "time_us" in r}


def targets(rows: list[dict], meta: dict) -> list[str]:
    """The issue's targets, each MET or MISSED with the numbers behind it."""
    by, lines = _by(rows), []
    groups: dict[int, list[tuple[float, str]]] = {}
    for (impl, h, b, c), r in sorted(by.items()):
        f = by.get(("flashmla-fp8", h, b, c))
        if impl != "ours" or b < 8 or f is None:
            continue
        groups.setdefault(h, []).append((f["time_us"] / r["time_us"], f"b{b} {c // 1024}K"))
    if groups:
        n = sum(len(v) for v in groups.values())
        faster = sum(1 for v in groups.values() for x, _ in v if x > 1.0)
        lines.append(f"- faster than FlashMLA FP8 on every shape with batch >= 8: faster on {faster}/{n} "
                     f"-> {'MET' if faster == n else 'MISSED'} (FlashMLA time / ours; > 1 = ours faster):")
        for h, v in sorted(groups.items()):
            won = [f"{s} {x:.2f}x" for x, s in v if x > 1.0]
            lost = [f"{s} {x:.2f}x" for x, s in v if x <= 1.0]
            lines.append(f"  - {h} heads: faster on {len(won)}/{len(v)}"
                         + (f" ({', '.join(won)})" if won else "") + (f"; slower on {', '.join(lost)}" if lost else ""))
    for h in (8, 16):
        for c in (8192, 32768):
            r = by.get(("ours", h, 64, c))
            if r:
                verdict = "MET" if r["fp8_tbps"] >= 3.0 else "MISSED"
                lines.append(f"- batch 64, ctx {c // 1024}K, {h} heads: {r['fp8_tbps']:.2f} TB/s "
                             f"({100 * r['copy_share']:.0f}% of the copy rate) -> {verdict} (>= 3.0 TB/s; "
                             f"moonshot 3.6: {'met' if r['fp8_tbps'] >= 3.6 else 'missed'})")
        r = by.get(("ours", h, 1, 131072))
        if r:
            lines.append(f"- batch 1, ctx 128K, {h} heads: {r['fp8_tbps']:.2f} TB/s -> "
                         f"{'MET' if r['fp8_tbps'] >= 2.5 else 'MISSED'} (>= 2.5 TB/s)")
    for key, value in sorted(meta.get("host_us", {}).items()):
        if key.startswith("ours "):
            lines.append(f"- eager host time, {key[5:]}: {value:.1f} us per call -> "
                         f"{'MET' if value < HOST_BAR_US else 'MISSED'} (< {HOST_BAR_US:.0f} us)")
        else:
            lines.append(f"- eager host time, {key} (for comparison): {value:.1f} us per call")
    errs = [r["rel_err"] for (impl, *_), r in by.items() if impl == "ours"]
    if errs:
        lines.append(f"- error vs the fp32 reference: ours at most {max(errs):.1e} -> "
                     f"{'MET' if max(errs) <= ERR_BAR else 'MISSED'} (<= {ERR_BAR:.0e})")
    return lines


def markdown(rows: list[dict], meta: dict) -> str:
    out = ["# FP8 MLA decode attention on one H200: ours against FlashMLA, FlashInfer and SGLang", "",
           (f"Run: {meta['date']}, {meta['device']}, torch {meta['torch']}, triton {meta['triton']}; "
            f"{meta.get('peers', '')}. Copy bandwidth (read + write) in the same run: {meta['copy_tbps']:.2f} TB/s. "
            "Time per layer (median of CUDA-graph replays, us); TB/s = FP8 bytes of the used rows / time; "
            "rel_err vs the fp32 reference over the dequantised KV. Rows are random whole pages of 64 slots "
            "(FlashMLA's page), the same slots for every implementation. `ours` is the CUDA kernel "
            "(`kernels/fp8_mla_decode_cuda.py`), `triton` our portable Triton kernel."), "",
           ("| heads | batch | context | FlashMLA FP8 us | FlashInfer FP8 us | SGLang Triton us | ours-triton us "
            "| **ours us** | ours TB/s | ours vs FlashMLA | err ours | err FlashMLA | err FlashInfer |"),
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by = {(r["impl"], r["heads"], r["batch"], r["context"]): r for r in rows}

    def cell(impl: str, shape: tuple[int, int, int], key: str, fmt: str = "{:.1f}") -> str:
        r = by.get((impl, *shape), {})
        return fmt.format(r[key]) if key in r else ("err" if "error" in r else "-")

    for shape in sorted({(r["heads"], r["batch"], r["context"]) for r in rows}):
        o, f = by.get(("ours", *shape), {}), by.get(("flashmla-fp8", *shape), {})
        vs = f"{f['time_us'] / o['time_us']:.2f}x" if "time_us" in o and "time_us" in f else "-"
        cells = [cell("flashmla-fp8", shape, "time_us"), cell("flashinfer-fp8", shape, "time_us"),
                 cell("sglang-triton", shape, "time_us"), cell("ours-triton", shape, "time_us"),
                 "**" + cell("ours", shape, "time_us") + "**", cell("ours", shape, "fp8_tbps", "{:.2f}"), vs,
                 cell("ours", shape, "rel_err", "{:.1e}"), cell("flashmla-fp8", shape, "rel_err", "{:.1e}"),
                 cell("flashinfer-fp8", shape, "rel_err", "{:.1e}")]
        out.append("| " + " | ".join(map(str, (*shape, *cells))) + " |")
    errors = sorted({f"{r['impl']}: {r['error']}" for r in rows if "error" in r})
    if errors:
        out += ["", "Errors (a cell marked err):", ""] + [f"- {e}" for e in errors]
    out += ["", "## Targets", ""] + targets(rows, meta)
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", default=None, help="SGLang wheel for its Triton decode kernel (0.5.16 or 0.5.23)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--tag", default="", help="suffix of the JSON files (runs split over several calls)")
    ap.add_argument("--impls", default=",".join(IMPLS), help=f"comma list of {IMPLS + OTHER_IMPLS}")
    ap.add_argument("--heads", default=None, help="only these head counts, e.g. 8,16")
    ap.add_argument("--shapes", default=None, help="comma list of HxBxC, e.g. 8x64x8192 (default: all 64)")
    ap.add_argument("--report", nargs="*", type=Path, default=None,
                    help="only write the markdown from these row JSON files (and their _meta files)")
    ap.add_argument("--sweep", action="store_true", help="also sweep launch geometries of the Triton kernel")
    ap.add_argument("--sweep-shapes", default=None, help="comma list of HxBxC for --sweep")
    ap.add_argument("--profile", default=None, help="HxBxC: only run ours a few times eagerly (for ncu)")
    ap.add_argument("--config", default=None,
                    help="JSON of DecodeConfig fields: the Triton kernel's geometry (with --profile)")
    args = ap.parse_args()

    def parse(text: str) -> list[tuple[int, ...]]:
        return [tuple(map(int, x.split("x"))) for x in text.split(",")]

    if args.report is not None:
        write_report(args.report, args.out)
        return
    if _KERNELS_MISSING is not None:
        sys.exit(f"the kernels need torch and triton: {_KERNELS_MISSING}")
    if args.profile:
        cfg = None
        if args.config:
            h, b, c = parse(args.profile)[0]
            cfg = replace(default_config(b, h, torch.device("cuda")), **json.loads(args.config))
        profile_once(parse(args.profile)[0], cfg)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.wheel or (sorted(glob.glob(".sglang-wheel/sglang-*.whl")) or [None])[0]
    sgl = load_sglang_triton(wheel) if wheel else None
    shapes = SHAPES if not args.shapes else parse(args.shapes)
    if args.heads:
        shapes = [s for s in shapes if s[0] in {int(h) for h in args.heads.split(",")}]
    impls = tuple(args.impls.split(","))

    import triton
    copy_before = copy_bandwidth_tbps()
    print(f"copy bandwidth {copy_before:.3f} TB/s", flush=True)
    host = {}
    if "ours" in impls:  # before the big allocations; small shapes: the GPU keeps up with the queue
        for label, (h, b, c), impl in (("ours one launch (16 heads, batch 64, 2K)", (16, 64, 2048), "auto"),
                                       ("ours two launches (16 heads, batch 8, 2K)", (16, 8, 2048), "auto"),
                                       ("ours-triton (16 heads, batch 8, 2K)", (16, 8, 2048), "triton")):
            host[label] = host_overhead_us(h, b, c, impl)
            print("host", label, host[label], flush=True)
    if args.sweep:
        sweep(args.out, parse(args.sweep_shapes) if args.sweep_shapes else SWEEP_SHAPES)
    rows, t0 = [], time.time()
    rows_file = args.out / f"fp8_mla_decode{args.tag}.json"
    for h, b, c in shapes:
        rows += run_shape(h, b, c, sgl, copy_before, impls=impls)
        rows_file.write_text(json.dumps(rows, indent=1) + "\n")  # survives a timeout
    copy_after = copy_bandwidth_tbps()
    peers = []
    for mod in ("sgl_kernel", "flashinfer"):
        try:
            peers.append(f"{mod} {importlib.import_module(mod).__version__}")
        except Exception:  # noqa: BLE001 -- only for the report's header
            peers.append(f"{mod} missing")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__, "triton": triton.__version__,
            "peers": ", ".join(peers) + (f", SGLang Triton decode from `{Path(wheel).name}`" if wheel else ""),
            "copy_tbps": statistics.mean([copy_before, copy_after]), "copy_tbps_before": copy_before,
            "copy_tbps_after": copy_after, "seconds": round(time.time() - t0, 1), "host_us": host}
    rows_file.write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / f"fp8_mla_decode{args.tag}_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    md = markdown(rows, meta)
    (args.out / f"fp8_mla_decode{args.tag}.md").write_text(md)
    print(md)


def write_report(files: list[Path], out_dir: Path) -> None:
    """One markdown from the rows of several calls (one run split by head count)."""
    rows, metas = [], []
    for f in files:
        rows += json.loads(f.read_text())
        meta_file = f.with_name(f.stem + "_meta.json")
        if meta_file.exists():
            metas.append(json.loads(meta_file.read_text()))
    meta = dict(metas[0]) if metas else {}
    if metas:
        meta["copy_tbps"] = statistics.mean(m["copy_tbps"] for m in metas)
        meta["host_us"] = {k: v for m in metas for k, v in m.get("host_us", {}).items()}
        meta["date"] = " / ".join(m["date"] for m in metas)
        seen = [p for m in metas for p in m.get("peers", "").split(", ") if p and not p.endswith(" missing")]
        meta["peers"] = ", ".join(dict.fromkeys(seen))
    (out_dir / "fp8_mla_decode.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out_dir / "fp8_mla_decode_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    md_file = out_dir / "fp8_mla_decode.md"
    old = md_file.read_text() if md_file.exists() else ""
    notes = old[old.index(NOTES_HEADING):] if NOTES_HEADING in old else ""  # hand-written: kept
    md = markdown(rows, meta)
    md_file.write_text(md + ("\n" + notes if notes else ""))
    print(md)


if __name__ == "__main__":
    main()
