"""A simulated FlashInfer (just the pieces the simulated SGLang uses)."""

from sglang._sim.flashinfer.attention import (  # noqa: F401
    BatchDecodeWithPagedKVCacheWrapper,
    BatchPrefillWithPagedKVCacheWrapper,
    BatchPrefillWithRaggedKVCacheWrapper,
    trtllm_batch_decode_with_kv_cache_mla,
    trtllm_ragged_attention_deepseek,
)
from sglang._sim.flashinfer.jit import flashinfer_version as _flashinfer_version
from sglang._sim.flashinfer.mla import BatchMLAPagedAttentionWrapper  # noqa: F401

__version__ = _flashinfer_version()
