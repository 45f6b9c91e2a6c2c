"""The attention layer: shapes that the attention backends read."""


class RadixAttention(object):
    def __init__(self, num_heads, head_dim, scaling, num_kv_heads, layer_id, v_head_dim=-1, logit_cap=0.0):
        self.tp_q_head_num = num_heads
        self.tp_k_head_num = num_kv_heads
        self.tp_v_head_num = num_kv_heads
        self.head_dim = head_dim
        self.qk_head_dim = head_dim
        self.v_head_dim = v_head_dim if v_head_dim != -1 else head_dim
        self.scaling = scaling
        self.layer_id = layer_id
        self.logit_cap = logit_cap

    def forward(self, q, k, v, forward_batch, attn_backend, **kwargs):
        return attn_backend.forward(q, k, v, self, forward_batch, **kwargs)
