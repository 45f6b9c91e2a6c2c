"""Reference attention in plain PyTorch (torch_native) and FlexAttention."""

from sglang._sim.kernels import torch_native_attention
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class TorchNativeAttnBackend(AttentionBackend):
    kernel = "torch_native"

    def __init__(self, model_runner, skip_prefill=False):
        super().__init__()
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.use_mla = model_runner.model_config.use_mla
        self.dtype = model_runner.dtype
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = forward_batch.seq_lens_cpu

    def _attend(self, q, layer):
        if self.use_mla:
            k_buffer, v_buffer = self.token_to_kv_pool.get_key_buffer(layer.layer_id), None
        else:
            k_buffer, v_buffer = self.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        # scaled_dot_product_attention runs in the query dtype: the cache is converted first.
        k_buffer = k_buffer.to(q.dtype)
        v_buffer = v_buffer.to(q.dtype) if v_buffer is not None else None
        return torch_native_attention(self.kernel, q, k_buffer, v_buffer, self.forward_metadata)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        return self._attend(q, layer)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        return self._attend(q, layer)


class FlexAttnBackend(TorchNativeAttnBackend):
    kernel = "flex_attention"
