"""Paged MLA prefill that reads only the batch's rows of an FP8 KV pool, for FlashInfer MLA backends.

SGLang's FlashInfer MLA backend (and every subclass that inherits its extend path: FlashMLA, our
custom_fp8_mla) runs a paged prefill — an extend whose requests already have KV in the pool (a prefix
cache hit, a later chunk of a chunked prefill) — on ``get_key_buffer(layer).to(q.dtype)``: a BF16 copy
of the *whole* per-layer pool, every layer, for a batch that reads ``sum(seq_lens)`` rows of it. On a
large FP8 pool that copy is the prefill (the profile: ``aten::copy_`` 96-99 % of GPU time; TTFT grows
with ``mem_fraction_static``).

``PrefillGatherMixin`` keeps the planning and the kernel and changes which rows the kernel sees: at
planning time the paged wrapper is planned on the indices ``0..n-1`` instead of the batch's pool row ids
(``kv_indices``, recorded), and at run time the kernel reads a compact BF16 copy of exactly those rows,
in that order (row ``j`` of the copy is pool row ``kv_indices[j]``), so every request sees the same rows
in the same order as with the full cast, and the attention result is the same.

Used only for an eager paged prefill of an FP8 pool without speculative or DCP metadata (the MHA paths
and ragged prefill never read the pool; a prefill inside a piecewise CUDA graph keeps the stock cast, as
its shapes must not depend on the batch). One source: ``kernels/mla_prefill_gather.py``, which the patch
sets name under ``files_from`` (applied byte for byte). Imports nothing from SGLang at module level
except the optional graph-mode probes, so it loads under any SGLang version that has them or not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _graph_probe(module: str, name: str) -> Callable[[], bool]:
    try:
        mod = __import__(module, fromlist=[name])
        return getattr(mod, name)
    except (ImportError, AttributeError):
        return lambda: False


_in_piecewise_graph = _graph_probe(
    "sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph", "is_in_tc_piecewise_cuda_graph")
_in_breakable_graph = _graph_probe(
    "sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph", "is_in_breakable_cuda_graph")


def kv_write_loc(forward_batch: Any) -> Any:
    """Where this batch's new KV goes, in the form the running SGLang's pool takes: 0.5.23's
    ``KVWriteLoc.for_batch``; 0.5.16 has a ``KVWriteLoc`` without it and takes ``out_cache_loc``."""
    from sglang.srt.mem_cache import memory_pool

    for_batch = getattr(getattr(memory_pool, "KVWriteLoc", None), "for_batch", None)
    return forward_batch.out_cache_loc if for_batch is None else for_batch(forward_batch)


def gather_rows(pool: torch.Tensor, kv_indices: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows ``kv_indices`` of ``pool`` (``[rows, 1, dim]``, FP8), in that order, cast to ``dtype``.

    Indexed as bytes: index_select on float8 is not implemented for every device and build.
    """
    rows = pool.view(torch.uint8).index_select(0, kv_indices)
    return rows.view(pool.dtype).to(dtype)


@dataclass(frozen=True)
class PrefillGather:
    """One batch's gather: the pool rows the paged wrapper was planned for, in kernel order."""

    kv_indices: torch.Tensor


class _RemappedPlan:
    """Stands in for the paged prefill wrapper while it is planned: records the batch's ``kv_indices``
    and plans the real wrapper on ``0..n-1`` (the compact copy's rows)."""

    def __init__(self, wrapper: Any, on_plan: Callable[[PrefillGather], None]):
        self._wrapper = wrapper
        self._on_plan = on_plan

    def plan(self, qo_indptr: Any, kv_indptr: Any, kv_indices: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        self._on_plan(PrefillGather(kv_indices))
        remapped = torch.arange(kv_indices.numel(), dtype=kv_indices.dtype, device=kv_indices.device)
        return self._wrapper.plan(qo_indptr, kv_indptr, remapped, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapper, name)


def gathering_prefill_updater(base: type) -> type:
    """A subclass of SGLang's ``FlashInferMLAIndicesUpdaterPrefill`` (``base``) whose paged plans are
    remapped when the backend gathers; arguments are read by name, so both releases' signatures work."""

    signature = inspect.signature(base.call_begin_forward)

    class GatheringPrefillUpdater(base):  # type: ignore[misc, valid-type]
        def call_begin_forward(self, wrapper_ragged: Any, wrapper_paged: Any, *args: Any, **kwargs: Any) -> Any:
            backend = self.attn_backend
            backend.prefill_gather = None
            call = super().call_begin_forward
            named = signature.bind(self, wrapper_ragged, wrapper_paged, *args, **kwargs).arguments
            if backend.gathers_prefill() and not named.get("use_ragged") and named.get("spec_info") is None \
                    and named.get("attn_dcp_metadata") is None and not named.get("fast_verify_plan_kwargs"):
                wrapper_paged = _RemappedPlan(wrapper_paged, backend.set_prefill_gather)
            return call(wrapper_ragged, wrapper_paged, *args, **kwargs)

    return GatheringPrefillUpdater


class PrefillGatherMixin:
    """Put first among the bases of a FlashInfer MLA backend class; call ``init_prefill_gather`` at the end
    of ``__init__`` with SGLang's ``FlashInferMLAIndicesUpdaterPrefill``."""

    prefill_gather: Optional[PrefillGather] = None

    def init_prefill_gather(self, model_runner: Any, updater_base: type) -> None:
        pool = self.token_to_kv_pool  # type: ignore[attr-defined]
        self.prefill_gather = None
        self._gather_prefill = (
            not getattr(self, "skip_prefill", False)
            and getattr(pool, "dtype", None) in FP8_DTYPES
            and pool.dtype != model_runner.dtype
            and not getattr(pool, "dsa_kv_cache_store_fp8", False)
        )
        if self._gather_prefill:
            self.indices_updater_prefill = gathering_prefill_updater(updater_base)(model_runner, self)

    def gathers_prefill(self) -> bool:
        return self._gather_prefill and not _in_piecewise_graph() and not _in_breakable_graph()

    def set_prefill_gather(self, gather: PrefillGather) -> None:
        self.prefill_gather = gather

    def forward_extend(self, q: torch.Tensor, k: Optional[torch.Tensor], v: Optional[torch.Tensor], layer: Any,
                       forward_batch: Any, save_kv_cache: bool = True, q_rope: Optional[torch.Tensor] = None,
                       k_rope: Optional[torch.Tensor] = None) -> torch.Tensor:
        meta = self.forward_metadata  # type: ignore[attr-defined]
        chunked_mha = forward_batch.attn_attend_prefix_cache is not None and any(
            forward_batch.extend_prefix_lens_cpu)
        gather = self.prefill_gather
        if gather is None or chunked_mha or getattr(meta, "use_ragged", True):
            return super().forward_extend(  # type: ignore[misc]
                q, k, v, layer, forward_batch, save_kv_cache, q_rope=q_rope, k_rope=k_rope)

        pool = self.token_to_kv_pool  # type: ignore[attr-defined]
        if save_kv_cache and k is not None:
            assert v is not None
            loc = kv_write_loc(forward_batch)
            if k_rope is not None:
                pool.set_mla_kv_buffer(layer, loc, k, k_rope)
            else:
                pool.set_kv_buffer(layer, loc, k, v)
        heads, v_dim = layer.tp_q_head_num, layer.v_head_dim
        if q_rope is not None:
            q = q.view(-1, heads, v_dim)
            q_rope = q_rope.view(-1, heads, layer.head_dim - v_dim)
        else:
            qall = q.view(-1, heads, layer.head_dim)
            q, q_rope = qall[:, :, :v_dim], qall[:, :, v_dim:]
        # After the write: the new tokens' rows are among the ones gathered.
        rows = gather_rows(pool.get_key_buffer(layer.layer_id), gather.kv_indices, q.dtype)
        o = q.new_empty(q.shape)
        o = meta.prefill_wrapper.run(q, q_rope, rows[:, :, :v_dim], rows[:, :, v_dim:], out=o)
        return o.view(-1, heads * v_dim)
