# Generated from kernels/fp8_mla_decode_cuda.py by scripts/sync_kernel_copies.py: do not edit this copy.
# Edit kernels/fp8_mla_decode_cuda.py, then run `python3 scripts/sync_kernel_copies.py`.
"""The SM90 path of the FP8 MLA decode: CUDA C++ compiled at first use with NVRTC, launched by ctypes.

Same function and layout as :mod:`kernels.fp8_mla_decode` (whose ``mla_decode`` calls this one on
Hopper): one 576-byte e4m3 row per token (512 latent + 64 rope), page size 1, rows picked by
``kv_indptr``/``kv_indices``. Why a second kernel: Triton 3.6 gathers the FP8 V operand from shared
memory a byte at a time (benchmarks/results/fp8_mla_decode_triton_2026-11-29.md has the SASS), and
there is no way to tell it otherwise. Here the shared-memory layout and every operand register are
explicit:

- One CTA = 4 warps = one (head tile of 16, KV split, batch row). The KV rows of a 64-token stage
  are gathered with ``cp.async`` (a warp copies one 512-byte latent part per instruction; 2 stages,
  2 CTAs per SM), the latent part XOR-swizzled by 16-byte chunk so that both reads below are free
  of bank conflicts.
- Q.K^T (``mma.sync`` m16n8k16, FP16 in, FP32 out; each warp 16 tokens): the contraction order over
  the 576 channels is free, so each thread reads 16 *consecutive* bytes of its token's row
  (one ``LDS.128``) and uses 4 of them per MMA; Q is permuted to the same order once per CTA, 24 of
  its 36 k-steps held in registers, the rest read with ``ldmatrix``. No byte loads, no transposes.
- P.V (each warp 128 of the 512 output channels): the contraction runs over tokens, which the rows
  do not hold contiguously. Each thread reads 16 consecutive bytes of 4 token rows and pairs the
  bytes of two tokens with ``PRMT``; the output-channel order is permuted instead (thread column g
  of n-tile j is channel 16 g + j) and undone when the tile is written.
- e4m3 -> f16 is one ``cvt.rn.f16x2.e4m3x2`` per pair and exact; Q is pre-scaled by
  ``sm_scale * k_scale * log2(e)`` (FP16, as in the Triton kernel), P is FP16, sums are FP32. The
  softmax max moves only when a score passes it by 8 (log2 units), so most steps take one barrier.
- Split partials (FP32 + log2-sum-exp): with up to 16 splits the last split CTA of a row merges them
  (one launch), its weights computed once and up to 32 partial loads in flight per thread (a merge
  with two dependent L2 round trips per head had cost ~10 us at the end of each call); with more
  a second kernel does, 64 channels per CTA. One split writes BF16 directly.
- Small batches (while one wave gives every (row, head tile) a cluster: batch <= 32 at 8/16 heads;
  benchmarks/results/fp8_mla_small_batch_plan.md): ``mla_fp8_split_cl``, the same CTA in clusters of
  8 (``__cluster_dims__``), one launch. The splits of a cluster merge through distributed shared
  memory (each CTA's O / l is already staged in its shared memory; rank r reduces channels
  64 r .. 64 r + 63 of all heads over the 8 CTAs); a row whose tokens fit one cluster is then written.
  Longer rows spread over up to 64 clusters; each writes one merged partial (8x fewer partials than
  splits) and counts itself in; the last cluster of the row merges them, again 8 CTAs in parallel,
  and resets its counter. The split count depends on batch and heads only (one wave of the resident
  clusters the driver reports), so one CUDA graph serves every length; ``CudaConfig(cluster=0)``
  is the plan before it.

Measured on one H200 against FlashMLA's FP8 kernel on the same pages
(benchmarks/results/fp8_mla_decode.md): faster at 8/16 heads with long rows (up to 1.29x, 3.3-3.7
TB/s at batch >= 64 and 32K+), slower on short rows and at 64/128 heads, where FlashMLA's FP8 wgmma
tiles of 64 heads do 4-8x less work per token than 16-head mma.sync tiles.

Where it runs: ``path_for`` (sm_90 only; the same source builds for sm_89, sm_100a and sm_120 and is
compiled for them in tests/gpu/test_fp8_mla_cuda_host.py, but the dispatch gives those GPUs Triton).

Host side: compiled modules, functions, the split workspace and each (batch, heads) launch plan are
cached per device; each tensor attribute is read once per call (the layout check uses the values
that get packed); arguments are packed into a reused buffer and cuLaunchKernel is called without
ctypes argtypes; no allocation (besides the output when none is given) and no device sync per call.
An eager call costs 0.6-0.7x the host time of the 2026-11-30 version in the same process
(benchmarks/results/fp8_mla_cuda_2026-12-01/).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import struct
import sys
import threading
from dataclasses import dataclass

import torch

D_NOPE = 512
D_ROPE = 64
D_KV = D_NOPE + D_ROPE
LOG2E = 1.4426950408889634
HEAD_TILE = 16  # heads per CTA (the MMA's M); 8 heads are padded
MERGE_COLS = 64  # output channels per CTA of the separate merge kernel (the source's MERGE_COLS)
FUSED_MERGE_LIMIT = 16  # most splits the fused merge handles (its weights: 16 heads x 16 splits)
MAX_SPLITS = 512  # most splits of a row (the merge kernel's weight table; 64 clusters of 8)
CLUSTER_SIZES = (0, 2, 4, 8)  # split CTAs per cluster of the small-batch kernel; 0: no small-batch plan

CUDA_SOURCE = r"""
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef long long i64;

#ifndef STAGES
#define STAGES 2
#endif
#ifndef BLOCK_N
#define BLOCK_N 64       /* tokens per pipeline stage: 32 or 64 */
#endif
#ifndef MIN_CTAS
#define MIN_CTAS 2       /* CTAs per SM the registers are budgeted for */
#endif
#ifndef Q_REG_KSTEPS
/* k-steps of Q kept in registers (the rest is read with ldmatrix each step): 24 is the most that
   fits 2 CTAs per SM without spills, and measured fastest of 0/16/24 */
#define Q_REG_KSTEPS 24
#endif
#ifndef CLUSTER
#define CLUSTER 8        /* split CTAs per cluster of the small-batch kernel: 2, 4 or 8 */
#endif
#if CLUSTER != 2 && CLUSTER != 4 && CLUSTER != 8
#error "CLUSTER must be 2, 4 or 8"
#endif
#define NW 4
#define THREADS (NW * 32)
#define TPW (BLOCK_N / NW)     /* tokens per warp in Q.K^T: 8 or 16 */
#define NT (TPW / 8)           /* its n-tiles of 8 */
#define KQ (BLOCK_N / 16)      /* k-steps of 16 tokens in P.V */
#define P_ROW (BLOCK_N * 2)    /* bytes of a row (head) of P */
#define ROW 576
#define NOPE_CHUNKS 32   /* 16-byte chunks of the latent part of a row */
#define ALL_CHUNKS 36
#define KSTEPS 36        /* 576 / 16 */

/* Shared-memory map (bytes): [nope stages][rope stages][Q][P][row offsets][token scales][reductions]
   [lse of the 16 heads, the cluster flag] */
#define SM_NOPE 0
#define SM_ROPE (SM_NOPE + STAGES * BLOCK_N * 512)
#define SM_Q (SM_ROPE + STAGES * BLOCK_N * 64)
#define SM_P (SM_Q + KSTEPS * 512)
#define SM_IDX (SM_P + 16 * P_ROW)
#define SM_TS (SM_IDX + STAGES * BLOCK_N * 8)
#define SM_RED (SM_TS + STAGES * BLOCK_N * 4)
#define SM_CL (SM_RED + 2 * NW * 16 * 4 + NW * 4)  /* 16 lse, then the cluster's flag */
#define SM_TOTAL (SM_CL + 16 * 4 + 16)

__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 r;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
__device__ __forceinline__ void cp_async16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

/* Both halves of a word: 4 e4m3 bytes -> two f16x2 (the high half straight from its register half,
   no shift: cutlass converts this way too). */
__device__ __forceinline__ void e4m3x4_to_f16x4(u32 w, u32& lo, u32& hi) {
  asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }"
      : "=r"(lo), "=r"(hi) : "r"(w));
}
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& a0, u32& a1, u32& a2, u32& a3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float q_to_float(u16 v) {
#ifdef Q_FP16
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f;
#else
  return __uint_as_float(((u32)v) << 16);
#endif
}
__device__ __forceinline__ u16 float_to_out(float f) {
  u16 r;
#ifdef Q_FP16
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
#else
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
#endif
  return r;
}

/* The fused merge of a row (the last split CTA of the row merges): loads from L2 (__ldcg, not L1:
   other SMs wrote the partials), HB heads x MS splits of this thread's 4 channels in flight at once,
   so a row costs 16 / HB round trips to L2 instead of two per head. Weights w_s[h][sp] are already
   normalised (and carry v_scale); slots past the active splits are 0 and not loaded. */
template <int HB, int MS>
__device__ __forceinline__ void fused_merge_columns(const float* __restrict__ mid_o, const float* w_s,
                                                    u16* __restrict__ out_row, int heads_here, int active,
                                                    int num_splits, i64 s_o_h, int c4) {
  for (int h0 = 0; h0 < heads_here; h0 += HB) {
    float4 p[HB][MS];
#pragma unroll
    for (int hh = 0; hh < HB; ++hh)
#pragma unroll
      for (int sp = 0; sp < MS; ++sp)
        p[hh][sp] = (h0 + hh < heads_here && sp < active)
                        ? __ldcg((const float4*)(mid_o + ((i64)(h0 + hh) * num_splits + sp) * 512 + c4))
                        : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int hh = 0; hh < HB; ++hh) {
      if (h0 + hh < heads_here) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int sp = 0; sp < MS; ++sp) {
          const float w = w_s[(h0 + hh) * 16 + sp];
          acc.x += w * p[hh][sp].x; acc.y += w * p[hh][sp].y; acc.z += w * p[hh][sp].z; acc.w += w * p[hh][sp].w;
        }
        uint2 pk;
        pk.x = (u32)float_to_out(acc.x) | ((u32)float_to_out(acc.y) << 16);
        pk.y = (u32)float_to_out(acc.z) | ((u32)float_to_out(acc.w) << 16);
        *(uint2*)(out_row + (h0 + hh) * s_o_h + c4) = pk;
      }
    }
  }
}

/* XOR swizzle of the latent part's 16-byte chunks by row, chosen so that the Q.K^T reads (rows g,
   g+1 x 4 consecutive chunks per 8 lanes) and the P.V reads (rows 2t, 2t+2, .. x 2 chunks per 8
   lanes) both hit 8 distinct 4-bank groups. */
__device__ __forceinline__ int swz(int row) { return ((row & 1) << 2) ^ (((row >> 1) & 3) << 1); }

/* P is [16 heads][BLOCK_N tokens] FP16, 16-byte chunks XOR-swizzled by head so that ldmatrix (8 heads x
   one chunk) is free of bank conflicts: 8 chunks a row (BLOCK_N 64) or 4 (BLOCK_N 32, two rows a line). */
__device__ __forceinline__ int p_chunk(int head, int chunk) {
  return BLOCK_N == 64 ? chunk ^ (head & 7) : chunk ^ ((head >> 1) & 3);
}

/* The split's token range, the same arithmetic in the split and the merge kernels. */
__device__ __forceinline__ int split_chunk(int seq_len, int num_splits, int min_chunk) {
  int per = (seq_len + num_splits - 1) / num_splits;
  int chunk = (per + BLOCK_N - 1) / BLOCK_N * BLOCK_N;
  return chunk > min_chunk ? chunk : min_chunk;
}

/* Shared by every kernel of the module (the split kernels' dynamic shared memory). */
extern __shared__ __align__(128) u8 smem[];

/* One split's attention, from its token range to O / l staged in shared memory: [16 heads][512] fp32 at
   offset 0 (over the KV stages, which are done with), scaled by out_scale, and each head's log2-sum-exp
   (m + log2 l) in s_lse[16]. Ends without a barrier: the caller syncs (its CTA or its cluster). */
__device__ __forceinline__ void attend(const u16* __restrict__ q_nope, const u16* __restrict__ q_rope,
                                       const u8* __restrict__ kv, const int* __restrict__ indices,
                                       const float* __restrict__ token_scale, const float* __restrict__ k_scale_ptr,
                                       float qk_scale, float out_scale, int num_heads, int head0, int b,
                                       int row_start, int lo, int hi, i64 s_qn_b, i64 s_qn_h, i64 s_qr_b,
                                       i64 s_qr_h, i64 s_kv)
{
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n_steps = (hi - lo + BLOCK_N - 1) / BLOCK_N;
  const int* rows = indices + row_start;
  const bool has_ts = token_scale != nullptr;

  i64* s_idx = (i64*)(smem + SM_IDX);
  float* s_ts = (float*)(smem + SM_TS);
  float* red_max = (float*)(smem + SM_RED);
  float* red_sum = red_max + NW * 16;
  int* flags = (int*)(red_sum + NW * 16);

  /* Row offsets (and token scales) of a stage go through shared memory, loaded one stage early
     into a register by threads 0..BLOCK_N-1, so the copy issue never waits on an index load.
     Tokens past the split's end read its first row again: a real row (finite unless the attended
     data is not), masked to -inf in S, so no zero-fill and no per-copy predicate. */
  const int first_row = rows[lo];
  auto idx_of = [&](int step) -> int {  /* pool row of this thread's token in `step`, or -1 */
    int tok = lo + step * BLOCK_N + tid;
    return (tid < BLOCK_N && step < n_steps && tok < hi) ? rows[tok] : -1;
  };
  auto publish = [&](int step, int r) {
    if (tid < BLOCK_N) {
      s_idx[(step % STAGES) * BLOCK_N + tid] = (i64)(r < 0 ? first_row : r) * s_kv;
      if (has_ts) s_ts[(step % STAGES) * BLOCK_N + tid] = r < 0 ? 0.f : token_scale[r];
    }
  };
  /* Warp w copies the rows of its TPW tokens: one instruction per latent part (lane = 16-byte
     chunk, 512 contiguous bytes), then their rope parts (4 lanes a row). A token's swizzle depends
     only on its low 3 bits, i.e. on the unrolled loop counter. */
  auto issue = [&](int step) {
    if (step < n_steps) {
      const int slot = step % STAGES;
      const i64* offs = s_idx + slot * BLOCK_N + warp * TPW;
      const u32 nope = smem_addr(smem + SM_NOPE + (slot * BLOCK_N + warp * TPW) * 512);
      const u32 rope = smem_addr(smem + SM_ROPE + (slot * BLOCK_N + warp * TPW) * 64);
      const u8* src_lane = kv + lane * 16;
#pragma unroll
      for (int it = 0; it < TPW; ++it) cp_async16(nope + it * 512 + ((lane ^ swz(it)) << 4), src_lane + offs[it]);
#pragma unroll
      for (int it = 0; it < TPW / 8; ++it) {
        const int tok = it * 8 + (lane >> 2);
        cp_async16(rope + tok * 64 + ((lane & 3) << 4), kv + offs[tok] + 512 + (lane & 3) * 16);
      }
    }
    cp_commit();  /* always, so that group counting stays uniform */
  };

  /* Prologue: indices of the first STAGES-1 steps, then their copies, then Q. */
  for (int s = 0; s < STAGES - 1; ++s) publish(s, idx_of(s));
  int next_idx = idx_of(STAGES - 1);
  __syncthreads();
  for (int s = 0; s < STAGES - 1; ++s) issue(s);

  /* Q: pre-scaled, FP16, in MMA order. K-step ks = 4 c + s covers channels 64 c + 16 j + 4 s + e
     (j = 0..3, e = 0..3); logical k (0..15) of the MMA = 8 * (e >> 1) + 2 j + (e & 1). Stored as
     [ks][k half][head][8 halves] so one ldmatrix.x4 yields the A fragment. Read as 16-byte pieces
     (8 channels: two values of s), all 9 per thread in flight at once. */
  {
    const float scale = qk_scale * (k_scale_ptr != nullptr ? *k_scale_ptr : 1.f);
    u32* qs = (u32*)(smem + SM_Q);
    uint4 raw[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) {  /* 16 heads x 72 pieces = 1152 = 9 x 128 */
      const int r = i * THREADS + tid, h = r / 72, p8 = (r % 72) * 8;
      raw[i] = make_uint4(0, 0, 0, 0);
      if (head0 + h < num_heads)
        raw[i] = p8 < 512 ? *(const uint4*)(q_nope + b * s_qn_b + (head0 + h) * s_qn_h + p8)
                          : *(const uint4*)(q_rope + b * s_qr_b + (head0 + h) * s_qr_h + (p8 - 512));
    }
#pragma unroll
    for (int i = 0; i < 9; ++i) {
      const int r = i * THREADS + tid, h = r / 72, p8 = (r % 72) * 8;
      const int c = p8 >> 6, j = (p8 >> 4) & 3, s0 = (p8 >> 2) & 3;  /* s0 is even: s0, s0 + 1 */
      const u32 w[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {  /* word k = channels p8 + 2k, +1: s = s0 + k / 2, khalf = k % 2 */
        const int ks = 4 * c + s0 + (k >> 1), khalf = k & 1;
        const float v0 = q_to_float((u16)w[k]) * scale, v1 = q_to_float((u16)(w[k] >> 16)) * scale;
        qs[((ks * 2 + khalf) * 16 + h) * 4 + j] = pack_f16x2(v0, v1);
      }
    }
  }

  float oacc[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) oacc[j][0] = oacc[j][1] = oacc[j][2] = oacc[j][3] = 0.f;
  float m_run[2] = {-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)};
  float l_run[2] = {0.f, 0.f};

  const u32 q_base = smem_addr(smem + SM_Q) + (((lane >> 4) & 1) * 256) + ((lane & 7) + ((lane >> 3) & 1) * 8) * 16;
  u16* ps = (u16*)(smem + SM_P);
  const u32 p_base = smem_addr(ps);

  /* The first Q_REG_KSTEPS k-steps of Q stay in registers for the whole split (4 registers each). */
  u32 qreg[Q_REG_KSTEPS > 0 ? Q_REG_KSTEPS : 1][4];
  __syncthreads();  /* Q staged */
#pragma unroll
  for (int ks = 0; ks < Q_REG_KSTEPS; ++ks)
    ldmatrix_x4(q_base + ks * 512, qreg[ks][0], qreg[ks][1], qreg[ks][2], qreg[ks][3]);

  for (int step = 0; step < n_steps; ++step) {
    const int slot = step % STAGES;
    cp_wait<STAGES - 2>();
    publish(step + STAGES - 1, next_idx);
    next_idx = idx_of(step + STAGES);
    __syncthreads();  /* stage `step` landed for everyone; the slot of step-1 is free again */
    issue(step + STAGES - 1);

    const u8* nope = smem + SM_NOPE + slot * BLOCK_N * 512;
    const u8* rope = smem + SM_ROPE + slot * BLOCK_N * 64;

    /* ---- S = Q K^T for this warp's TPW tokens (NT n-tiles of 8); even and odd k-steps go to two
       accumulators so that the MMA dependency chains are half as long ---- */
    float sacc[NT][2][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) sacc[nt][h2][0] = sacc[nt][h2][1] = sacc[nt][h2][2] = sacc[nt][h2][3] = 0.f;
#pragma unroll
    for (int c = 0; c < 9; ++c) {
      uint4 kb[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int tok = warp * TPW + nt * 8 + g;
        kb[nt] = c < 8 ? *(const uint4*)(nope + tok * 512 + (((4 * c + t) ^ swz(tok)) << 4))
                       : *(const uint4*)(rope + tok * 64 + (t << 4));
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        u32 a0, a1, a2, a3;
        if (4 * c + s < Q_REG_KSTEPS) {
          a0 = qreg[4 * c + s][0]; a1 = qreg[4 * c + s][1]; a2 = qreg[4 * c + s][2]; a3 = qreg[4 * c + s][3];
        } else {
          ldmatrix_x4(q_base + (4 * c + s) * 512, a0, a1, a2, a3);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const u32 w = s == 0 ? kb[nt].x : s == 1 ? kb[nt].y : s == 2 ? kb[nt].z : kb[nt].w;
#ifndef SKIP_QK
          u32 b0, b1;
          e4m3x4_to_f16x4(w, b0, b1);
          mma16816(sacc[nt][s & 1], a0, a1, a2, a3, b0, b1);
#else
          sacc[nt][0][0] += __uint_as_float(w & 0x3f003f00) + __uint_as_float(a0 & 0x3f003f00);
#endif
        }
      }
    }

    /* ---- online softmax across the 4 warps (rows g and g+8 of this thread) ---- */
    const int tok_base = lo + step * BLOCK_N + warp * TPW;
    float sc[NT][4], tsv[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int k = nt * 8 + 2 * t + e;
        const bool live = tok_base + k < hi;
        const float ts = has_ts ? s_ts[slot * BLOCK_N + warp * TPW + k] : 1.f;
        tsv[nt][e] = ts;
        sc[nt][e] = live ? (sacc[nt][0][e] + sacc[nt][1][e]) * ts : -__int_as_float(0x7f800000);
        sc[nt][2 + e] = live ? (sacc[nt][0][2 + e] + sacc[nt][1][2 + e]) * ts : -__int_as_float(0x7f800000);
      }
    /* The reference max m_run moves only when a score exceeds it by more than 8 (log2 units): P is
       then <= 256 (fine in FP16), O and l need no rescale, and one barrier per step suffices. A
       warp whose scores pass the bound raises a flag; then every warp moves the reference to the
       new maximum, rescales, and rewrites its P behind a second barrier: every row's first step,
       rarely later. l is kept per thread and summed once at the end. */
    float mx[2] = {-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mx[0] = fmaxf(mx[0], fmaxf(sc[nt][0], sc[nt][1]));
      mx[1] = fmaxf(mx[1], fmaxf(sc[nt][2], sc[nt][3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 2));
    }
    const bool warp_over = __any_sync(0xffffffff, mx[0] > m_run[0] + 8.f || mx[1] > m_run[1] + 8.f);
    if (t == 0) { red_max[warp * 16 + g] = mx[0]; red_max[warp * 16 + g + 8] = mx[1]; }
    if (lane == 0) flags[warp] = warp_over ? 1 : 0;
    float p[NT][4];
    auto write_p = [&]() {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) p[nt][e] = fast_exp2(sc[nt][e] - m_run[e >> 1]);
        /* P (with the token scale folded in: V_t = ts_t v8_t) to shared memory, rows swizzled. */
        const int ck = warp * NT + nt;  /* the 16-byte chunk of these 8 tokens */
        *(u32*)((u8*)ps + g * P_ROW + p_chunk(g, ck) * 16 + t * 4) =
            pack_f16x2(p[nt][0] * tsv[nt][0], p[nt][1] * tsv[nt][1]);
        *(u32*)((u8*)ps + (g + 8) * P_ROW + p_chunk(g + 8, ck) * 16 + t * 4) =
            pack_f16x2(p[nt][2] * tsv[nt][0], p[nt][3] * tsv[nt][1]);
      }
    };
    if (!warp_over) write_p();
    __syncthreads();
    if (flags[0] | flags[1] | flags[2] | flags[3]) {  /* CTA-uniform */
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m = m_run[r];
#pragma unroll
        for (int w = 0; w < NW; ++w) m = fmaxf(m, red_max[w * 16 + g + 8 * r]);
        alpha[r] = fast_exp2(m_run[r] - m);  /* 0 on the first step (m_run = -inf) */
        m_run[r] = m;  /* finite: every step has a live token */
        l_run[r] *= alpha[r];
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        oacc[j][0] *= alpha[0]; oacc[j][1] *= alpha[0];
        oacc[j][2] *= alpha[1]; oacc[j][3] *= alpha[1];
      }
      write_p();
      __syncthreads();
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      l_run[0] += p[nt][0] + p[nt][1];
      l_run[1] += p[nt][2] + p[nt][3];
    }

    /* ---- O += P V for this warp's 128 channels; n-tile j, column g = channel 128 w + 16 g + j ---- */
#ifndef SKIP_PV
#pragma unroll
    for (int kq = 0; kq < KQ; ++kq) {
      u32 a0, a1, a2, a3;
      {
        const int h = (lane & 7) + ((lane >> 3) & 1) * 8;
        const int ck = 2 * kq + (lane >> 4);
        ldmatrix_x4(p_base + h * P_ROW + (p_chunk(h, ck) << 4), a0, a1, a2, a3);
      }
      const int r0 = kq * 16 + 2 * t;
      const int cw = warp * 8 + g;
      const uint4 v0 = *(const uint4*)(nope + r0 * 512 + ((cw ^ swz(r0)) << 4));
      const uint4 v1 = *(const uint4*)(nope + (r0 + 1) * 512 + ((cw ^ swz(r0 + 1)) << 4));
      const uint4 v8 = *(const uint4*)(nope + (r0 + 8) * 512 + ((cw ^ swz(r0 + 8)) << 4));
      const uint4 v9 = *(const uint4*)(nope + (r0 + 9) * 512 + ((cw ^ swz(r0 + 9)) << 4));
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const u32 x0 = q == 0 ? v0.x : q == 1 ? v0.y : q == 2 ? v0.z : v0.w;
        const u32 x1 = q == 0 ? v1.x : q == 1 ? v1.y : q == 2 ? v1.z : v1.w;
        const u32 x8 = q == 0 ? v8.x : q == 1 ? v8.y : q == 2 ? v8.z : v8.w;
        const u32 x9 = q == 0 ? v9.x : q == 1 ? v9.y : q == 2 ? v9.z : v9.w;
        u32 c0, c1, c2, c3, d0, d1, d2, d3;  /* cK: tokens 2t, 2t+1 of channel 4q+K; dK: tokens 2t+8, 2t+9 */
        e4m3x4_to_f16x4(prmt(x0, x1, 0x5140), c0, c1);
        e4m3x4_to_f16x4(prmt(x0, x1, 0x7362), c2, c3);
        e4m3x4_to_f16x4(prmt(x8, x9, 0x5140), d0, d1);
        e4m3x4_to_f16x4(prmt(x8, x9, 0x7362), d2, d3);
        mma16816(oacc[4 * q + 0], a0, a1, a2, a3, c0, d0);
        mma16816(oacc[4 * q + 1], a0, a1, a2, a3, c1, d1);
        mma16816(oacc[4 * q + 2], a0, a1, a2, a3, c2, d2);
        mma16816(oacc[4 * q + 3], a0, a1, a2, a3, c3, d3);
      }
    }
#endif
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffff, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffff, l_run[r], 2);
  }
  if (t == 0) { red_sum[warp * 16 + g] = l_run[0]; red_sum[warp * 16 + g + 8] = l_run[1]; }
  cp_wait<0>();
  __syncthreads();  /* the KV stages are reused below to stage the output */
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) l += red_sum[w * 16 + g + 8 * r];
    l_run[r] = l;
  }

  /* ---- epilogue: O / l through shared memory (fp32 [16][512]) for coalesced stores ---- */
  float* o_s = (float*)smem;
  float inv_l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) inv_l[r] = (l_run[r] > 0.f ? 1.f / l_run[r] : 0.f) * out_scale;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int c0 = warp * 128 + 16 * (2 * t) + j, c1 = c0 + 16;
    o_s[g * 512 + c0] = oacc[j][0] * inv_l[0];
    o_s[g * 512 + c1] = oacc[j][1] * inv_l[0];
    o_s[(g + 8) * 512 + c0] = oacc[j][2] * inv_l[1];
    o_s[(g + 8) * 512 + c1] = oacc[j][3] * inv_l[1];
  }
  if (t == 0 && warp == 0) {
    float* s_lse = (float*)(smem + SM_CL);
    s_lse[g] = m_run[0] + __log2f(l_run[0]);
    s_lse[g + 8] = m_run[1] + __log2f(l_run[1]);
  }
}

/* The split's token range and the row it reads: the same arithmetic in every kernel. */
#define ROW_RANGE                                                          \
  const int row_start = indptr[b];                                        \
  const int seq_len = indptr[b + 1] - row_start;                          \
  const int chunk = split_chunk(seq_len, num_splits, min_chunk);          \
  const int lo = split * chunk;                                           \
  const int hi = min(lo + chunk, seq_len)

#define SPLIT_PARAMS                                                                                        \
  const u16* __restrict__ q_nope, const u16* __restrict__ q_rope, const u8* __restrict__ kv,               \
  const int* __restrict__ indptr, const int* __restrict__ indices, const float* __restrict__ token_scale,  \
  const float* __restrict__ k_scale_ptr, float* __restrict__ mid_o, float* __restrict__ mid_lse,           \
  u16* __restrict__ out, int* __restrict__ arrivals, float qk_scale, float v_scale, int min_chunk,         \
  int num_heads, i64 s_qn_b, i64 s_qn_h, i64 s_qr_b, i64 s_qr_h, i64 s_kv, i64 s_o_b, i64 s_o_h

/* The split kernel of the large-batch plan: grid (head tiles, splits, batch), one CTA per (tile, split,
   row). One split writes the output; up to FUSED_MERGE_LIMIT the last split CTA of a row merges; more
   leave their partials to mla_fp8_merge. */
extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS) mla_fp8_split(SPLIT_PARAMS)
{
  const int tid = threadIdx.x;
  const int head0 = blockIdx.x * 16;
  const int split = blockIdx.y, num_splits = gridDim.y;
  const int b = blockIdx.z;
  ROW_RANGE;
  const bool write_out = num_splits == 1;
  const i64 ml_base = ((i64)b * num_heads + head0) * num_splits + split;  /* + h * num_splits */

  if (lo >= hi) {  /* an empty split: only its "nothing here" marker (or zeros for an empty row) */
    if (write_out || (arrivals != nullptr && seq_len == 0 && split == 0)) {
      for (int i = tid; i < 16 * 512; i += THREADS) {
        int h = i / 512, c = i % 512;
        if (head0 + h < num_heads) out[b * s_o_b + (head0 + h) * s_o_h + c] = 0;
      }
    } else if (tid < 16 && head0 + tid < num_heads) {
      mid_lse[ml_base + (i64)tid * num_splits] = -__int_as_float(0x7f800000);
    }
    return;
  }
  attend(q_nope, q_rope, kv, indices, token_scale, k_scale_ptr, qk_scale, write_out ? v_scale : 1.f, num_heads,
         head0, b, row_start, lo, hi, s_qn_b, s_qn_h, s_qr_b, s_qr_h, s_kv);
  const float* o_s = (const float*)smem;
  __syncthreads();
  if (!write_out && tid < 16 && head0 + tid < num_heads)
    mid_lse[ml_base + (i64)tid * num_splits] = ((const float*)(smem + SM_CL))[tid];
  for (int i = tid; i < 16 * 128; i += THREADS) {  /* 16 heads x 128 float4 */
    const int h = i >> 7, c4 = (i & 127) * 4;
    if (head0 + h >= num_heads) continue;
    const float4 v = *(const float4*)(o_s + h * 512 + c4);
    if (write_out) {
      u16* dst = out + b * s_o_b + (head0 + h) * s_o_h + c4;
      uint2 pk;
      pk.x = (u32)float_to_out(v.x) | ((u32)float_to_out(v.y) << 16);
      pk.y = (u32)float_to_out(v.z) | ((u32)float_to_out(v.w) << 16);
      *(uint2*)dst = pk;
    } else {
      *(float4*)(mid_o + (ml_base + (i64)h * num_splits) * 512 + c4) = v;
    }
  }
  if (write_out || arrivals == nullptr) return;

  /* Fused merge (few splits): the last of the row's active splits to finish merges them, so no
     second launch. Each CTA publishes its partial (fence), then counts itself in; the counter is
     reset by the merging CTA for the next call (CUDA-graph safe). */
  __shared__ int is_last;
  __threadfence();
  __syncthreads();
  const int active = min((seq_len + chunk - 1) / chunk, num_splits);
  int* counter = arrivals + b * gridDim.x + blockIdx.x;
  if (tid == 0) {
    const int prev = atomicAdd(counter, 1);
    is_last = prev == active - 1;
    if (is_last) *counter = 0;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const float NEG_INF = -__int_as_float(0x7f800000);
  const i64 row_base = ((i64)b * num_heads + head0) * num_splits;
  /* Weights first, all 16 x active log-sum-exps loaded at once: 8 threads a head, 2 splits each
     (active <= 16 here), normalised with v_scale into shared memory (the output staging is done). */
  float* w_s = (float*)smem;
  {
    const int h = tid >> 3, j = tid & 7;
    const bool live = head0 + h < num_heads;
    const float* lse = mid_lse + row_base + (i64)h * num_splits;
    const float l0 = live && j < active ? __ldcg(lse + j) : NEG_INF;
    const float l1 = live && j + 8 < active ? __ldcg(lse + j + 8) : NEG_INF;
    float m = fmaxf(l0, l1);
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));  /* within the 8 */
    const float w0 = l0 == NEG_INF ? 0.f : fast_exp2(l0 - m), w1 = l1 == NEG_INF ? 0.f : fast_exp2(l1 - m);
    float den = w0 + w1;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) den += __shfl_xor_sync(0xffffffff, den, o);
    const float k = den > 0.f ? v_scale / den : 0.f;
    w_s[h * 16 + j] = w0 * k;
    w_s[h * 16 + j + 8] = w1 * k;
  }
  __syncthreads();
  const int heads_here = min(16, num_heads - head0);
  const float* src = mid_o + row_base * 512;
  u16* dst = out + b * s_o_b + head0 * s_o_h;
  static_assert(THREADS * 4 == 512, "one thread a float4 column of the 512 channels");
  if (active <= 4) fused_merge_columns<8, 4>(src, w_s, dst, heads_here, active, num_splits, s_o_h, tid * 4);
  else if (active <= 8) fused_merge_columns<4, 8>(src, w_s, dst, heads_here, active, num_splits, s_o_h, tid * 4);
  else fused_merge_columns<2, 16>(src, w_s, dst, heads_here, active, num_splits, s_o_h, tid * 4);
}

#if __CUDA_ARCH__ >= 900
/* ---- The small-batch plan: a cluster of CLUSTER split CTAs per (head tile, row) merges through
   distributed shared memory, and the clusters of a row through the workspace, in the same launch ---- */
__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
/* Every thread of the cluster: its earlier shared (and, with a fence before, global) writes are seen by
   every thread of the cluster after the barrier. */
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ u32 map_rank(u32 addr, u32 rank) {  /* our shared address in CTA `rank` */
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ float ld_cluster(u32 addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float4 ld_cluster4(u32 addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_cluster(u32 addr, int v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void store_out4(u16* dst, float4 v, float k) {
  uint2 pk;
  pk.x = (u32)float_to_out(v.x * k) | ((u32)float_to_out(v.y * k) << 16);
  pk.y = (u32)float_to_out(v.z * k) | ((u32)float_to_out(v.w * k) << 16);
  *(uint2*)dst = pk;
}

/* Columns of a cluster rank's slice, and float4s of it per thread: thread (head tid / 8, q = tid % 8)
   takes float4 f * 8 + q of the slice, f < CL_F4, so that 8 threads of a head read 128 contiguous bytes. */
#define CL_COLS (512 / CLUSTER)
#define CL_F4 (CL_COLS / 32)
#define CL_BATCH (32 / CL_F4)  /* partials a thread loads at once in the row's merge: 32 float4 in flight */

/* The split kernel of the small-batch plan. Grid (head tiles, splits, batch), clusters of CLUSTER
   consecutive splits; every CTA of a cluster with tokens takes part in its merge (one without tokens
   too, with an lse of -inf), a cluster with none exits at once. Each CTA stages O / l and its lse
   (attend); after a cluster barrier, rank r merges channels [r CL_COLS, (r + 1) CL_COLS) of all 16 heads
   over the cluster's CTAs, reading their shared memory. A row whose tokens fit one cluster is done: the
   output is written. Otherwise each cluster writes its merged partial (fp32 + lse) to the workspace,
   [b][head][cluster][512], and counts itself in at the (row, tile) counter; the last cluster to arrive
   merges the row's clusters, rank r again its channels, and resets the counter (CUDA-graph safe). The
   split count depends on batch and heads only; lengths are read here. */
extern "C" __global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(THREADS, MIN_CTAS)
mla_fp8_split_cl(SPLIT_PARAMS)
{
  const int tid = threadIdx.x;
  const int head0 = blockIdx.x * 16;
  const int split = blockIdx.y, num_splits = gridDim.y;
  const int b = blockIdx.z;
  ROW_RANGE;
  const float NEG_INF = -__int_as_float(0x7f800000);
  const int active = seq_len > 0 ? min((seq_len + chunk - 1) / chunk, num_splits) : 0;
  const int cl = split / CLUSTER, n_cl = num_splits / CLUSTER;
  const int n_act = (active + CLUSTER - 1) / CLUSTER;  /* clusters of the row with tokens */
  if (cl >= n_act) {  /* the whole cluster is past the row's end (uniform in the cluster) */
    if (seq_len == 0 && split == 0) {
      for (int i = tid; i < 16 * 512; i += THREADS) {
        const int h = i / 512, c = i % 512;
        if (head0 + h < num_heads) out[b * s_o_b + (head0 + h) * s_o_h + c] = 0;
      }
    }
    return;
  }
  float* s_lse = (float*)(smem + SM_CL);
  if (lo < hi)
    attend(q_nope, q_rope, kv, indices, token_scale, k_scale_ptr, qk_scale, 1.f, num_heads, head0, b, row_start,
           lo, hi, s_qn_b, s_qn_h, s_qr_b, s_qr_h, s_kv);
  else if (tid < 16)
    s_lse[tid] = NEG_INF;  /* no tokens here: weight 0, its staging area is never read */
  cluster_sync();  /* every CTA's O / l and lse staged */

  const u32 rank = cluster_rank();
  const int h = tid >> 3, q = tid & 7;
  const int col0 = (int)rank * CL_COLS + 4 * q;  /* + 32 f */
  const bool head_live = head0 + h < num_heads;
  const u32 lse_addr = smem_addr(s_lse + h), o_addr = smem_addr(smem) + (u32)(h * 512 + col0) * 4;
  float lse[CLUSTER], m = NEG_INF;
#pragma unroll
  for (int j = 0; j < CLUSTER; ++j) {
    lse[j] = ld_cluster(map_rank(lse_addr, j));
    m = fmaxf(m, lse[j]);
  }
  /* All CLUSTER x CL_F4 loads at once, with the lse's; a CTA without tokens (lse -inf in every head) staged
     nothing, so what its area holds is replaced by zeros, never multiplied (0 x NaN is NaN). */
  float4 part[CLUSTER][CL_F4];
#pragma unroll
  for (int j = 0; j < CLUSTER; ++j) {
    const u32 src = map_rank(o_addr, j);
#pragma unroll
    for (int f = 0; f < CL_F4; ++f) part[j][f] = ld_cluster4(src + f * 128);
  }
#pragma unroll
  for (int j = 0; j < CLUSTER; ++j)
    if (lse[j] == NEG_INF)
#pragma unroll
      for (int f = 0; f < CL_F4; ++f) part[j][f] = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 acc[CL_F4];
#pragma unroll
  for (int f = 0; f < CL_F4; ++f) acc[f] = make_float4(0.f, 0.f, 0.f, 0.f);
  float den = 0.f;
#pragma unroll
  for (int j = 0; j < CLUSTER; ++j) {
    const float w = lse[j] == NEG_INF ? 0.f : fast_exp2(lse[j] - m);
    den += w;
#pragma unroll
    for (int f = 0; f < CL_F4; ++f) {
      acc[f].x += w * part[j][f].x; acc[f].y += w * part[j][f].y;
      acc[f].z += w * part[j][f].z; acc[f].w += w * part[j][f].w;
    }
  }
  const float inv = den > 0.f ? 1.f / den : 0.f;
  if (n_act == 1) {  /* the row is this cluster's: the output, then no CTA leaves while others read it */
    if (head_live) {
      u16* dst = out + b * s_o_b + (head0 + h) * s_o_h + col0;
#pragma unroll
      for (int f = 0; f < CL_F4; ++f) store_out4(dst + 32 * f, acc[f], inv * v_scale);
    }
    cluster_sync();
    return;
  }
  /* The cluster's partial, normalised, and its lse (rank 0 writes the lse: every rank has the same). */
  const i64 row_h = (i64)b * num_heads + head0 + h;  /* [b][head] */
  if (head_live) {
    float* dst = mid_o + (row_h * n_cl + cl) * 512 + col0;
#pragma unroll
    for (int f = 0; f < CL_F4; ++f)
      *(float4*)(dst + 32 * f) = make_float4(acc[f].x * inv, acc[f].y * inv, acc[f].z * inv, acc[f].w * inv);
    if (rank == 0 && q == 0) mid_lse[row_h * n_cl + cl] = den > 0.f ? m + __log2f(den) : NEG_INF;
  }
  __threadfence();
  cluster_sync();  /* the cluster's partial is out; no CTA reads another's shared memory after this */
  int* flag = (int*)(smem + SM_CL + 64);
  if (rank == 0 && tid == 0) {  /* fences on both sides of the count: the other clusters' partials, seen by
                                   this thread, are then seen by every thread of the cluster after the barrier */
    int* counter = arrivals + b * gridDim.x + blockIdx.x;
    __threadfence();
    const int last = atomicAdd(counter, 1) == n_act - 1;
    __threadfence();
    if (last) *counter = 0;  /* for the next call */
#pragma unroll
    for (int j = 0; j < CLUSTER; ++j) st_cluster(map_rank(smem_addr(flag), j), last);
  }
  cluster_sync();  /* the flag is in every CTA */
  if (!*flag) return;
  __threadfence();
  /* The last cluster: the row's n_act partials, rank r its channels, CL_BATCH clusters at a time, their
     lse's loaded with them (one round trip a batch; one batch up to 16 clusters of 8); the running maximum
     rescales what is summed when a later batch raises it. */
  m = NEG_INF;
  den = 0.f;
#pragma unroll
  for (int f = 0; f < CL_F4; ++f) acc[f] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* src = mid_o + row_h * n_cl * 512 + col0;
  for (int c0 = 0; c0 < n_act; c0 += CL_BATCH) {
    float4 p[CL_BATCH][CL_F4];
    float l[CL_BATCH];
#pragma unroll
    for (int u = 0; u < CL_BATCH; ++u) {
      const bool here = head_live && c0 + u < n_act;
      l[u] = here ? __ldcg(mid_lse + row_h * n_cl + c0 + u) : NEG_INF;
#pragma unroll
      for (int f = 0; f < CL_F4; ++f)
        p[u][f] = here ? __ldcg((const float4*)(src + (i64)(c0 + u) * 512 + 32 * f)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float mb = m;
#pragma unroll
    for (int u = 0; u < CL_BATCH; ++u) mb = fmaxf(mb, l[u]);
    const float rescale = m == NEG_INF ? 0.f : fast_exp2(m - mb);  /* nothing summed yet: 0 x 0 */
    den *= rescale;
#pragma unroll
    for (int f = 0; f < CL_F4; ++f) {
      acc[f].x *= rescale; acc[f].y *= rescale; acc[f].z *= rescale; acc[f].w *= rescale;
    }
#pragma unroll
    for (int u = 0; u < CL_BATCH; ++u) {
      const float w = l[u] == NEG_INF ? 0.f : fast_exp2(l[u] - mb);
      den += w;
#pragma unroll
      for (int f = 0; f < CL_F4; ++f) {
        acc[f].x += w * p[u][f].x; acc[f].y += w * p[u][f].y; acc[f].z += w * p[u][f].z; acc[f].w += w * p[u][f].w;
      }
    }
    m = mb;
  }
  if (head_live) {
    const float k = den > 0.f ? v_scale / den : 0.f;
#pragma unroll
    for (int f = 0; f < CL_F4; ++f) store_out4(out + b * s_o_b + (head0 + h) * s_o_h + col0 + 32 * f, acc[f], k);
  }
}
#endif



/* Log-sum-exp merge of the splits (more than the fused merge takes: small batches). CTA = (row, head)
   x an eighth of the channels (64); 8 warps, each half-warp a split at a time (lane & 15 a float4):
   half-warp 2 w + hf takes splits 2 w + hf + 16 k, MERGE_UNROLL of them in flight. Weights are
   computed once into shared memory. This is what a small batch waits on (16 heads x 264 splits at
   batch 1), so the grid is finer and the loads deeper than the data alone would need. */
#define MERGE_WARPS 8
#define MERGE_COLS 64  /* channels a merge CTA takes: 16 lanes x float4 (the host's MERGE_COLS) */
#define MERGE_UNROLL 8
extern "C" __global__ void __launch_bounds__(MERGE_WARPS * 32)
mla_fp8_merge(const float* __restrict__ mid_o, const float* __restrict__ mid_lse, u16* __restrict__ out,
              const int* __restrict__ indptr, float v_scale, int min_chunk, int num_heads, int num_splits,
              i64 s_o_b, i64 s_o_h)
{
  __shared__ float w_s[512];
  __shared__ float red[MERGE_WARPS][33];
  __shared__ float4 acc_s[MERGE_WARPS][32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int half = 2 * warp + (lane >> 4);  /* 0 .. 2 MERGE_WARPS - 1 */
  const int b = blockIdx.x / num_heads, h = blockIdx.x % num_heads;
  const int c4 = blockIdx.y * MERGE_COLS + (lane & 15) * 4;
  const int seq_len = indptr[b + 1] - indptr[b];
  const int chunk = split_chunk(seq_len, num_splits, min_chunk);
  const int active = min((seq_len + chunk - 1) / chunk, num_splits);
  const i64 base = ((i64)b * num_heads + h) * num_splits;
  const float NEG_INF = -__int_as_float(0x7f800000);

  float m = NEG_INF;
  for (int s = tid; s < active; s += MERGE_WARPS * 32) {
    const float l = mid_lse[base + s];
    w_s[s] = l;
    m = fmaxf(m, l);
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
  if (lane == 0) red[warp][32] = m;
  __syncthreads();
  m = NEG_INF;
  for (int i = 0; i < MERGE_WARPS; ++i) m = fmaxf(m, red[i][32]);
  float den = 0.f;
  for (int s = tid; s < active; s += MERGE_WARPS * 32) {
    const float l = w_s[s];
    const float w = (l == NEG_INF || m == NEG_INF) ? 0.f : fast_exp2(l - m);
    w_s[s] = w;
    den += w;
  }
  for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffff, den, o);
  __syncthreads();  /* all weights written; red[][32] read by everyone before reuse */
  if (lane == 0) red[warp][0] = den;

  const int stride = 2 * MERGE_WARPS;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  int s = half;
  for (; s + (MERGE_UNROLL - 1) * stride < active; s += MERGE_UNROLL * stride) {
    float4 p[MERGE_UNROLL];
    float w[MERGE_UNROLL];
#pragma unroll
    for (int u = 0; u < MERGE_UNROLL; ++u) {
      w[u] = w_s[s + u * stride];  /* every split below `active` wrote its partial: no guard, all in flight */
      p[u] = *(const float4*)(mid_o + (base + s + u * stride) * 512 + c4);
    }
#pragma unroll
    for (int u = 0; u < MERGE_UNROLL; ++u) {
      acc.x += w[u] * p[u].x; acc.y += w[u] * p[u].y; acc.z += w[u] * p[u].z; acc.w += w[u] * p[u].w;
    }
  }
  for (; s < active; s += stride) {
    const float w = w_s[s];
    const float4 p = *(const float4*)(mid_o + (base + s) * 512 + c4);
    acc.x += w * p.x; acc.y += w * p.y; acc.z += w * p.z; acc.w += w * p.w;
  }
  acc_s[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && lane < 16) {
    float denom = 0.f;
    float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = 0; i < MERGE_WARPS; ++i) {
      denom += red[i][0];
      const float4 a = acc_s[i][lane], a2 = acc_s[i][lane + 16];
      t.x += a.x + a2.x; t.y += a.y + a2.y; t.z += a.z + a2.z; t.w += a.w + a2.w;
    }
    const float k = denom > 0.f ? v_scale / denom : 0.f;
    u16* dst = out + b * s_o_b + h * s_o_h + c4;
    uint2 pk;
    pk.x = (u32)float_to_out(t.x * k) | ((u32)float_to_out(t.y * k) << 16);
    pk.y = (u32)float_to_out(t.z * k) | ((u32)float_to_out(t.w * k) << 16);
    *(uint2*)dst = pk;
  }
}
"""


# ---------------------------------------------------------------------------------------------
# NVRTC and the driver API, through ctypes (no build step, no extra package)


class CudaKernelError(RuntimeError):
    """The CUDA path could not be compiled or launched; the caller falls back to Triton."""


def _candidates(names: list[str]) -> list[str]:
    found = []
    env = os.environ.get("FP8_MLA_NVRTC")
    if env:
        found.append(env)
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "nvidia/cu12/lib"):
            for name in names:
                found.extend(sorted(glob.glob(os.path.join(base, sub, name))))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            for name in names:
                found.extend(sorted(glob.glob(os.path.join(home, "lib64", name))))
    found.extend(names)
    return found


def _load_first(names: list[str], what: str) -> ctypes.CDLL:
    errors = []
    for cand in _candidates(names):
        try:
            return ctypes.CDLL(cand)
        except OSError as e:
            errors.append(str(e))
    raise CudaKernelError(f"cannot load {what} (tried {', '.join(names)}): {errors[-1] if errors else ''}")


class _Nvrtc:
    def __init__(self) -> None:
        self.lib = _load_first(["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"], "NVRTC")
        # NVRTC dlopens its builtins library by name at compile time; a pip-installed NVRTC is not
        # on the loader path, so load the one beside it first (the name then resolves to it).
        here = os.path.dirname(getattr(self.lib, "_name", "") or "")
        for path in sorted(glob.glob(os.path.join(here, "libnvrtc-builtins.so*")) if here else []):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue

    def compile(self, source: str, arch: str, options: list[str]) -> bytes:
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"fp8_mla_decode.cu",
                                           0, None, None), "nvrtcCreateProgram")
        try:
            opts = [f"--gpu-architecture={arch}", "--std=c++17", *options]
            arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
            self.last_log = self._log(prog)
            if rc != 0:
                raise CudaKernelError(f"NVRTC failed for {arch}:\n{self.last_log}")
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            buf = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            return buf.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CudaKernelError(f"{what} returned NVRTC error {rc}")


class _Driver:
    def __init__(self) -> None:
        self.lib = _load_first(["libcuda.so.1", "libcuda.so"], "the CUDA driver")
        # cuLaunchKernel(f, grid x/y/z, block x/y/z, shared bytes, stream, params, extra) is called with
        # no argtypes on purpose: converting 11 declared arguments costs ctypes ~2 us a call. So every
        # pointer goes in as a c_void_p object (a plain int would be cut to 32 bits) and the seven
        # unsigned ints as Python ints (passed as C int: the same registers and stack slots).
        self.launch = self.lib["cuLaunchKernel"]
        self.launch.restype = ctypes.c_int
        self._streams: dict[int, ctypes.c_void_p] = {}

    def stream(self, raw: int) -> ctypes.c_void_p:
        """The launch argument for a raw stream handle (one object per stream, not one per call)."""
        arg = self._streams.get(raw)
        if arg is None:
            if len(self._streams) > 64:
                self._streams.clear()
            arg = self._streams[raw] = ctypes.c_void_p(raw)
        return arg

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(msg))
            raise CudaKernelError(f"{what} failed: CUDA error {rc} ({(msg.value or b'?').decode()})")

    def ensure_context(self, device: int) -> None:
        """Make the device's primary context (the one torch uses) current on this thread."""
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        cur = ctypes.c_int(-1)
        if ctx.value and self.lib.cuCtxGetDevice(ctypes.byref(cur)) == 0 and cur.value == device:
            return
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        primary = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(primary), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(primary), "cuCtxSetCurrent")

    def load(self, cubin: bytes, names: list[str]) -> dict[str, ctypes.c_void_p]:
        mod = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
        funcs = {}
        for name in names:
            f = ctypes.c_void_p()
            rc = self.lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode())
            self.check(rc, f"cuModuleGetFunction({name})")
            funcs[name] = f
        return funcs

    def set_smem(self, func: ctypes.c_void_p, nbytes: int) -> None:
        # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
        self.check(self.lib.cuFuncSetAttribute(func, 8, nbytes), "cuFuncSetAttribute")

    def max_active_clusters(self, func: ctypes.c_void_p, cluster: int, smem: int) -> int | None:
        """Clusters of a kernel with a compile-time cluster size resident at once (128 threads a CTA), or
        None where the driver does not say."""
        query = getattr(self.lib, "cuOccupancyMaxActiveClusters", None)
        if query is None:
            return None
        cfg = _LaunchConfig(1, cluster, 1, 128, 1, 1, smem, None, None, 0)
        n = ctypes.c_int(0)
        rc = query(ctypes.byref(n), func, ctypes.byref(cfg))
        return n.value if rc == 0 and n.value > 0 else None


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig: grid, block, dynamic shared memory, stream, attributes (none: the kernel's own cluster
    size applies)."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


# ---------------------------------------------------------------------------------------------
# Argument blocks: the kernel's parameters packed (struct, natural alignment) into one reused buffer
# per kernel; cuLaunchKernel gets the address of each value and copies them at launch.


class _ArgBlock:
    def __init__(self, fmt: str) -> None:
        self.layout = struct.Struct(fmt)
        self.buffer = ctypes.create_string_buffer(self.layout.size)
        base, offsets, off = ctypes.addressof(self.buffer), [], 0
        for code in fmt.lstrip("<="):
            size = struct.calcsize(code)
            off = -(-off // size) * size  # C alignment of each member
            offsets.append(base + off)
            off += size
        assert -(-off // 8) * 8 == self.layout.size, "the struct format must be naturally aligned"
        self.params = (ctypes.c_void_p * len(offsets))(*offsets)
        self.params_arg = ctypes.c_void_p(ctypes.addressof(self.params))  # cuLaunchKernel's void **params
        # pack(*values) writes the arguments in place: bound once, no Python frame of ours per call.
        self.pack = functools.partial(self.layout.pack_into, self.buffer, 0)


# mla_fp8_split: 11 pointers; qk_scale, v_scale; min_chunk, num_heads; 7 strides
_SPLIT_FMT = "<QQQQQQQQQQQffiiqqqqqqq"
# mla_fp8_merge: 4 pointers; v_scale; min_chunk, num_heads, num_splits; 2 strides
_MERGE_FMT = "<QQQQfiiiqq"


@dataclass(frozen=True)
class CudaConfig:
    stages: int = 2
    block_n: int = 64  # tokens per stage: 64 (2 stages) or 32 (4 stages) keep ~95 KB, 2 CTAs per SM
    ctas_per_sm: int = 2  # the register budget (launch bounds) and what the split count aims at
    min_chunk: int = 64
    defines: tuple[str, ...] = ()  # extra -D switches (experiments: SKIP_QK, SKIP_PV)
    # Up to this many splits the last split CTA of a row merges (one launch); more (small batches)
    # get the separate merge kernel, whose many CTAs read the partials in parallel.
    fused_merge_max: int = FUSED_MERGE_LIMIT
    # The small-batch plan (mla_fp8_split_cl): clusters of this many split CTAs merge through distributed
    # shared memory, the clusters of a row through the workspace, all in one launch; taken while every
    # (row, head tile) gets at least one cluster in one wave. 0: the large-batch plan for every batch
    # (split kernel with the fused merge or the merge kernel), the plan of 2026-12-01.
    cluster: int = 8
    # Clusters x cluster size resident at once, what the small-batch plan fills; 0: ask the driver
    # (cuOccupancyMaxActiveClusters). Tests set it to force several clusters per row.
    cluster_slots: int = 0
    # Most clusters per (row, head tile), 0: as many as one wave holds (MAX_SPLITS / cluster at most). Fewer
    # make the last cluster's merge shorter and each split longer (batch 1 with long rows).
    row_clusters_max: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.fused_merge_max <= FUSED_MERGE_LIMIT:
            raise ValueError(f"fused_merge_max must be 0..{FUSED_MERGE_LIMIT} (the fused merge's weight table), "
                             f"got {self.fused_merge_max}")
        if self.cluster not in CLUSTER_SIZES:
            raise ValueError(f"cluster must be one of {CLUSTER_SIZES}, got {self.cluster}")
        if self.cluster_slots < 0 or self.row_clusters_max < 0:
            raise ValueError(f"cluster_slots and row_clusters_max must be >= 0, got {self.cluster_slots}, "
                             f"{self.row_clusters_max}")

    def nvrtc_options(self, q_fp16: bool) -> list[str]:
        """The -D switches of this geometry and Q dtype (what a module is compiled with; configs that differ
        only in the plan, cluster 0 or 8 included, share one module)."""
        opts = [f"-DSTAGES={self.stages}", f"-DBLOCK_N={self.block_n}", f"-DMIN_CTAS={self.ctas_per_sm}",
                f"-DCLUSTER={self.cluster or 8}"]
        return opts + (["-DQ_FP16"] if q_fp16 else []) + [f"-D{d}" for d in self.defines]


# What a call without a config runs (the serving path): the plan of 2026-12-01, measured on the H200, until the
# small-batch plan (CudaConfig's own default, cluster=8) has passed its GPU call (scripts/gpu/kernel_small_batch.sh;
# issue 47: written and checked on the CPU only, no device time was left).
_DEFAULT = CudaConfig(cluster=0)


def _smem_bytes(stages: int, block_n: int) -> int:
    """Dynamic shared memory of the split kernels (their SM_TOTAL)."""
    nope, rope, q, p = stages * block_n * 512, stages * block_n * 64, 36 * 512, 16 * block_n * 2
    reductions, cluster = 2 * 4 * 16 * 4 + 4 * 4, 16 * 4 + 16  # [16 lse][the cluster's flag]
    return nope + rope + q + p + stages * block_n * 8 + stages * block_n * 4 + reductions + cluster


class _DeviceKernels:
    """Compiled kernels, argument blocks and workspace of one device (and Q dtype, stages)."""

    def __init__(self, device: int, q_fp16: bool, cfg: CudaConfig) -> None:
        drv = _driver()
        drv.ensure_context(device)
        major, minor = torch.cuda.get_device_capability(device)
        key = (f"sm_{major}{minor}", tuple(cfg.nvrtc_options(q_fp16)))
        cubin = _CUBINS.get(key)
        if cubin is None:
            cubin = _CUBINS[key] = _nvrtc().compile(CUDA_SOURCE, key[0], list(key[1]))
        self.cubin = cubin  # kept for disassembly (benchmarks write it out)
        names = ["mla_fp8_split", "mla_fp8_merge"] + (["mla_fp8_split_cl"] if cfg.cluster else [])
        funcs = drv.load(cubin, names)
        self.split, self.merge = funcs["mla_fp8_split"], funcs["mla_fp8_merge"]
        self.smem = _smem_bytes(cfg.stages, cfg.block_n)
        assert self.smem >= 16 * 512 * 4, "the epilogue stages the output in the KV buffers"
        drv.set_smem(self.split, self.smem)
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.split_cl: ctypes.c_void_p | None = funcs.get("mla_fp8_split_cl")
        self.cluster_slots = 0  # CTAs of the small-batch kernel resident at once (whole clusters)
        if self.split_cl is not None:
            drv.set_smem(self.split_cl, self.smem)
            clusters = drv.max_active_clusters(self.split_cl, cfg.cluster, self.smem)
            if clusters is None:  # no answer: about 90 % of the CTA slots, in whole clusters
                clusters = self.sms * cfg.ctas_per_sm * 9 // 10 // cfg.cluster
            self.cluster_slots = cfg.cluster_slots or clusters * cfg.cluster
        self.split_args, self.merge_args = _ArgBlock(_SPLIT_FMT), _ArgBlock(_MERGE_FMT)
        self.workspace: torch.Tensor | None = None
        self.arrivals: torch.Tensor | None = None  # fused-merge counters, zero between calls
        self.retired: list[torch.Tensor] = []
        self.plans: dict[tuple[int, int, int | None], _Plan] = {}
        self.lock = threading.Lock()

    def arrivals_for(self, n: int, device: torch.device) -> torch.Tensor:
        """Fused-merge counters: zero between calls (the merging CTA resets its own)."""
        self.arrivals = self._grown(self.arrivals, max(n, 1024), torch.int32, device, zero=True)
        return self.arrivals

    def workspace_for(self, nfloats: int, device: torch.device) -> torch.Tensor:
        self.workspace = self._grown(self.workspace, nfloats, torch.float32, device, zero=False)
        return self.workspace

    def _grown(self, buf: torch.Tensor | None, n: int, dtype: torch.dtype, device: torch.device,
               zero: bool) -> torch.Tensor:
        if buf is not None and buf.numel() >= n:
            return buf
        if buf is not None:
            # A CUDA graph captured earlier may still point at the old buffer: keep it alive. Plans
            # made later point at the new one.
            self.retired.append(buf)
        self.plans = {}
        return (torch.zeros if zero else torch.empty)(n, dtype=dtype, device=device)


_NVRTC: _Nvrtc | None = None
_DRIVER: _Driver | None = None
_KERNELS: dict[tuple, _DeviceKernels] = {}
_CUBINS: dict[tuple[str, tuple[str, ...]], bytes] = {}  # (arch, options) -> cubin: one compile per module


def _nvrtc() -> _Nvrtc:
    global _NVRTC
    if _NVRTC is None:
        _NVRTC = _Nvrtc()
    return _NVRTC


def _driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = _Driver()
    return _DRIVER


def _kernels(device: int, q_fp16: bool, cfg: CudaConfig) -> _DeviceKernels:
    key = (device, q_fp16, cfg)
    k = _KERNELS.get(key)
    if k is None:
        k = _KERNELS[key] = _DeviceKernels(device, q_fp16, cfg)
    return k


_SUPPORTED: dict[int, bool] = {}


def supported(device: torch.device | int) -> bool:
    """Hopper (sm_90) only: the kernel is tuned and tested there; elsewhere Triton runs. ``device`` is a
    torch device or a CUDA device index (``tensor.get_device()``: -1 for the CPU)."""
    if not isinstance(device, int):
        if device.type != "cuda":
            return False
        device = device.index if device.index is not None else torch.cuda.current_device()
    ok = _SUPPORTED.get(device)
    if ok is None:
        ok = _SUPPORTED[device] = device >= 0 and path_for(torch.cuda.get_device_capability(device)) == "cuda"
    return ok


def num_splits(batch: int, num_heads: int, sms: int, ctas_per_sm: int) -> int:
    """Splits so that one wave fills the SMs; depends only on (batch, heads): CUDA-graph stable."""
    tiles = batch * ((num_heads + HEAD_TILE - 1) // HEAD_TILE)
    return max(1, min(MAX_SPLITS, round(sms * ctas_per_sm / tiles)))  # the merge holds <= 512 weights


def cluster_splits(batch: int, num_heads: int, slots: int, cluster: int, row_max: int = 0) -> int | None:
    """Splits of the small-batch plan: whole clusters, as many per (row, head tile) as one wave holds
    (``slots`` CTAs), or None when not every (row, tile) gets a cluster in one wave (then the large-batch
    plan runs). Depends only on (batch, heads): CUDA-graph stable; each row's tokens spread over as many
    of its splits as have a step of work, read on the device."""
    if cluster <= 0:
        return None
    pairs = batch * ((num_heads + HEAD_TILE - 1) // HEAD_TILE)
    per_pair = slots // (cluster * pairs)
    if per_pair < 1:
        return None
    return min(per_pair, MAX_SPLITS // cluster, row_max or MAX_SPLITS) * cluster


def path_for(capability: tuple[int, int] | None, fp8: bool = True) -> str:
    """Which implementation ``fp8_mla_decode.mla_decode`` (impl="auto") runs on a device of this compute
    capability (None: not a CUDA device): "cuda" (this module: built, tuned and checked on sm_90),
    "triton" (the portable kernel: any other CUDA GPU, e.g. the seed's RTX PRO 6000, sm_120, and every
    BF16/FP16 cache) or "reference" (no CUDA device: only ``reference_mla_decode`` computes it, or Triton's
    CPU interpreter under TRITON_INTERPRET=1). This module's source builds for sm_89, sm_100a and sm_120
    as well (tests/gpu/test_fp8_mla_cuda_host.py), but runs only where it was measured."""
    if capability is None:
        return "reference"
    return "cuda" if fp8 and capability[0] == 9 else "triton"


_GET_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # looked up once: ~1 us a call


def _raw_stream(device: int) -> int:
    if _GET_RAW_STREAM is not None:  # no Stream object per call
        return _GET_RAW_STREAM(device)
    return torch.cuda.current_stream(device).cuda_stream


_Q_DTYPES = (torch.bfloat16, torch.float16)


class LayoutError(ValueError):
    """The inputs are not laid out for the CUDA path (see :func:`eligible`); the dispatch runs Triton."""


def _misaligned(qn_ptr: int, qr_ptr: int, sqn: tuple[int, ...], sqr: tuple[int, ...], kv_ptr: int,
                kv_row: int) -> bool:
    """16-byte loads of Q rows (8 half-precision elements) and cp.async copies of KV rows (16 bytes)."""
    return bool((qn_ptr | qr_ptr) & 15 or (sqn[0] | sqn[1] | sqr[0] | sqr[1]) & 7 or (kv_ptr | kv_row) & 15)


def _scales_unfit(token_scale: torch.Tensor | None, k_scale: float | torch.Tensor) -> bool:
    if token_scale is not None and (token_scale.dtype != torch.float32 or not token_scale.is_contiguous()):
        return True
    return isinstance(k_scale, torch.Tensor) and k_scale.dtype != torch.float32


def eligible(q_nope: torch.Tensor, q_rope: torch.Tensor, kv: torch.Tensor | None = None,
             token_scale: torch.Tensor | None = None, k_scale: float | torch.Tensor = 1.0) -> bool:
    """What the kernel reads needs: 16-byte aligned Q rows in BF16/FP16 (true for SGLang's absorbed
    query) and KV rows (cp.async copies 16 bytes), float32 scales in contiguous memory.
    ``mla_decode_cuda`` checks the same itself (raising :class:`LayoutError`)."""
    if q_nope.dtype not in _Q_DTYPES or q_rope.dtype != q_nope.dtype or _scales_unfit(token_scale, k_scale):
        return False
    kv_ptr, kv_row = (kv.data_ptr(), kv.stride(0)) if kv is not None else (0, 0)
    return not _misaligned(q_nope.data_ptr(), q_rope.data_ptr(), q_nope.stride(), q_rope.stride(), kv_ptr, kv_row)


@dataclass(frozen=True)
class _Plan:
    """What a (batch, heads, splits) call launches, worked out once: the split count depends on batch
    and heads only (CUDA-graph capture), the pointers on the device's workspace (plans are dropped
    when it grows)."""

    grid: tuple[int, int, int]
    n_split: int
    fused: bool
    min_chunk: int
    ws_ptr: int
    lse_ptr: int
    arrivals_ptr: int
    cluster: bool = False  # the small-batch kernel (mla_fp8_split_cl): one launch, no merge kernel


def _plan(k: _DeviceKernels, cfg: CudaConfig, batch: int, num_heads: int, splits: int | None,
          device: torch.device) -> _Plan:
    """The launch of a (batch, heads) call: the small-batch plan while one wave gives every (row, head tile)
    a cluster (and no split count is forced), else the split kernel with its merge."""
    tiles = (num_heads + HEAD_TILE - 1) // HEAD_TILE
    min_chunk = max(1, -(-cfg.min_chunk // cfg.block_n)) * cfg.block_n
    small = None if splits or k.split_cl is None else cluster_splits(batch, num_heads, k.cluster_slots, cfg.cluster,
                                                                     cfg.row_clusters_max)
    if small is not None:  # partials: one per cluster, [b][head][cluster][512] then [b][head][cluster]
        n_cl = small // cfg.cluster
        ws_ptr = k.workspace_for(batch * num_heads * n_cl * (D_NOPE + 1), device).data_ptr()
        lse_ptr = ws_ptr + batch * num_heads * n_cl * D_NOPE * 4
        arrivals_ptr = k.arrivals_for(batch * tiles, device).data_ptr()
        return _Plan((tiles, small, batch), small, False, min_chunk, ws_ptr, lse_ptr, arrivals_ptr, cluster=True)
    n_split = splits or num_splits(batch, num_heads, k.sms, cfg.ctas_per_sm)
    fused = 1 < n_split <= cfg.fused_merge_max
    ws_ptr = lse_ptr = arrivals_ptr = 0
    if n_split > 1:
        ws_ptr = k.workspace_for(batch * num_heads * n_split * (D_NOPE + 1), device).data_ptr()
        lse_ptr = ws_ptr + batch * num_heads * n_split * D_NOPE * 4
        if fused:
            arrivals_ptr = k.arrivals_for(batch * tiles, device).data_ptr()
    return _Plan((tiles, n_split, batch), n_split, fused, min_chunk, ws_ptr, lse_ptr, arrivals_ptr)


def mla_decode_cuda(q_nope: torch.Tensor, q_rope: torch.Tensor, kv: torch.Tensor, kv_indptr: torch.Tensor,
                    kv_indices: torch.Tensor, sm_scale: float, k_scale: float | torch.Tensor,
                    v_scale: float, token_scale: torch.Tensor | None, out: torch.Tensor,
                    config: CudaConfig | None = None, splits: int | None = None) -> torch.Tensor:
    """The split + merge launches; shapes already checked by ``fp8_mla_decode.mla_decode``.

    ``kv`` is ``[tokens, 576]`` or ``[tokens, 1, 576]`` float8_e4m3fn with unit strides inside a
    row; ``out`` ``[batch, heads, 512]`` in Q's dtype. Raises :class:`LayoutError` (nothing launched)
    when the layout is not what :func:`eligible` accepts. Each tensor attribute is read once: an eager
    call's host time is what decode pays per layer without CUDA graphs.
    """
    cfg = config or _DEFAULT
    q_dtype = q_nope.dtype
    if q_dtype not in _Q_DTYPES or q_rope.dtype != q_dtype or _scales_unfit(token_scale, k_scale):
        raise LayoutError("the CUDA path wants BF16/FP16 Q and float32 scales")
    sqn, sqr, so = q_nope.stride(), q_rope.stride(), out.stride()
    qn_ptr, qr_ptr, kv_ptr, kv_row = q_nope.data_ptr(), q_rope.data_ptr(), kv.data_ptr(), kv.stride(0)
    if _misaligned(qn_ptr, qr_ptr, sqn, sqr, kv_ptr, kv_row):
        raise LayoutError("the CUDA path wants 16-byte aligned Q and KV rows")
    dev = q_nope.get_device()
    k = _kernels(dev, q_dtype == torch.float16, cfg)
    batch, num_heads = q_nope.shape[:2]
    key = (batch, num_heads, splits)
    plan = k.plans.get(key)
    if plan is None:
        plan = k.plans[key] = _plan(k, cfg, batch, num_heads, splits, q_nope.device)
    k_in_mem = isinstance(k_scale, torch.Tensor)
    qk_scale = sm_scale * LOG2E * (1.0 if k_in_mem else float(k_scale))
    out_ptr, indptr_ptr = out.data_ptr(), kv_indptr.data_ptr()
    drv = _driver()
    with k.lock:
        k.split_args.pack(
            qn_ptr, qr_ptr, kv_ptr, indptr_ptr, kv_indices.data_ptr(),
            token_scale.data_ptr() if token_scale is not None else 0, k_scale.data_ptr() if k_in_mem else 0,
            plan.ws_ptr, plan.lse_ptr, out_ptr, plan.arrivals_ptr, qk_scale, float(v_scale), plan.min_chunk,
            num_heads, sqn[0], sqn[1], sqr[0], sqr[1], kv_row, so[0], so[1])
        stream = drv.stream(_raw_stream(dev))
        gx, gy, gz = plan.grid
        rc = drv.launch(k.split_cl if plan.cluster else k.split, gx, gy, gz, 128, 1, 1, k.smem, stream,
                        k.split_args.params_arg, None)
        if rc:
            drv.check(rc, "launch of mla_fp8_split" + ("_cl" if plan.cluster else ""))
        if plan.n_split > 1 and not plan.fused:
            k.merge_args.pack(plan.ws_ptr, plan.lse_ptr, out_ptr, indptr_ptr, float(v_scale), plan.min_chunk,
                              num_heads, plan.n_split, so[0], so[1])
            rc = drv.launch(k.merge, batch * num_heads, D_NOPE // MERGE_COLS, 1, 256, 1, 1, 0, stream,
                            k.merge_args.params_arg, None)
            if rc:
                drv.check(rc, "launch of mla_fp8_merge")
    return out


__all__ = ["CUDA_SOURCE", "CudaConfig", "CudaKernelError", "LayoutError", "cluster_splits", "eligible",
           "mla_decode_cuda", "num_splits", "path_for", "supported"]
