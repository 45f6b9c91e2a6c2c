"""Correctness of kernels.fp8_mla_decode against a float32 reference over the dequantised KV.

With a CUDA GPU the full matrix runs (batch 1-128, context 1-131072, heads 8/16/64/128, ragged
lengths, empty rows, CUDA-graph replay). Without one, a small subset runs under Triton's CPU
interpreter (a few seconds). Without torch/triton everything skips.

Tolerance: ‖out - ref‖ / ‖ref‖ <= 1e-2 (and every element within 2e-2 * max|ref|). The kernel's
own rounding is: output stored as BF16 (2^-9 relative per element), Q after folding the scales
rounded to FP16 (2^-11), softmax weights rounded to FP16 for the P.V product (2^-11); the e4m3 ->
FP16 conversion of K/V is exact and all sums are float32. Measured error is 1.6-3.4e-3, so 1e-2
keeps a margin of ~3x while any real fault (a wrong row, a lost scale, a bad split merge) is off
by O(1).
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="torch/triton not installed (optional extra `kernels`)")

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Must be set before triton is imported: triton.jit picks the interpreter at decoration time,
    # for triton's own library functions too.
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ["TRITON_INTERPRET"] != "1":
        pytest.skip("no CUDA GPU and TRITON_INTERPRET disabled", allow_module_level=True)
pytest.importorskip("triton", reason="torch/triton not installed (optional extra `kernels`)")

from kernels.fp8_mla_decode import (
    D_KV,
    D_NOPE,
    DecodeConfig,
    default_config,
    mla_decode,
    mla_decode_fp8,
    reference_mla_decode,
)

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
# The interpreter runs programs one by one, so on the CPU one merge program per (row, head).
MERGE_DV = 128 if ON_GPU else D_NOPE
REL_TOL = 1e-2
ABS_TOL_OF_MAX = 2e-2
_needs_gpu = pytest.mark.skipif(
    not ON_GPU, reason="large shapes need a CUDA GPU (CPU runs the small interpreter set)")


def gpu_only(fn):
    return pytest.mark.gpu(_needs_gpu(fn))


def make_inputs(lens: list[int], heads: int, pool_extra: int = 64, seed: int = 0):
    """Random FP8 pool with slots scattered at random, ragged rows, BF16 query."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    total = sum(lens)
    pool_tokens = total + pool_extra
    pool = (torch.randn(pool_tokens, 1, D_KV, generator=gen) * 0.6).to(torch.float8_e4m3fn)
    # Unused slots hold NaN bytes: a kernel that reads outside its rows, or lets a masked row
    # leak into a sum, fails loudly.
    used = torch.randperm(pool_tokens, generator=gen)[:total]
    poison = torch.ones(pool_tokens, dtype=torch.bool)
    poison[used] = False
    pool.view(torch.uint8)[poison] = 0x7F  # e4m3fn NaN
    indptr = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(len(lens), heads, D_KV, generator=gen).to(torch.bfloat16)
    return (pool.to(DEVICE), indptr.to(DEVICE), used.to(torch.int32).to(DEVICE), q.to(DEVICE))


def check(out: torch.Tensor, ref: torch.Tensor, lens: list[int]) -> None:
    assert not torch.isnan(out).any(), "unwritten or NaN output"
    out = out.float()
    for b, n in enumerate(lens):
        if n == 0:
            assert torch.equal(out[b], torch.zeros_like(out[b])), "an empty row must give zeros"
    rel = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert rel <= REL_TOL, f"relative error {rel:.2e}"
    worst = (out - ref).abs().max().item()
    assert worst <= ABS_TOL_OF_MAX * ref.abs().max().item(), f"max abs error {worst:.3e}"


def run_case(lens, heads, config=None, k_scale=1.0, v_scale=1.0, token_scale=False, seed=0,
             sm_scale=0.0625, impl="auto", decode=None):
    """Random inputs, the kernel (``decode(q, pool, indptr, indices, sm_scale, k_scale, v_scale, ts, out)``,
    by default ``mla_decode_fp8`` with ``config``/``impl``) into a NaN-poisoned output, the check."""
    pool, indptr, indices, q = make_inputs(lens, heads, seed=seed)
    ts = None
    if token_scale:
        gen = torch.Generator(device="cpu").manual_seed(seed + 1)
        ts = (torch.rand(pool.shape[0], generator=gen) + 0.25).to(DEVICE)
    out = torch.full((len(lens), heads, D_NOPE), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    if decode is None:
        mla_decode_fp8(q, pool, indptr, indices, sm_scale, k_scale=k_scale, v_scale=v_scale,
                       token_scale=ts, out=out, config=config, impl=impl)
    else:
        decode(q, pool, indptr, indices, sm_scale, k_scale, v_scale, ts, out)
    k_ref = k_scale.item() if isinstance(k_scale, torch.Tensor) else k_scale
    ref = reference_mla_decode(q, pool, indptr, indices, sm_scale, k_ref, v_scale, ts)
    check(out, ref, lens)


# ---------------------------------------------------------------- small: interpreter and GPU

SMALL = [
    # (lens, heads, splits, min_chunk)
    ([1], 8, 1, 64),
    ([5, 0, 70], 16, 1, 64),  # one split: the split kernel writes the output itself
    ([0, 130, 3, 64], 8, 4, 64),  # ragged, an empty row, splits longer and shorter than the rows
    ([257], 16, 3, 64),  # split boundaries inside a row
    ([33, 0], 64, 2, 32),
    ([40], 128, 1, 32),  # four head tiles
    ([0, 0], 8, 2, 64),  # nothing at all to attend
]


@pytest.mark.parametrize("lens,heads,splits,min_chunk", SMALL)
def test_small_shapes(lens, heads, splits, min_chunk):
    block_n = 32 if min_chunk == 32 else 64
    run_case(lens, heads, DecodeConfig(block_h=16 if heads <= 16 else 32, block_n=block_n,
                                       num_splits=splits, min_chunk=min_chunk, merge_block_dv=MERGE_DV))


def test_scales_tensor_and_per_token():
    """k_scale read from device memory, a separate v_scale, and per-token scales."""
    cfg = DecodeConfig(num_splits=3, min_chunk=64, merge_block_dv=MERGE_DV)
    run_case([90, 17], 8, cfg, k_scale=torch.tensor([0.75], device=DEVICE), v_scale=1.5, token_scale=True)


def test_split_query_views_and_3d_pool():
    """q_nope/q_rope as separate strided views, the pool as [tokens, 576]."""
    lens = [50, 77]
    pool, indptr, indices, q = make_inputs(lens, 16, seed=3)
    q_wide = torch.zeros(2, 16, 1024, dtype=torch.bfloat16, device=DEVICE)
    q_wide[..., :D_NOPE], q_wide[..., 700:764] = q[..., :D_NOPE], q[..., D_NOPE:]
    out = mla_decode(q_wide[..., :D_NOPE], q_wide[..., 700:764], pool.view(-1, D_KV), indptr, indices, 0.1,
                     config=DecodeConfig(num_splits=2, min_chunk=64, merge_block_dv=MERGE_DV))
    check(out, reference_mla_decode(q, pool, indptr, indices, 0.1), lens)


def test_rejects_bad_layout():
    pool, indptr, indices, q = make_inputs([4], 8)
    with pytest.raises(ValueError):
        mla_decode_fp8(q, pool, indptr.long(), indices, 0.1)
    with pytest.raises(ValueError):
        mla_decode_fp8(q[..., :500], pool, indptr, indices, 0.1)


# ---------------------------------------------------------------- large: GPU only

LARGE = [
    # (lens, heads)
    ([131072], 8),
    ([131072], 16),
    ([131072], 128),
    ([1, 2, 3, 0, 131072, 4097, 65536, 0], 64),
    ([8192] * 64, 16),
    ([32768] * 8, 8),
]


@gpu_only
@pytest.mark.parametrize("lens,heads", LARGE)
def test_large_default_config(lens, heads):
    run_case(lens, heads)


@gpu_only
@pytest.mark.parametrize("heads", [8, 16, 64, 128])
def test_batch_128_ragged_with_empty_rows(heads):
    gen = torch.Generator().manual_seed(heads)
    lens = torch.randint(0, 3000, (128,), generator=gen).tolist()
    lens[::17] = [0] * len(lens[::17])
    lens[5] = 1
    run_case(lens, heads, seed=heads)


@gpu_only
@pytest.mark.parametrize("splits", [1, 2, 7, 64, 256])
def test_split_counts(splits):
    run_case([1, 999, 20000, 0], 16, DecodeConfig(num_splits=splits))


@gpu_only
@pytest.mark.parametrize("block_n,warps,stages", [(32, 4, 1), (32, 8, 3), (64, 8, 2), (64, 4, 3)])
def test_geometries(block_n, warps, stages):
    run_case([3000, 5, 12345], 16, DecodeConfig(block_n=block_n, num_warps=warps, num_stages=stages,
                                                num_splits=5))


@gpu_only
def test_pdl_merge():
    run_case([50000, 7], 8, DecodeConfig(num_splits=64, use_pdl=True))


def capture(step, pool):
    """``step`` run once eagerly, then captured; and the pool's slots that hold real rows (not NaN)."""
    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    used = torch.nonzero(~torch.isnan(pool.view(-1, D_KV)[:, 0].float())).flatten().to(torch.int32)
    return graph, used


@gpu_only
def test_cuda_graph_replay_with_new_lengths():
    """One capture serves any lengths: the split count depends on batch and heads only."""
    heads, batch, max_tokens = 16, 4, 40000
    pool, _, _, q = make_inputs([max_tokens], heads, seed=7)
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device=DEVICE)
    indices = torch.zeros(max_tokens, dtype=torch.int32, device=DEVICE)
    out = torch.empty(batch, heads, D_NOPE, dtype=torch.bfloat16, device=DEVICE)
    q = q.expand(batch, -1, -1).contiguous()
    config = default_config(batch, heads, DEVICE)

    def step():
        mla_decode_fp8(q, pool, indptr, indices, 0.0625, out=out, config=config)

    graph, used = capture(step, pool)
    for lens in ([10, 0, 30000, 9000], [1, 1, 1, 1], [0, 0, 0, 39990]):
        indptr.copy_(torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32))
        perm = used[torch.randperm(used.numel(), device=DEVICE)][: sum(lens)]
        indices[: sum(lens)] = perm
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, reference_mla_decode(q, pool, indptr, indices[: sum(lens)], 0.0625), lens)


# ---------------------------------------------------------------- the SM90 CUDA path (Hopper only)

ON_HOPPER = ON_GPU and torch.cuda.get_device_capability()[0] == 9
hopper_only = pytest.mark.skipif(not ON_HOPPER, reason="the CUDA path is built for and enabled on sm_90 only")


def run_cuda(lens, heads, cfg=None, splits=None, **kwargs):
    """``run_case`` through the CUDA path directly, with its geometry and split count."""
    from kernels import fp8_mla_decode_cuda as cu

    def decode(q, pool, indptr, indices, sm_scale, k_scale, v_scale, ts, out):
        cu.mla_decode_cuda(q[..., :D_NOPE], q[..., D_NOPE:], pool, indptr, indices, sm_scale, k_scale, v_scale,
                           ts, out, cfg, splits)

    run_case(lens, heads, decode=decode, **kwargs)


@gpu_only
@hopper_only
@pytest.mark.parametrize("lens,heads", LARGE + [(lens, heads) for lens, heads, _, _ in SMALL])
def test_cuda_path_default(lens, heads):
    run_case(lens, heads, impl="cuda")


@gpu_only
@hopper_only
# <= 16: the last split CTA merges (its three batch shapes: <= 4, <= 8, <= 16 active splits)
@pytest.mark.parametrize("splits", [1, 2, 4, 5, 8, 9, 16, 17, 264, 512])
def test_cuda_split_counts_and_both_merges(splits):
    run_cuda([1, 999, 20000, 0, 64, 65], 16, splits=splits)


@gpu_only
@hopper_only
@pytest.mark.parametrize("stages,block_n", [(2, 64), (4, 32), (3, 32)])
def test_cuda_pipeline_geometries(stages, block_n):
    from kernels.fp8_mla_decode_cuda import CudaConfig

    run_cuda([3000, 5, 12345, 0, 31], 8, CudaConfig(stages=stages, block_n=block_n), splits=5)


@gpu_only
@hopper_only
@pytest.mark.parametrize("splits", [1, 5, None])
def test_cuda_three_ctas_per_sm(splits):
    """The many-head variant: 32-token stages, 8 k-steps of Q in registers, launch bounds for 3 CTAs per SM."""
    from kernels.fp8_mla_decode_cuda import CudaConfig

    cfg = CudaConfig(stages=2, block_n=32, ctas_per_sm=3, defines=("Q_REG_KSTEPS=8",))
    run_cuda([3000, 5, 12345, 0, 31], 64, cfg, splits=splits)
    run_cuda([4000, 70], 128, cfg, splits=splits)


@gpu_only
@hopper_only
def test_cuda_scales_tensor_and_per_token():
    run_cuda([900, 17, 0], 16, splits=4, k_scale=torch.tensor([0.75], device=DEVICE), v_scale=1.5,
             token_scale=True)


@gpu_only
@hopper_only
@pytest.mark.parametrize("batch", [4, 32])  # 66 splits (merge kernel) and 8 (fused merge)
def test_cuda_path_graph_replay_with_new_lengths(batch):
    """The CUDA path's split count also depends on batch and heads only: one capture, any lengths,
    and the fused merge's arrival counters are back at zero after every replay."""
    heads, max_tokens = 16, 40000
    pool, _, _, q = make_inputs([max_tokens], heads, seed=8)
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device=DEVICE)
    indices = torch.zeros(max_tokens, dtype=torch.int32, device=DEVICE)
    out = torch.empty(batch, heads, D_NOPE, dtype=torch.bfloat16, device=DEVICE)
    q = q.expand(batch, -1, -1).contiguous()

    def step():
        mla_decode_fp8(q, pool, indptr, indices, 0.0625, out=out, impl="cuda")

    graph, used = capture(step, pool)
    gen = torch.Generator().manual_seed(batch)
    for total in (batch, 30000, 39000):
        cuts = sorted(torch.randint(0, total + 1, (batch - 1,), generator=gen).tolist())
        lens = [b - a for a, b in zip([0] + cuts, cuts + [total])]
        lens[0] = 0  # always one empty row
        indptr.copy_(torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32))
        indices[: sum(lens)] = used[torch.randperm(used.numel(), device=DEVICE)][: sum(lens)]
        for _ in range(2):
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            check(out, reference_mla_decode(q, pool, indptr, indices[: sum(lens)], 0.0625), lens)


# The small-batch plan (mla_fp8_split_cl): cluster_slots = clusters per (row, head tile) x cluster x pairs
# forces 1 (the cluster writes the output), a few, or 64 clusters a row (the last cluster merges them).
SMALL_BATCH = [
    ([1, 999, 20000, 0, 64, 65], 16),
    ([2048], 8),
    ([8192, 3], 8),
    ([32768, 0, 1, 130], 16),
    ([5000, 0, 63], 64),
    ([4000], 128),
]


@gpu_only
@hopper_only
@pytest.mark.parametrize("cluster,per_pair", [(8, 1), (8, 2), (8, 5), (8, 64), (4, 3), (2, 16), (8, 0)])
@pytest.mark.parametrize("lens,heads", SMALL_BATCH)
def test_cuda_small_batch_plan(lens, heads, cluster, per_pair):
    """per_pair 0: the driver's own count of resident clusters (the default plan)."""
    from kernels.fp8_mla_decode_cuda import HEAD_TILE, CudaConfig

    pairs = len(lens) * -(-heads // HEAD_TILE)
    run_cuda(lens, heads, CudaConfig(cluster=cluster, cluster_slots=per_pair * cluster * pairs))


@gpu_only
@hopper_only
def test_cuda_small_batch_plan_scales_and_fp16_query():
    from kernels.fp8_mla_decode_cuda import CudaConfig

    cfg = CudaConfig(cluster_slots=8 * 3 * 3)  # 3 rows, 3 clusters of 8 each
    run_cuda([900, 17, 0], 16, cfg, k_scale=torch.tensor([0.75], device=DEVICE), v_scale=1.5, token_scale=True)
    pool, indptr, indices, q = make_inputs([3000, 40], 8, seed=21)
    from kernels import fp8_mla_decode_cuda as cu

    q16 = q.to(torch.float16)
    out = torch.full((2, 8, D_NOPE), float("nan"), dtype=torch.float16, device=DEVICE)
    cu.mla_decode_cuda(q16[..., :D_NOPE], q16[..., D_NOPE:], pool, indptr, indices, 0.0625, 1.0, 1.0, None, out, cfg)
    check(out, reference_mla_decode(q16, pool, indptr, indices, 0.0625), [3000, 40])


@gpu_only
@hopper_only
@pytest.mark.parametrize("batch,per_pair,cluster", [(1, 0, 8), (2, 4, 8), (4, 0, 4), (8, 1, 8)])
def test_cuda_small_batch_plan_graph_replay_with_new_lengths(batch, per_pair, cluster):
    """One capture, any lengths (the plan depends on batch and heads); after every replay the counters of the
    clusters' merge are back at zero (the last cluster of a row resets its own)."""
    from kernels import fp8_mla_decode_cuda as cu

    heads, max_tokens = 16, 40000
    cfg = cu.CudaConfig(cluster=cluster, cluster_slots=per_pair * cluster * batch)
    pool, _, _, q = make_inputs([max_tokens], heads, seed=30 + batch)
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device=DEVICE)
    indices = torch.zeros(max_tokens, dtype=torch.int32, device=DEVICE)
    out = torch.empty(batch, heads, D_NOPE, dtype=torch.bfloat16, device=DEVICE)
    q = q.expand(batch, -1, -1).contiguous()

    def step():
        cu.mla_decode_cuda(q[..., :D_NOPE], q[..., D_NOPE:], pool, indptr, indices, 0.0625, 1.0, 1.0, None, out, cfg)

    graph, used = capture(step, pool)
    k = cu._KERNELS[(DEVICE.index or 0, False, cfg)]
    assert k.plans[(batch, heads, None)].cluster, "the small-batch plan"
    gen = torch.Generator().manual_seed(batch)
    for total in (batch, 30000, 39000, 2048 * batch):
        cuts = sorted(torch.randint(0, total + 1, (batch - 1,), generator=gen).tolist())
        lens = [b - a for a, b in zip([0] + cuts, cuts + [total])]
        if batch > 1:
            lens[0] = 0  # an empty row
        indptr.copy_(torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32))
        indices[: sum(lens)] = used[torch.randperm(used.numel(), device=DEVICE)][: sum(lens)]
        for _ in range(2):
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            check(out, reference_mla_decode(q, pool, indptr, indices[: sum(lens)], 0.0625), lens)
            assert not k.arrivals.any(), "a counter left non-zero: the next replay would merge too early"


@gpu_only
@hopper_only
def test_auto_dispatch_runs_triton_for_a_layout_the_cuda_path_cannot_read():
    """A q_rope view 8 bytes off a 16-byte boundary: the CUDA path refuses it as it launches
    (LayoutError), "auto" then computes the same call with Triton, "cuda" says why it cannot."""
    lens = [300, 41]
    pool, indptr, indices, q = make_inputs(lens, 16, seed=12)
    q_wide = torch.zeros(2, 16, 1024, dtype=torch.bfloat16, device=DEVICE)
    q_wide[..., :D_NOPE], q_wide[..., 700:764] = q[..., :D_NOPE], q[..., D_NOPE:]
    q_nope, q_rope = q_wide[..., :D_NOPE], q_wide[..., 700:764]
    out = mla_decode(q_nope, q_rope, pool, indptr, indices, 0.1)
    check(out, reference_mla_decode(q, pool, indptr, indices, 0.1), lens)
    with pytest.raises(ValueError, match="not laid out for it"):
        mla_decode(q_nope, q_rope, pool, indptr, indices, 0.1, impl="cuda")
