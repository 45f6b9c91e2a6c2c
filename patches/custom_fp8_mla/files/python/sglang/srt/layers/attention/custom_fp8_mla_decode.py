# Generated from kernels/fp8_mla_decode.py by scripts/sync_kernel_copies.py: do not edit this copy.
# Edit kernels/fp8_mla_decode.py, then run `python3 scripts/sync_kernel_copies.py`.
"""MLA decode attention that reads an FP8 (e4m3) KV cache directly, in Triton.

Layout (SGLang's MLA pool, page size 1): one row of 576 values per token, the 512-wide latent
("nope") part followed by the 64-wide rope part, stored as ``float8_e4m3fn`` with a per-tensor
scale (optionally also one float32 scale per token). K is the whole row, V is its first 512
columns. A batch row ``b`` attends to the pool rows ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``.

Two launches:

1. ``_split_kernel`` -- grid (head tiles, splits, batch). Each program takes *all* heads of a head
   tile for one (batch row, KV split), so every KV byte is read from HBM once per split, not once
   per head (the latent part is fetched twice, as K^T and as V, the second time from L2: see the
   loop). Partial outputs are normalised and stored with their log2-sum-exp.
2. ``_merge_kernel`` -- log-sum-exp merge of the splits, applies the V scale, writes BF16.
   Skipped when there is one split: the split kernel then writes the output itself.

Why FP16 dots, not BF16: Hopper has no e4m3->bf16 conversion instruction (the compiler goes
e4m3->f16->f32->bf16, which makes a BF16 kernel conversion-bound near 3 TB/s), while e4m3->f16 is
a single ``cvt`` per pair and exact (every e4m3 value is an f16 value). So K/V become f16 and Q is
cast to f16 once per program, after folding ``sm_scale * k_scale * log2(e)`` into it. FP16 has
more mantissa than BF16; its range (65504) is ample for a pre-scaled query. P goes to f16 for
the P.V dot (values in [0, 1]); accumulation is float32 throughout.

The split count is a host integer that depends only on the batch size and head count (never on
the sequence lengths), so one captured CUDA graph serves every length: each program derives its
own KV range from the row's length, and programs past the end of a short row exit at once.

On Hopper with an FP8 cache, ``mla_decode`` runs the CUDA C++ kernel of the sibling module
``<this module>_cuda`` (``fp8_mla_decode_cuda.py``; explicit shared-memory layout, no byte-wise operand
loads; 1.2-2.0x faster than this kernel) unless a Triton ``config`` or ``impl="triton"`` is given;
elsewhere (SM120 has no FlashMLA) and for BF16 caches this Triton kernel is the portable path
(``fp8_mla_decode_cuda.path_for(capability)`` says which one a GPU gets).

Measured on one H200 (benchmarks/results/fp8_mla_decode_triton_2026-11-29.md): 1.5-1.7 TB/s of FP8
rows at batch >= 8 with long rows, 1.1 TB/s at batch 1 x 128K; faster than SGLang's Triton decode on
every benchmark shape. HBM is not the limit (each byte is read from DRAM once): Triton 3.6 lowers
the FP8 V operand, contracted over tokens but stored channel-contiguous, to byte-wise shared
memory loads, and re-reads Q from shared memory in every warp; occupancy is 2 programs per SM.
"""

from __future__ import annotations

import importlib
import os
import warnings
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

D_NOPE = 512  # kv_lora_rank: the latent part of K, which is also V
D_ROPE = 64  # qk_rope_head_dim
D_KV = D_NOPE + D_ROPE
LOG2E = 1.4426950408889634

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"  # read once: triton.jit reads it at import too


@dataclass(frozen=True)
class DecodeConfig:
    """Launch geometry. ``num_splits`` is the split-KV factor (grid axis 1)."""

    block_h: int = 16  # heads per program (tl.dot needs M >= 16: 8 heads are padded to 16)
    # 64 x 4 x 3 was the fastest geometry on every shape of the H200 sweep (up to 1.5x over the
    # others): fewer warps means fewer copies of Q read from shared memory per token. With 3
    # stages Triton 3.6 gives the index load a stage of its own and single-buffers the KV tiles;
    # double buffering (5+ stages) measured slower, the in-SM work per tile being the limit.
    block_n: int = 64  # KV tokens per loop step
    num_warps: int = 4
    num_stages: int = 3
    num_splits: int = 1
    min_chunk: int = 64  # fewest tokens a split takes: short rows spread over many programs
    merge_block_dv: int = 128  # output columns per merge program
    use_pdl: bool = False  # programmatic dependent launch of the merge (Hopper+)


_SM_COUNT: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 8  # the CPU interpreter runs programs one by one: few splits keep tests fast
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def default_config(batch: int, num_heads: int, device: torch.device) -> DecodeConfig:
    """Geometry picked from the H200 sweep in benchmarks/fp8_mla_decode.py (see its results file).

    Splits aim at about two resident programs per SM in one wave: fewer leaves SMs idle, more
    adds merge traffic and a partial last wave. The result depends only on (batch, heads), so it
    is stable under CUDA-graph capture.
    """
    block_h = 16 if num_heads <= 16 else 32
    head_tiles = triton.cdiv(num_heads, block_h)
    target_programs = 2 * _sm_count(device)
    splits = max(1, min(256, round(target_programs / (batch * head_tiles))))
    return DecodeConfig(block_h=block_h, num_splits=splits)


@triton.jit
def _load_q(q_ptr, head_off, mask_h, col0, scale, WIDTH: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """A [BLOCK_H, WIDTH] slice of Q, pre-scaled, in the dot dtype (q_ptr: this row's first head)."""
    cols = col0 + tl.arange(0, WIDTH)
    q = tl.load(q_ptr + head_off[:, None] + cols[None, :], mask=mask_h[:, None], other=0.0)
    return (q.to(tl.float32) * scale).to(DOT_DTYPE)


@triton.jit
def _load_kt(row_ptr, mask_n, col0, WIDTH: tl.constexpr):
    """K^T slice [WIDTH, BLOCK_N]: columns col0..col0+WIDTH of the rows, transposed by addressing."""
    return tl.load(row_ptr[None, :] + col0 + tl.arange(0, WIDTH)[:, None], mask=mask_n[None, :], other=0.0)


@triton.jit
def _load_v(row_ptr, mask_n, col0, WIDTH: tl.constexpr):
    """V slice [BLOCK_N, WIDTH]."""
    return tl.load(row_ptr[:, None] + col0 + tl.arange(0, WIDTH)[None, :], mask=mask_n[:, None], other=0.0)


@triton.jit
def _store_chunk(ptr, head_off, mask, col0, acc, WIDTH: tl.constexpr):
    tl.store(ptr + head_off[:, None] + col0 + tl.arange(0, WIDTH)[None, :], acc.to(ptr.dtype.element_ty),
             mask=mask[:, None])


@triton.jit
def _split_kernel(
    q_nope_ptr, q_rope_ptr, kv_ptr, kv_indptr_ptr, kv_indices_ptr, token_scale_ptr, k_scale_ptr,
    mid_o_ptr, mid_lse_ptr, out_ptr,
    qk_scale, v_scale, min_chunk,
    stride_qn_b, stride_qn_h, stride_qr_b, stride_qr_h, stride_kv,
    stride_mo_b, stride_mo_h, stride_mo_s, stride_ml_b, stride_ml_h,
    stride_o_b, stride_o_h,
    NUM_HEADS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    D_NOPE: tl.constexpr, D_ROPE: tl.constexpr, DOT_DTYPE: tl.constexpr,
    HAS_TOKEN_SCALE: tl.constexpr, K_SCALE_IN_MEMORY: tl.constexpr,
    WRITE_OUTPUT: tl.constexpr, USE_PDL: tl.constexpr,
):
    # The 512 latent columns are handled as four 128-wide chunks (Q slices, K^T loads, V loads,
    # accumulators). With the whole width at once, every warp holds all of Q as an MMA operand
    # (128 registers) and the kernel runs at one 8-warp program per SM (measured: 175-255
    # registers, 12% occupancy, 1.2 TB/s). Chunks keep the live operands small.
    C: tl.constexpr = D_NOPE // 4
    tl.static_assert(D_NOPE == 4 * C)
    pid_h = tl.program_id(0)  # fastest axis: head tiles of one (row, split) run together and share L2
    pid_s = tl.program_id(1)
    pid_b = tl.program_id(2)
    num_splits = tl.num_programs(1)

    row_start = tl.load(kv_indptr_ptr + pid_b)
    seq_len = tl.load(kv_indptr_ptr + pid_b + 1) - row_start
    # Whole BLOCK_N steps per split so only the row's last step is ragged.
    per_split = (seq_len + num_splits - 1) // num_splits
    chunk = (per_split + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    chunk = tl.maximum(chunk, min_chunk)
    lo = pid_s * chunk
    hi = tl.minimum(lo + chunk, seq_len)

    heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = heads < NUM_HEADS
    scale = qk_scale
    if K_SCALE_IN_MEMORY:
        scale = scale * tl.load(k_scale_ptr)
    # Fold sm_scale * k_scale * log2(e) into Q once, so the loop only needs exp2.
    qn = q_nope_ptr + pid_b * stride_qn_b
    q_off = heads * stride_qn_h
    q0 = _load_q(qn, q_off, mask_h, 0 * C, scale, C, DOT_DTYPE)
    q1 = _load_q(qn, q_off, mask_h, 1 * C, scale, C, DOT_DTYPE)
    q2 = _load_q(qn, q_off, mask_h, 2 * C, scale, C, DOT_DTYPE)
    q3 = _load_q(qn, q_off, mask_h, 3 * C, scale, C, DOT_DTYPE)
    qr = _load_q(q_rope_ptr + pid_b * stride_qr_b, heads * stride_qr_h, mask_h, 0, scale, D_ROPE, DOT_DTYPE)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc0 = tl.zeros([BLOCK_H, C], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_H, C], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_H, C], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_H, C], dtype=tl.float32)

    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        mask_n = offs_n < hi
        rows = tl.load(kv_indices_ptr + row_start + offs_n, mask=mask_n, other=0).to(tl.int64)
        row_ptr = kv_ptr + rows * stride_kv
        # K^T (for Q.K^T) and V = K[:, :512] (for P.V) are separate loads, each straight into the
        # layout its dot wants: one tile used twice (once transposed) is kept in registers and
        # loaded synchronously, un-pipelined (measured 1 TB/s); single-use loads are pipelined
        # through shared memory with cp.async. The second read of the bytes is served by L2.
        # Masked rows read as 0, never as whatever an unused pool slot holds (NaN * 0 is NaN).
        s = tl.dot(q0, _load_kt(row_ptr, mask_n, 0 * C, C).to(DOT_DTYPE))
        s = tl.dot(q1, _load_kt(row_ptr, mask_n, 1 * C, C).to(DOT_DTYPE), s)
        s = tl.dot(q2, _load_kt(row_ptr, mask_n, 2 * C, C).to(DOT_DTYPE), s)
        s = tl.dot(q3, _load_kt(row_ptr, mask_n, 3 * C, C).to(DOT_DTYPE), s)
        s = tl.dot(qr, _load_kt(row_ptr, mask_n, D_NOPE, D_ROPE).to(DOT_DTYPE), s)
        if HAS_TOKEN_SCALE:
            t_scale = tl.load(token_scale_ptr + rows, mask=mask_n, other=0.0)
            s = s * t_scale[None, :]
        s = tl.where(mask_n[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every step has at least one live token
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if HAS_TOKEN_SCALE:
            p = p * t_scale[None, :]  # V_t = t_scale * k8_t: fold the scale into P, not into V
        p = p.to(DOT_DTYPE)
        acc0 = tl.dot(p, _load_v(row_ptr, mask_n, 0 * C, C).to(DOT_DTYPE), acc0 * alpha[:, None])
        acc1 = tl.dot(p, _load_v(row_ptr, mask_n, 1 * C, C).to(DOT_DTYPE), acc1 * alpha[:, None])
        acc2 = tl.dot(p, _load_v(row_ptr, mask_n, 2 * C, C).to(DOT_DTYPE), acc2 * alpha[:, None])
        acc3 = tl.dot(p, _load_v(row_ptr, mask_n, 3 * C, C).to(DOT_DTYPE), acc3 * alpha[:, None])
        m_i = m_new

    live = l_i > 0.0  # false for an empty split (or an empty row): nothing attended
    inv_l = 1.0 / tl.where(live, l_i, 1.0)
    if WRITE_OUTPUT:
        base = out_ptr + pid_b * stride_o_b
        off = heads * stride_o_h
        inv_l = inv_l * v_scale
        mask_o = mask_h
    else:
        lse = tl.where(live, m_i + tl.log2(tl.where(live, l_i, 1.0)), float("-inf"))
        tl.store(mid_lse_ptr + pid_b * stride_ml_b + heads * stride_ml_h + pid_s, lse, mask=mask_h)
        base = mid_o_ptr + pid_b * stride_mo_b + pid_s * stride_mo_s
        off = heads * stride_mo_h
        mask_o = mask_h & live  # empty splits store no partial: the merge masks them by their -inf lse
    _store_chunk(base, off, mask_o, 0 * C, acc0 * inv_l[:, None], C)
    _store_chunk(base, off, mask_o, 1 * C, acc1 * inv_l[:, None], C)
    _store_chunk(base, off, mask_o, 2 * C, acc2 * inv_l[:, None], C)
    _store_chunk(base, off, mask_o, 3 * C, acc3 * inv_l[:, None], C)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _merge_kernel(
    mid_o_ptr, mid_lse_ptr, out_ptr, kv_indptr_ptr, v_scale, num_splits, min_chunk,
    stride_mo_b, stride_mo_h, stride_mo_s, stride_ml_b, stride_ml_h, stride_o_b, stride_o_h,
    NUM_HEADS: tl.constexpr, BLOCK_S: tl.constexpr, TILE_S: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    pid_d = tl.program_id(1)
    b = pid_bh // NUM_HEADS
    h = pid_bh % NUM_HEADS
    # Only the splits the split kernel filled (same arithmetic): a short row under a large split
    # count must not pay a loop over hundreds of empty partials.
    seq_len = tl.load(kv_indptr_ptr + b + 1) - tl.load(kv_indptr_ptr + b)
    per_split = (seq_len + num_splits - 1) // num_splits
    chunk = tl.maximum((per_split + BLOCK_N - 1) // BLOCK_N * BLOCK_N, min_chunk)
    active = tl.minimum((seq_len + chunk - 1) // chunk, num_splits)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # the split kernel's partials must be complete and visible

    lse_base = mid_lse_ptr + b * stride_ml_b + h * stride_ml_h
    offs_s = tl.arange(0, BLOCK_S)
    lse_all = tl.load(lse_base + offs_s, mask=offs_s < active, other=float("-inf"))
    m = tl.max(lse_all, 0)
    m = tl.where(m == float("-inf"), 0.0, m)  # empty row: every weight is exp2(-inf) = 0
    denom = tl.sum(tl.exp2(lse_all - m), 0)

    offs_d = pid_d * BLOCK_DV + tl.arange(0, BLOCK_DV)
    acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
    o_base = mid_o_ptr + b * stride_mo_b + h * stride_mo_h
    for s0 in range(0, active, TILE_S):
        offs_t = s0 + tl.arange(0, TILE_S)
        lse_t = tl.load(lse_base + offs_t, mask=offs_t < active, other=float("-inf"))
        w = tl.exp2(lse_t - m)
        part = tl.load(o_base + offs_t[:, None] * stride_mo_s + offs_d[None, :],
                       mask=(lse_t > float("-inf"))[:, None], other=0.0)
        acc += tl.sum(w[:, None] * part, 0)
    o = tl.where(denom > 0.0, acc / tl.where(denom > 0.0, denom, 1.0), 0.0)
    tl.store(out_ptr + b * stride_o_b + h * stride_o_h + offs_d, (o * v_scale).to(out_ptr.dtype.element_ty))


def _check_inputs(q_nope: torch.Tensor, q_rope: torch.Tensor, kv: torch.Tensor,
                  kv_indptr: torch.Tensor, kv_indices: torch.Tensor) -> None:
    # Each shape and stride is read once: this runs on every call (eager decode pays it per layer).
    qs, rs, ks = q_nope.shape, q_rope.shape, kv.shape
    if len(qs) != 3 or qs[2] != D_NOPE or q_nope.stride()[2] != 1:
        raise ValueError(f"q_nope must be [batch, heads, {D_NOPE}] with a unit last stride, got "
                         f"{tuple(qs)} strides {q_nope.stride()}")
    if rs != (qs[0], qs[1], D_ROPE) or q_rope.stride()[2] != 1:
        raise ValueError(f"q_rope must be [batch, heads, {D_ROPE}] with a unit last stride, got {tuple(rs)}")
    if ks[-1] != D_KV or kv.stride()[-1] != 1 or kv.numel() != ks[0] * D_KV:
        raise ValueError(f"kv_cache must be [tokens, {D_KV}] or [tokens, 1, {D_KV}], got {tuple(ks)}")
    if kv_indptr.dtype != torch.int32 or kv_indices.dtype != torch.int32:
        raise ValueError("kv_indptr and kv_indices must be int32")
    if kv_indptr.numel() < qs[0] + 1:
        raise ValueError("kv_indptr needs batch + 1 entries")


def _dot_dtype(kv_dtype: torch.dtype) -> tl.dtype:
    if kv_dtype in (torch.float8_e4m3fn, torch.float16):
        return tl.float16  # exact widening of e4m3 (see the module docstring)
    if kv_dtype == torch.bfloat16:
        # The BF16 baselines of the benchmark. Triton's CPU interpreter computes BF16 dots wrongly
        # (seen with triton 3.9), so there the same function is computed in float32.
        return tl.float32 if _INTERPRET else tl.bfloat16
    raise ValueError(f"unsupported KV dtype {kv_dtype}")


_CUDA_PATH: list = []  # [module] once imported, [None] once it failed (then Triton only)


def _cuda_path(kv: torch.Tensor, q: torch.Tensor, impl: str):
    """The SM90 CUDA module (sibling ``<this module>_cuda``) when it should run, else None. Whether the
    inputs are laid out for it, the module checks as it launches (``LayoutError``)."""
    if impl == "triton" or _INTERPRET or kv.dtype != torch.float8_e4m3fn or not q.is_cuda:
        if impl == "cuda":
            raise ValueError("impl='cuda' needs an FP8 cache on a CUDA device (and no interpreter)")
        return None
    if not _CUDA_PATH:
        try:  # same folder, same naming in kernels/ and in the SGLang patch set's copy
            _CUDA_PATH.append(importlib.import_module(__name__ + "_cuda"))
        except ImportError as e:
            warnings.warn(f"FP8 MLA: CUDA path unavailable ({e}); using the Triton kernel", stacklevel=3)
            _CUDA_PATH.append(None)
    mod = _CUDA_PATH[0]
    if mod is None or (impl == "auto" and not mod.supported(q.get_device())):
        if impl == "cuda":
            raise ValueError("impl='cuda' asked for, but the CUDA path is unavailable on this device")
        return None
    return mod


def mla_decode(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    k_scale: float | torch.Tensor = 1.0,
    v_scale: float = 1.0,
    token_scale: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    config: DecodeConfig | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """MLA decode over a paged (page size 1) latent KV cache; returns ``[batch, heads, 512]``.

    ``q_nope``/``q_rope``: ``[batch, heads, 512/64]`` BF16 (the absorbed query). ``kv_cache``:
    ``[tokens, 576]`` or ``[tokens, 1, 576]`` in ``float8_e4m3fn`` (BF16/FP16 also accepted).
    ``k_scale``: per-tensor dequant scale of K, a float or a one-element device tensor (read in the
    kernel, so no host sync). ``v_scale``: per-tensor scale of V, a float. ``token_scale``: optional
    float32 ``[tokens]``, multiplies both K and V of a token. A row with no tokens returns zeros.
    ``impl``: ``"auto"`` (the CUDA kernel of ``fp8_mla_decode_cuda`` for FP8 on Hopper unless a
    Triton ``config`` is given, else Triton), ``"cuda"`` or ``"triton"``.
    """
    _check_inputs(q_nope, q_rope, kv_cache, kv_indptr, kv_indices)
    batch, num_heads = q_nope.shape[:2]
    cuda = _cuda_path(kv_cache, q_nope, "triton" if (config is not None and impl == "auto") else impl)
    if cuda is not None:
        if out is None:
            out = torch.empty((batch, num_heads, D_NOPE), dtype=q_nope.dtype, device=q_nope.device)
        if batch == 0:
            return out
        try:
            return cuda.mla_decode_cuda(q_nope, q_rope, kv_cache, kv_indptr, kv_indices, sm_scale, k_scale,
                                        v_scale, token_scale, out)
        except cuda.LayoutError as e:  # this call's layout only: the next may suit the CUDA path
            if impl == "cuda":
                raise ValueError(f"impl='cuda' asked for, but the inputs are not laid out for it ({e}): "
                                 "16-byte aligned BF16/FP16 Q and KV rows, float32 scales") from e
        except cuda.CudaKernelError as e:
            if impl == "cuda":
                raise
            warnings.warn(f"FP8 MLA: CUDA path failed ({e}); using the Triton kernel", stacklevel=2)
            _CUDA_PATH[0] = None
    if config is None:
        config = default_config(batch, num_heads, q_nope.device)
    if out is None:
        out = torch.empty((batch, num_heads, D_NOPE), dtype=q_nope.dtype, device=q_nope.device)
    if batch == 0:
        return out
    kv = kv_cache.view(kv_cache.shape[0], D_KV)
    k_scale_in_memory = isinstance(k_scale, torch.Tensor)
    splits = config.num_splits
    # A chunk is whole BLOCK_N steps (at least one), so round the minimum up to that.
    min_chunk = max(1, triton.cdiv(config.min_chunk, config.block_n)) * config.block_n
    use_pdl = config.use_pdl and not _INTERPRET and splits > 1

    if splits > 1:
        mid_o = torch.empty((batch, num_heads, splits, D_NOPE), dtype=torch.float32, device=q_nope.device)
        mid_lse = torch.empty((batch, num_heads, splits), dtype=torch.float32, device=q_nope.device)
    else:
        mid_o = mid_lse = out  # unused: the split kernel writes the output itself
    grid = (triton.cdiv(num_heads, config.block_h), splits, batch)
    _split_kernel[grid](
        q_nope, q_rope, kv, kv_indptr, kv_indices,
        token_scale if token_scale is not None else kv_indptr,
        k_scale if k_scale_in_memory else kv_indptr,
        mid_o, mid_lse, out,
        sm_scale * LOG2E * (1.0 if k_scale_in_memory else float(k_scale)), float(v_scale), min_chunk,
        q_nope.stride(0), q_nope.stride(1), q_rope.stride(0), q_rope.stride(1), kv.stride(0),
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2) if splits > 1 else 0,
        mid_lse.stride(0), mid_lse.stride(1),
        out.stride(0), out.stride(1),
        NUM_HEADS=num_heads, BLOCK_H=config.block_h, BLOCK_N=config.block_n,
        D_NOPE=D_NOPE, D_ROPE=D_ROPE, DOT_DTYPE=_dot_dtype(kv.dtype),
        HAS_TOKEN_SCALE=token_scale is not None, K_SCALE_IN_MEMORY=k_scale_in_memory,
        WRITE_OUTPUT=splits == 1, USE_PDL=use_pdl,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if splits > 1:
        _merge(mid_o, mid_lse, out, kv_indptr, float(v_scale), min_chunk, config, use_pdl)
    return out


def _merge(mid_o: torch.Tensor, mid_lse: torch.Tensor, out: torch.Tensor, kv_indptr: torch.Tensor,
           v_scale: float, min_chunk: int, config: DecodeConfig, use_pdl: bool) -> None:
    batch, num_heads, splits, _ = mid_o.shape
    block_dv = config.merge_block_dv
    grid = (batch * num_heads, D_NOPE // block_dv)
    _merge_kernel[grid](
        mid_o, mid_lse, out, kv_indptr, v_scale, splits, min_chunk,
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1),
        out.stride(0), out.stride(1),
        NUM_HEADS=num_heads, BLOCK_S=triton.next_power_of_2(splits),
        TILE_S=min(32, triton.next_power_of_2(splits)),  # 32 x 128 fp32 partials in flight per step
        BLOCK_DV=block_dv, BLOCK_N=config.block_n, USE_PDL=use_pdl,
        num_warps=4, num_stages=2,
        **({"launch_pdl": True} if use_pdl else {}),
    )


def mla_decode_fp8(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    **kwargs,
) -> torch.Tensor:
    """Convenience form taking the whole query ``[batch, heads, 576]``; see :func:`mla_decode`."""
    return mla_decode(q[..., :D_NOPE], q[..., D_NOPE:], kv_cache, kv_indptr, kv_indices, sm_scale, **kwargs)


def reference_mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    token_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Float32 reference over the dequantised KV, one row at a time; ``[batch, heads, 512]`` fp32."""
    kv = kv_cache.reshape(kv_cache.shape[0], D_KV)
    batch, num_heads = q.shape[:2]
    out = torch.zeros((batch, num_heads, D_NOPE), dtype=torch.float32, device=q.device)
    indptr = kv_indptr.tolist()
    for b in range(batch):
        rows = kv_indices[indptr[b]:indptr[b + 1]].long()
        if rows.numel() == 0:
            continue
        kv_b = kv[rows].float()
        k = kv_b * k_scale
        v = kv_b[:, :D_NOPE] * v_scale
        if token_scale is not None:
            ts = token_scale[rows].float()[:, None]
            k, v = k * ts, v * ts
        scores = (q[b].float() @ k.T) * sm_scale  # [heads, tokens]
        out[b] = torch.softmax(scores, dim=-1) @ v
    return out


__all__ = [
    "D_KV", "D_NOPE", "D_ROPE", "DecodeConfig", "default_config", "mla_decode", "mla_decode_fp8",
    "reference_mla_decode",
]
