"""FlashInfer attention for standard (non-MLA) models. FP8 KV caches are read natively."""

from sglang._sim import torch
from sglang._sim.flashinfer import BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class FlashInferAttnBackend(AttentionBackend):
    def __init__(self, model_runner, skip_prefill=False):
        super().__init__()
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.q_data_type = model_runner.dtype
        self.data_type = model_runner.kv_cache_dtype
        workspace = torch.empty(128 * 1024 * 1024, dtype=torch.uint8)
        self.decode_wrapper = BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        self.prefill_wrapper = BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        wrapper = self.decode_wrapper if forward_batch.forward_mode.is_decode() else self.prefill_wrapper
        indices = torch.empty(forward_batch.seq_lens_sum, dtype=torch.int32)
        wrapper.plan(
            None,
            indices,
            None,
            q_data_type=self.q_data_type,
            kv_data_type=self.data_type,
            seq_lens=forward_batch.seq_lens_cpu,
        )
        self.forward_metadata = wrapper

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        return self.forward_metadata.run(q, self.token_to_kv_pool.get_kv_buffer(layer.layer_id))

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        return self.forward_metadata.run(q, self.token_to_kv_pool.get_kv_buffer(layer.layer_id))
