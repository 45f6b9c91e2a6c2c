"""A simulated FlashInfer (just the pieces the simulated SGLang uses)."""

from sglang._sim.flashinfer.attention import (  # noqa: F401
    BatchDecodeWithPagedKVCacheWrapper,
    BatchPrefillWithPagedKVCacheWrapper,
    BatchPrefillWithRaggedKVCacheWrapper,
    trtllm_batch_decode_with_kv_cache_mla,
    trtllm_ragged_attention_deepseek,
)
from sglang._sim.flashinfer.jit import FLASHINFER_VERSION as __version__  # noqa: F401
from sglang._sim.flashinfer.mla import BatchMLAPagedAttentionWrapper  # noqa: F401
