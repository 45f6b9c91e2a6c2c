"""Custom FP8 MLA attention backend (``--attention-backend custom_fp8_mla``).

Decode: a Triton kernel (split-KV, then a merge; ``kernels/fp8_mla_decode.py`` of the
harness repo) walks the batch's ``kv_indices`` and loads only those rows of the latent KV
pool, at their storage dtype (FP8: 1 byte per element), dequantizes them in registers
(per-tensor ``k_scale``) and computes the absorbed-MLA attention. No BF16 copy of the
cache is made, neither of the pool nor of the used rows.

Prefill (extend): FlashInfer MLA paged prefill, inherited from ``FlashInferMLAAttnBackend``
with its whole-pool cast before the 16-bit-only kernel (gather-cast is off for subclasses).

The kernel is Triton: any arch SGLang supports (SM90, SM100, SM120) builds it.
"""

from dataclasses import dataclass

from sglang._sim import torch
from sglang._sim.gpus import load_facts
from sglang._sim.kernels import HBM_BANDWIDTH
from sglang.srt.layers.attention.flashinfer_mla_backend import FlashInferMLAAttnBackend

# KV dtypes the kernel loads (and converts to fp32 in registers).
SUPPORTED_KV_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16)

# Simulated cost of the decode kernel (sglang._sim.kernels style): a fixed cost per layer
# call (the split-KV kernel and its log-sum-exp merge, skipped with one split, replayed in
# a CUDA graph) plus the bytes it reads at this share of the GPU's HBM bandwidth (about
# 3 TB/s on an H200). Judgement, not measurements: FlashInfer MLA is (11 us, 0.55) over
# BF16 rows, FlashMLA (8 us, 0.70) over FP8 rows.
LAUNCH_SECONDS = 8e-6
BANDWIDTH_EFFICIENCY = 0.62


def custom_fp8_mla_decode(q_nope, q_rope, kv_cache, kv_indptr, kv_indices, sm_scale, k_scale=1.0, out=None):
    """Decode attention over the rows ``kv_indices`` of an MLA latent cache, any storage dtype.

    q_nope: [bs, heads, kv_lora_rank], q_rope: [bs, heads, qk_rope_head_dim] (16 bit);
    kv_cache: [pool rows, 1, kv_lora_rank + qk_rope_head_dim] in its storage dtype;
    kv_indptr[i] .. kv_indptr[i + 1]: the slice of kv_indices that request i reads.
    """
    if kv_cache.dtype not in SUPPORTED_KV_DTYPES:
        raise RuntimeError(
            "custom_fp8_mla_decode: unsupported KV cache dtype %r (supported: %s)"
            % (kv_cache.dtype, ", ".join(repr(d) for d in SUPPORTED_KV_DTYPES))
        )
    row_elems = 1
    for d in kv_cache.shape[1:]:
        row_elems *= d
    # Only the referenced rows are read, at the storage dtype's size.
    kv_bytes = kv_indices.numel() * row_elems * kv_cache.dtype.itemsize
    q_bytes = q_nope.nbytes + q_rope.nbytes
    bandwidth = HBM_BANDWIDTH.get(load_facts()["arch"], 4.8e12) * BANDWIDTH_EFFICIENCY
    torch.cuda.meter.charge("attention", LAUNCH_SECONDS + (kv_bytes + q_bytes) / bandwidth)
    return out if out is not None else q_nope.new_empty(q_nope.shape)


@dataclass
class CustomFP8MLADecodeMetadata:
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor


class CustomFP8MLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, skip_prefill: bool = False):
        super().__init__(model_runner, skip_prefill=skip_prefill)
        self.scaling = model_runner.model_config.scaling
        self.k_scale = 1.0

    def _decode_metadata(self, seq_lens, seq_lens_sum):
        # The batch's pool rows, request after request (from req_to_token, like FlashInfer's).
        kv_indptr = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(seq_lens_sum, dtype=torch.int32, device="cuda")
        return CustomFP8MLADecodeMetadata(kv_indptr, kv_indices)

    def init_forward_metadata(self, forward_batch):
        if forward_batch.forward_mode.is_decode():
            self.forward_metadata = self._decode_metadata(forward_batch.seq_lens, forward_batch.seq_lens_sum)
        else:
            super().init_forward_metadata(forward_batch)

    def init_forward_metadata_capture_cuda_graph(
        self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info
    ):
        self.forward_metadata = self._decode_metadata(seq_lens, sum(seq_lens.tolist()))

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(layer, forward_batch.out_cache_loc, k, k_rope)

        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        else:
            reshaped_q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
            q_nope = reshaped_q[:, :, : layer.v_head_dim]
            q_rope = reshaped_q[:, :, layer.v_head_dim :]

        # The pool as stored (FP8): no cast, the kernel dequantizes the rows it loads.
        kv_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        metadata = self.forward_metadata
        o = custom_fp8_mla_decode(
            q_nope,
            q_rope,
            kv_cache,
            metadata.kv_indptr,
            metadata.kv_indices,
            self.scaling,
            k_scale=self.k_scale,
            out=q_nope.new_empty(q_nope.shape),
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
