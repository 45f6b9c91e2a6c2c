"""FlashAttention v3/v4 (sgl_kernel.flash_attn) backend."""

from sglang._sim import torch
from sglang._sim.kernels import flash_attn_with_kvcache
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class FlashAttentionBackend(AttentionBackend):
    def __init__(self, model_runner, skip_prefill=False, fa_impl_ver=3):
        super().__init__()
        self.fa_impl_ver = fa_impl_ver
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.use_mla = model_runner.model_config.use_mla
        self.kv_cache_dtype = model_runner.kv_cache_dtype
        self.kv_cache_dtype_str = model_runner.server_args.kv_cache_dtype
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = forward_batch.seq_lens_cpu

    def _attend(self, q, layer):
        # FA3 reads an FP8 (e4m3) cache natively; the query is quantized to match.
        if self.kv_cache_dtype_str != "auto" and self.kv_cache_dtype is torch.float8_e4m3fn:
            q = q.to(self.kv_cache_dtype)
        if self.use_mla:
            k_cache, v_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id), None
        else:
            k_cache, v_cache = self.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        return flash_attn_with_kvcache(q, k_cache, v_cache, self.forward_metadata, version=self.fa_impl_ver)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        return self._attend(q, layer)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        return self._attend(q, layer)
