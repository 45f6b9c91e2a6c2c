"""Triton attention kernels (decode kernels load any KV dtype and convert in registers)."""

from sglang._sim.kernels import triton_decode_attention_fwd
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class TritonAttnBackend(AttentionBackend):
    kernel = "triton"

    def __init__(self, model_runner, skip_prefill=False):
        super().__init__()
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.use_mla = model_runner.model_config.use_mla
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = forward_batch.seq_lens_cpu

    def _buffers(self, layer):
        if self.use_mla:
            return self.token_to_kv_pool.get_key_buffer(layer.layer_id), None
        return self.token_to_kv_pool.get_kv_buffer(layer.layer_id)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        k_buffer, v_buffer = self._buffers(layer)
        return triton_decode_attention_fwd(q, k_buffer, v_buffer, self.forward_metadata)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        # extend_attention_fwd: new tokens attend to the cached prefix plus themselves
        k_buffer, v_buffer = self._buffers(layer)
        return triton_decode_attention_fwd(q, k_buffer, v_buffer, self.forward_metadata)
