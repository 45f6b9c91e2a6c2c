"""Model configuration.

The simulated target does not need weights: the architecture is read from
``<model_path>/config.json`` when that file exists, and otherwise derived from the
model name (Llama/Qwen names are standard MHA models, everything else is treated
as an MLA model like GLM-5 or DeepSeek-V3).
"""

import json
import os
import re

from sglang._sim import torch

# name fragment -> (architecture, model_type, layers, heads, kv_heads, head_dim, params in B, context)
_MHA_FAMILIES = (
    ("qwen", ("Qwen3ForCausalLM", "qwen3", 36, 32, 8, 128, 8.0, 40960)),
    ("llama", ("LlamaForCausalLM", "llama", 32, 32, 8, 128, 8.0, 131072)),
)
_MLA_FAMILIES = (
    ("deepseek", ("DeepseekV3ForCausalLM", "deepseek_v3", 61, 128, 671.0, 163840)),
    ("kimi", ("DeepseekV3ForCausalLM", "kimi_k2", 61, 64, 1000.0, 131072)),
    ("glm", ("GlmMoeDsaForCausalLM", "glm_moe_dsa", 78, 64, 744.0, 202752)),
)
_DEFAULT_MLA = ("GlmMoeDsaForCausalLM", "glm_moe_dsa", 78, 64, 744.0, 202752)


class ModelConfig(object):
    def __init__(self, model_path, context_length=None, dtype="auto"):
        self.model_path = model_path
        name = os.path.basename(model_path.rstrip("/")).lower() or model_path.lower()
        self.hf_config = self._read_config(model_path)
        self.dtype = torch.bfloat16 if dtype in ("auto", "bfloat16") else torch.float16
        self.quantization = None
        if "nvfp4" in name or "fp4" in name:
            self.quantization, bytes_per_param = "modelopt_fp4", 0.5625
        elif "fp8" in name:
            self.quantization, bytes_per_param = "fp8", 1.0
        else:
            bytes_per_param = 2.0

        family = next((f for key, f in _MHA_FAMILIES if key in name), None)
        self.use_mla = family is None and self.hf_config.get("kv_lora_rank", 512) is not None
        if family is not None:
            arch, mtype, layers, heads, kv_heads, head_dim, params, ctx = family
            self.num_key_value_heads = kv_heads
            self.head_dim = head_dim
        else:
            arch, mtype, layers, heads, params, ctx = next(
                (f for key, f in _MLA_FAMILIES if key in name), _DEFAULT_MLA
            )
            self.kv_lora_rank = 512
            self.qk_rope_head_dim = 64
            self.qk_nope_head_dim = 128
            self.v_head_dim = 128
            self.head_dim = self.kv_lora_rank + self.qk_rope_head_dim
        size = re.search(r"(\d+(?:\.\d+)?)b\b", name.replace("-", " ").replace("_", " "))
        if size:
            params = float(size.group(1))
        cfg = self.hf_config
        self.architectures = cfg.get("architectures") or [arch]
        self.model_type = cfg.get("model_type", mtype)
        self.num_hidden_layers = cfg.get("num_hidden_layers", layers)
        self.num_attention_heads = cfg.get("num_attention_heads", heads)
        self.context_len = context_length or cfg.get("max_position_embeddings", ctx)
        self.weight_bytes = params * 1e9 * bytes_per_param
        self.scaling = (self.head_dim**-0.5) if not self.use_mla else (192**-0.5)
        self.is_generation = True

    @staticmethod
    def _read_config(model_path):
        path = os.path.join(model_path, "config.json")
        if not os.path.isfile(path):
            return {}
        with open(path) as f:
            return json.load(f)

    def kv_bytes_per_token_per_layer(self, kv_dtype):
        """Bytes one token occupies in one layer of the KV pool."""
        if self.use_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype.itemsize
        return 2 * self.num_key_value_heads * self.head_dim * kv_dtype.itemsize
