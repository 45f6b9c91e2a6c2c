"""
Support attention backend for FlashInfer MLA.
The flashinfer_mla_disable_ragged flag controls whether to use ragged prefill wrapper and defaults
to be false.
When it's set to false, all wrappers are BatchMLAPaged wrapper.
When it's set to true, the backend uses BatchRagged and BatchMLAPaged wrapper for prefilling,
and uses BatchMLAPaged wrapper for decoding.
More details can be found in https://docs.flashinfer.ai/api/mla.html
"""

from dataclasses import dataclass
from typing import Optional

from sglang._sim import torch
from sglang._sim.flashinfer import BatchMLAPagedAttentionWrapper
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

# Shared by every wrapper of the process.
global_workspace_buffer = None
DEFAULT_WORKSPACE_SIZE = 128 * 1024 * 1024


@dataclass
class DecodeMetadata:
    decode_wrapper: BatchMLAPagedAttentionWrapper


@dataclass
class PrefillMetadata:
    prefill_wrapper: BatchMLAPagedAttentionWrapper
    use_ragged: bool


class FlashInferMLAAttnBackend(AttentionBackend):
    """Flashinfer attention kernels."""

    def __init__(self, model_runner, skip_prefill: bool = False):
        super().__init__()
        self.max_context_len = model_runner.model_config.context_len
        self.device = model_runner.device
        self.skip_prefill = skip_prefill
        self.token_to_kv_pool = model_runner.token_to_kv_pool

        global global_workspace_buffer
        if global_workspace_buffer is None:
            global_workspace_buffer = torch.empty(DEFAULT_WORKSPACE_SIZE, dtype=torch.uint8, device="cuda")
        self.workspace_buffer = global_workspace_buffer

        max_bs = model_runner.req_to_token_pool_size
        self.kv_indptr = torch.zeros((max_bs + 1,), dtype=torch.int32, device="cuda")
        self.q_indptr_decode = torch.arange(0, max_bs + 1, dtype=torch.int32, device="cuda")

        if not self.skip_prefill:
            self.prefill_wrapper_paged = BatchMLAPagedAttentionWrapper(self.workspace_buffer, backend="auto")
        self.decode_wrapper = BatchMLAPagedAttentionWrapper(self.workspace_buffer, backend="auto")

        if not skip_prefill:
            self.indices_updater_prefill = FlashInferMLAIndicesUpdaterPrefill(model_runner, self)
        self.indices_updater_decode = FlashInferMLAIndicesUpdaterDecode(model_runner, self)

        self.forward_metadata = None
        self.decode_cuda_graph_metadata = {}

    def init_forward_metadata(self, forward_batch):
        if forward_batch.forward_mode.is_decode():
            self.indices_updater_decode.update(
                forward_batch.seq_lens,
                forward_batch.seq_lens_sum,
                decode_wrapper=self.decode_wrapper,
            )
            self.forward_metadata = DecodeMetadata(self.decode_wrapper)
        else:
            self.indices_updater_prefill.update(
                forward_batch.seq_lens,
                forward_batch.seq_lens_sum,
                forward_batch.extend_seq_lens_cpu,
                prefill_wrapper_paged=self.prefill_wrapper_paged,
            )
            self.forward_metadata = PrefillMetadata(self.prefill_wrapper_paged, False)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        self.cuda_graph_kv_indices = torch.zeros(
            (max_bs * self.max_context_len,), dtype=torch.int32, device="cuda"
        )
        self.cuda_graph_kv_lens = torch.ones((max_bs,), dtype=torch.int32, device="cuda")

    def init_forward_metadata_capture_cuda_graph(
        self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info
    ):
        decode_wrapper = BatchMLAPagedAttentionWrapper(
            self.workspace_buffer,
            use_cuda_graph=True,
            qo_indptr=self.q_indptr_decode[: num_tokens + 1],
            kv_indptr=self.kv_indptr[: num_tokens + 1],
            kv_indices=self.cuda_graph_kv_indices,
            kv_len_arr=self.cuda_graph_kv_lens[:num_tokens],
            backend="auto",
        )
        self.indices_updater_decode.update(seq_lens, sum(seq_lens.tolist()), decode_wrapper=decode_wrapper)
        self.decode_cuda_graph_metadata[bs] = decode_wrapper
        self.forward_metadata = DecodeMetadata(decode_wrapper)

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        prefill_wrapper_paged = self.forward_metadata.prefill_wrapper

        # Save kv cache
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(layer, forward_batch.out_cache_loc, k, k_rope)

        # mla paged prefill
        k_buf = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)
        if q_rope is None:
            qall = q.view(-1, layer.tp_q_head_num, layer.head_dim)
            q, q_rope = (
                qall[:, :, : layer.v_head_dim],
                qall[:, :, layer.v_head_dim :],
            )
        o = q.new_empty(q.shape)
        o = prefill_wrapper_paged.run(
            q,
            q_rope,
            k_buf[:, :, : layer.v_head_dim],
            k_buf[:, :, layer.v_head_dim :],
            out=o,
        )

        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache: bool = True,
        # For multi-head latent attention
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        decode_wrapper = self.forward_metadata.decode_wrapper

        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(layer, forward_batch.out_cache_loc, k, k_rope)

        # Reshape inputs
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        else:
            reshaped_q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
            q_nope = reshaped_q[:, :, : layer.v_head_dim]
            q_rope = reshaped_q[:, :, layer.v_head_dim :]

        k_buffer = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)

        o = q_nope.new_empty(q_nope.shape)
        # Direct call to run without the wrapper
        o = decode_wrapper.run(
            q_nope,
            q_rope,
            k_buffer[:, :, : layer.v_head_dim],
            k_buffer[:, :, layer.v_head_dim :],
            out=o,
        )

        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class FlashInferMLAIndicesUpdaterDecode:
    def __init__(self, model_runner, attn_backend):
        # Parse Constants
        self.num_local_heads = model_runner.model_config.num_attention_heads // model_runner.tp_size
        self.kv_lora_rank = model_runner.model_config.kv_lora_rank
        self.qk_nope_head_dim = model_runner.model_config.qk_nope_head_dim
        self.qk_rope_head_dim = model_runner.model_config.qk_rope_head_dim
        self.scaling = model_runner.model_config.scaling
        self.data_type = model_runner.dtype
        self.attn_backend = attn_backend

        # Buffers and wrappers
        self.kv_indptr = attn_backend.kv_indptr
        self.q_indptr = attn_backend.q_indptr_decode

    def update(self, seq_lens, seq_lens_sum, decode_wrapper):
        self.call_begin_forward(
            decode_wrapper,
            seq_lens,
            seq_lens_sum,
            self.q_indptr,
            self.kv_indptr,
        )

    def call_begin_forward(self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_indptr = torch.cumsum(paged_kernel_lens, dim=0)
        kv_lens = paged_kernel_lens.to(torch.int32)
        sm_scale = self.scaling
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")

        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            sm_scale,
            self.data_type,
            self.data_type,
        )


class FlashInferMLAIndicesUpdaterPrefill:
    def __init__(self, model_runner, attn_backend):
        # Parse Constants
        self.num_local_heads = model_runner.model_config.num_attention_heads // model_runner.tp_size
        self.kv_lora_rank = model_runner.model_config.kv_lora_rank
        self.qk_nope_head_dim = model_runner.model_config.qk_nope_head_dim
        self.qk_rope_head_dim = model_runner.model_config.qk_rope_head_dim
        self.v_head_dim = model_runner.model_config.v_head_dim
        self.scaling = model_runner.model_config.scaling
        self.data_type = model_runner.dtype
        self.q_data_type = model_runner.dtype
        self.attn_backend = attn_backend

        # Buffers and wrappers
        self.kv_indptr = attn_backend.kv_indptr

    def update(self, seq_lens, seq_lens_sum, extend_seq_lens, prefill_wrapper_paged):
        self.call_begin_forward(
            prefill_wrapper_paged, seq_lens, seq_lens_sum, extend_seq_lens, self.kv_indptr
        )

    def call_begin_forward(
        self, wrapper_paged, paged_kernel_lens, paged_kernel_lens_sum, extend_seq_lens, kv_indptr
    ):
        qo_indptr = torch.cumsum(torch.tensor(extend_seq_lens, dtype=torch.int32), dim=0)
        kv_indptr = torch.cumsum(paged_kernel_lens, dim=0)
        kv_len_arr = paged_kernel_lens.to(torch.int32)
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        sm_scale = self.scaling

        wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            True,
            sm_scale,
            self.q_data_type,
            self.data_type,
        )
