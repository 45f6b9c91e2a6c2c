"""Simulated ``flashinfer.mla.BatchMLAPagedAttentionWrapper``."""

from sglang._sim import kernels, torch
from sglang._sim.flashinfer.jit import get_batch_mla_module


class BatchMLAPagedAttentionWrapper(object):
    def __init__(
        self,
        float_workspace_buffer,
        use_cuda_graph=False,
        qo_indptr=None,
        kv_indptr=None,
        kv_indices=None,
        kv_len_arr=None,
        backend="auto",
    ):
        self._float_workspace_buffer = float_workspace_buffer
        self._use_cuda_graph = use_cuda_graph
        self._backend = backend
        self._cached_module = None
        self._kv_lens = []
        self._num_kv_tokens = 0

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        head_dim_ckv,
        head_dim_kpe,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
        use_profiler=False,
    ):
        # The kernel is compiled (or loaded) for exactly this (q, kv) dtype pair.
        self._cached_module = get_batch_mla_module(
            self._backend, q_data_type, kv_data_type, q_data_type, torch.int32, head_dim_ckv, head_dim_kpe
        )
        self._cached_module.plan(qo_indptr, kv_indptr, kv_len_arr, num_heads, head_dim_ckv, causal)
        self._q_data_type = q_data_type
        self._kv_data_type = kv_data_type
        self._num_heads = num_heads
        self._page_size = page_size
        self._kv_lens = kv_len_arr.tolist()
        self._num_kv_tokens = len(kv_indices) * page_size

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False):
        if self._cached_module is None:
            raise RuntimeError("plan() must be called before run()")
        if ckv_cache.dtype is not self._kv_data_type:
            raise ValueError(
                "ckv_cache has dtype %r but plan() was called with kv_data_type=%r"
                % (ckv_cache.dtype, self._kv_data_type)
            )
        row = ckv_cache.shape[-1] + kpe_cache.shape[-1]
        kv_bytes = self._num_kv_tokens * row * ckv_cache.dtype.itemsize
        kernels.charge_attention("flashinfer", kv_bytes, q_nope.nbytes + q_pe.nbytes)
        o = out if out is not None else q_nope.new_empty(q_nope.shape)
        if return_lse:
            return o, torch.empty((q_nope.shape[0], q_nope.shape[1]), dtype=torch.float32)
        return o
