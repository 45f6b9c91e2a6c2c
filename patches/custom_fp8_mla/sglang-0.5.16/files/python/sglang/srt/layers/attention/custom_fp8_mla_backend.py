"""custom_fp8_mla: FlashInfer MLA, except that decode reads the FP8 KV cache directly.

Stock FlashInfer MLA (``--attention-backend flashinfer``) casts the whole per-layer KV pool to
BF16 on every decode step (``get_key_buffer(...).to(q.dtype)``), because its MLA kernel takes
16-bit KV only. This backend keeps everything FlashInfer MLA does (KV writes, planning, prefill,
CUDA-graph capture and replay) and replaces only the decode attention, for an FP8 (e4m3) cache,
with a Triton split-KV kernel (``custom_fp8_mla_decode``) that gathers the rows named by the
batch's ``kv_indices`` and dequantises them in registers. Anything else (BF16 cache, speculative
decoding, decode context parallelism) falls back to the FlashInfer path unchanged.

Prefill: a paged prefill (an extend whose requests have KV in the pool already: a prefix-cache hit, a
later chunk) would cast the whole FP8 pool to BF16 in FlashInfer MLA's extend path, every layer; the
``PrefillGatherMixin`` (``custom_fp8_mla_prefill_gather.py``) casts only the rows the batch reads.

The kernel reads the same ``kv_indptr``/``kv_indices`` FlashInfer is planned with: they are
recorded at planning time. Under CUDA graphs those are the backend's capture-stable buffers
(``kv_indptr`` and ``cuda_graph_kv_indices``), refilled in place on every replay, and the
kernel's launch geometry depends only on batch size and head count, so one capture serves any
sequence lengths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.custom_fp8_mla_decode import D_KV, mla_decode
from sglang.srt.layers.attention.custom_fp8_mla_prefill_gather import PrefillGatherMixin
from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
    FlashInferMLAIndicesUpdaterPrefill,
)
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


class _PlanRecorder:
    """Stands in for the FlashInfer decode wrapper while the decode indices are planned.

    Records the ``kv_indices`` the updater plans with (the eager per-batch tensor, or the
    CUDA-graph buffer on capture and replay), then plans the real wrapper as usual, so the
    FlashInfer fallback stays planned too.
    """

    def __init__(self, wrapper, backend: "CustomFP8MLAAttnBackend"):
        self._wrapper = wrapper
        self._backend = backend

    def plan(self, qo_indptr, kv_indptr, kv_indices, *args, **kwargs):
        self._backend.decode_kv_indices = kv_indices
        return self._wrapper.plan(qo_indptr, kv_indptr, kv_indices, *args, **kwargs)


class _RecordingDecodeUpdater(FlashInferMLAIndicesUpdaterDecode):
    def call_begin_forward(self, wrapper, *args, **kwargs):
        super().call_begin_forward(_PlanRecorder(wrapper, self.attn_backend), *args, **kwargs)


class CustomFP8MLAAttnBackend(PrefillGatherMixin, FlashInferMLAAttnBackend):
    """FlashInfer MLA with decode through the FP8 kernel and a paged prefill that casts only the rows it
    reads (see the module docstring)."""

    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(
            model_runner,
            skip_prefill=skip_prefill,
            kv_indptr_buf=kv_indptr_buf,
            q_indptr_decode_buf=q_indptr_decode_buf,
        )
        self.decode_kv_indices: Optional[torch.Tensor] = None
        self.indices_updater_decode = _RecordingDecodeUpdater(model_runner, self)
        self.init_prefill_gather(model_runner, FlashInferMLAIndicesUpdaterPrefill)

    def _decode_through_kernel(
        self, kv_buffer: torch.Tensor, forward_batch: ForwardBatch
    ) -> bool:
        return (
            kv_buffer.dtype == torch.float8_e4m3fn
            and kv_buffer.shape[-1] == D_KV
            and self.page_size == 1
            and forward_batch.spec_info is None
            and not get_parallel().dcp_enabled
            and self.decode_kv_indices is not None
        )

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        kv_buffer = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        if not self._decode_through_kernel(kv_buffer, forward_batch):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope=q_rope, k_rope=k_rope
            )

        if k is not None:
            assert v is not None
            if save_kv_cache:
                loc = forward_batch.out_cache_loc
                if k_rope is not None:
                    self.token_to_kv_pool.set_mla_kv_buffer(layer, loc, k, k_rope)
                else:
                    self.token_to_kv_pool.set_kv_buffer(layer, loc, k, v)

        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        else:
            reshaped_q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
            q_nope = reshaped_q[:, :, : layer.v_head_dim]
            q_rope = reshaped_q[:, :, layer.v_head_dim :]

        bs = q_nope.shape[0]
        # The pool is written unscaled (set_mla_kv_buffer casts to FP8 without a scale, exactly as
        # for FlashInfer MLA), so it is read back with a scale of 1.
        o = mla_decode(
            q_nope,
            q_rope,
            kv_buffer,
            self.kv_indptr[: bs + 1],
            self.decode_kv_indices,
            layer.scaling,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
