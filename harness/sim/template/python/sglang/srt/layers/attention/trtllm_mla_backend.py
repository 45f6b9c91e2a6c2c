"""TensorRT-LLM MLA kernels from FlashInfer (Blackwell): native FP8 decode, ragged prefill."""

from sglang._sim import torch
from sglang._sim.flashinfer import trtllm_batch_decode_with_kv_cache_mla, trtllm_ragged_attention_deepseek
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class TRTLLMMLABackend(AttentionBackend):
    def __init__(self, model_runner, skip_prefill=False):
        super().__init__()
        config = model_runner.model_config
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.kv_lora_rank = config.kv_lora_rank
        self.qk_nope_head_dim = config.qk_nope_head_dim
        self.qk_rope_head_dim = config.qk_rope_head_dim
        self.page_size = model_runner.page_size
        self.workspace_buffer = torch.empty(128 * 1024 * 1024, dtype=torch.uint8)
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = forward_batch.seq_lens_cpu

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        seq_lens = self.forward_metadata
        o = trtllm_batch_decode_with_kv_cache_mla(
            q,
            k_cache,
            self.workspace_buffer,
            self.qk_nope_head_dim,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            None,
            seq_lens,
            max(seq_lens),
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        o = trtllm_ragged_attention_deepseek(
            q,
            k if k is not None else q,
            v if v is not None else q,
            self.workspace_buffer,
            self.forward_metadata,
        )
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
