"""KV cache pools (token -> KV rows), one buffer per layer."""

import logging

from sglang._sim import torch

logger = logging.getLogger(__name__)

GB = 1024**3


class MLATokenToKVPool(object):
    """MLA: one latent row (kv_lora_rank + qk_rope_head_dim) per token per layer."""

    def __init__(self, size, page_size, dtype, kv_lora_rank, qk_rope_head_dim, layer_num, device="cuda"):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.layer_num = layer_num
        self.kv_buffer = [
            torch.empty((size + page_size, 1, kv_lora_rank + qk_rope_head_dim), dtype=dtype, device=device)
            for _ in range(layer_num)
        ]
        logger.info(
            "KV Cache is allocated. dtype: %r, #tokens: %d, KV size: %.2f GB"
            % (dtype, size, self.get_kv_size_bytes() / GB)
        )

    def get_kv_size_bytes(self):
        return sum(buf.nbytes for buf in self.kv_buffer)

    def get_key_buffer(self, layer_id):
        return self.kv_buffer[layer_id]

    def get_value_buffer(self, layer_id):
        return self.kv_buffer[layer_id]

    def set_mla_kv_buffer(self, layer, loc, cache_k_nope, cache_k_rope):
        # Writing a few rows costs nothing measurable next to attention.
        return None

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        return None


class MHATokenToKVPool(object):
    """Standard attention: separate K and V rows (kv heads x head_dim) per token per layer."""

    def __init__(self, size, page_size, dtype, head_num, head_dim, layer_num, device="cuda"):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.head_num = head_num
        self.head_dim = head_dim
        self.layer_num = layer_num
        shape = (size + page_size, head_num, head_dim)
        self.k_buffer = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layer_num)]
        self.v_buffer = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layer_num)]
        k_size, v_size = self.get_kv_size_bytes()
        logger.info(
            "KV Cache is allocated. dtype: %r, #tokens: %d, K size: %.2f GB, V size: %.2f GB"
            % (dtype, size, k_size / GB, v_size / GB)
        )

    def get_kv_size_bytes(self):
        return sum(b.nbytes for b in self.k_buffer), sum(b.nbytes for b in self.v_buffer)

    def get_key_buffer(self, layer_id):
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id):
        return self.v_buffer[layer_id]

    def get_kv_buffer(self, layer_id):
        return self.k_buffer[layer_id], self.v_buffer[layer_id]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v):
        return None
