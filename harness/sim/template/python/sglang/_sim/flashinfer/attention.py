"""Simulated FlashInfer wrappers for standard (non-MLA) attention and the TRT-LLM kernels."""

from sglang._sim import kernels, torch
from sglang._sim.gpus import device_capability


class _PagedWrapper(object):
    def __init__(
        self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, backend="auto", **kwargs
    ):
        self._seq_lens = []

    def plan(self, indptr, indices, last_page_len, *args, **kwargs):
        seq_lens = kwargs.get("seq_lens")
        if seq_lens is None:
            seq_lens = [len(indices.tolist())]
        self._seq_lens = list(seq_lens)

    begin_forward = plan

    def run(self, q, paged_kv_cache, **kwargs):
        k_cache, v_cache = paged_kv_cache
        return kernels.mha_attention("flashinfer", q, k_cache, v_cache, self._seq_lens)

    forward = run


class BatchDecodeWithPagedKVCacheWrapper(_PagedWrapper):
    pass


class BatchPrefillWithPagedKVCacheWrapper(_PagedWrapper):
    pass


class BatchPrefillWithRaggedKVCacheWrapper(_PagedWrapper):
    pass


class InternalError(RuntimeError):
    pass


InternalError.__module__ = "tvm.error"


def _check_fmha_runner_arch():
    major, minor = device_capability()
    # TllmGenFmhaRunner is built for SM100/SM103 only.
    if (major, minor) not in ((10, 0), (10, 3)):
        raise InternalError(
            "Error in function 'TllmGenFmhaRunner' at "
            "/workspace/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:37: Unsupported architecture"
        )


def trtllm_batch_decode_with_kv_cache_mla(
    query,
    kv_cache,
    workspace_buffer,
    qk_nope_head_dim,
    kv_lora_rank,
    qk_rope_head_dim,
    block_tables,
    seq_lens,
    max_seq_len,
    bmm1_scale=1.0,
    bmm2_scale=1.0,
):
    # SM100 runs the TRT-LLM-gen kernel, SM12x dispatches to XQA: both read FP8 natively.
    return kernels.mla_decode(
        "trtllm_mla", query, kv_cache, list(seq_lens), native_dtypes=(torch.bfloat16, torch.float8_e4m3fn)
    )


def trtllm_ragged_attention_deepseek(query, key, value, workspace_buffer, seq_lens, **kwargs):
    _check_fmha_runner_arch()
    return kernels.mha_attention("trtllm_mla", query, key, value, list(seq_lens))
