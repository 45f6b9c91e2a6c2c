"""CuteDSL MLA decode kernels (SM100), page size 32/64, native FP8 KV cache."""

from sglang._sim.kernels import cutedsl_mla_decode, mha_attention
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend


class CuteDSLMLABackend(AttentionBackend):
    def __init__(self, model_runner, skip_prefill=False):
        super().__init__()
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.page_size = model_runner.page_size
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = forward_batch.seq_lens_cpu

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        kv_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        o = cutedsl_mla_decode(q, kv_cache, self.forward_metadata, page_size=self.page_size)
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        kv_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        o = mha_attention("cutedsl_mla", q, kv_cache, kv_cache, self.forward_metadata)
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
