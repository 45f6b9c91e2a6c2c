"""The prefill gather (kernels/mla_prefill_gather.py, shipped in custom_fp8_mla and flashmla_gather_prefill)
gives a paged MLA prefill the same result as the stock whole-pool cast.

Stock FlashInfer MLA plans its paged prefill on the batch's pool row ids and runs it on
`get_key_buffer(layer).to(bf16)`. The mixin plans on 0..n-1 and runs on the n gathered rows. A stand-in
for SGLang's backend and updater (their call shapes: `call_begin_forward(wrapper_ragged, wrapper_paged, …,
use_ragged, spec_info, attn_dcp_metadata=…)`, `plan(qo_indptr, kv_indptr, kv_indices, …)`,
`run(q, q_rope, ckv, kpe, out=)`) and a reference paged MLA kernel (softmax over the planned rows, causal
within each request's new tokens) run both ways; the outputs must be identical. No SGLang needed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install torch==2.13.0 for the CPU build)")

SOURCE = Path(__file__).resolve().parents[2] / "kernels" / "mla_prefill_gather.py"
V_DIM, ROPE, HEADS = 512, 64, 4


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("mla_prefill_gather_under_test", SOURCE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


mpg = _load()


@pytest.fixture(autouse=True)
def sglang_memory_pool(monkeypatch: pytest.MonkeyPatch):
    """SGLang 0.5.16's memory_pool as the mixin sees it: a KVWriteLoc without `for_batch` (bare locs)."""
    import types

    pool = types.ModuleType("sglang.srt.mem_cache.memory_pool")
    pool.KVWriteLoc = type("KVWriteLoc", (), {})  # type: ignore[attr-defined]
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setattr(sys.modules["sglang.srt.mem_cache"], "memory_pool", pool, raising=False)
    monkeypatch.setitem(sys.modules, "sglang.srt.mem_cache.memory_pool", pool)
    return pool


class PagedWrapper:
    """Reference MLA paged prefill: each new token attends to its request's planned rows up to itself."""

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, *rest):
        self.qo_indptr, self.kv_indptr, self.kv_indices = qo_indptr, kv_indptr, kv_indices.long()

    def run(self, q, q_rope, ckv, kpe, out):
        for r in range(len(self.qo_indptr) - 1):
            q0, q1 = int(self.qo_indptr[r]), int(self.qo_indptr[r + 1])
            k0, k1 = int(self.kv_indptr[r]), int(self.kv_indptr[r + 1])
            rows = self.kv_indices[k0:k1]
            c, p = ckv[rows, 0].float(), kpe[rows, 0].float()
            prefix = (k1 - k0) - (q1 - q0)
            for t in range(q1 - q0):
                visible = prefix + t + 1
                s = q[q0 + t].float() @ c[:visible].T + q_rope[q0 + t].float() @ p[:visible].T
                out[q0 + t] = (torch.softmax(s * 0.1, -1) @ c[:visible]).to(out.dtype)
        return out


class Pool:
    def __init__(self, rows: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.buf = (torch.randn(rows, 1, V_DIM + ROPE, generator=g) * 2).to(torch.float8_e4m3fn)
        self.dtype = self.buf.dtype
        self.written: list[Any] = []

    def get_key_buffer(self, layer_id: int):
        return self.buf

    def set_kv_buffer(self, layer, loc, k, v):
        self.written.append(loc)
        self.buf[loc] = k.to(self.dtype)


class Updater:
    """SGLang's FlashInferMLAIndicesUpdaterPrefill, the parts the mixin touches."""

    def __init__(self, model_runner, attn_backend):
        self.attn_backend = attn_backend

    def call_begin_forward(self, wrapper_ragged, wrapper_paged, req_to_rows, seq_lens, prefix_lens, use_ragged,
                           spec_info=None, attn_dcp_metadata=None):
        kv_indptr = torch.tensor([0] + list(torch.cumsum(torch.tensor(seq_lens), 0)), dtype=torch.int32)
        qo_indptr = torch.tensor([0] + list(torch.cumsum(torch.tensor(seq_lens) - torch.tensor(prefix_lens), 0)),
                                 dtype=torch.int32)
        kv_indices = torch.cat([rows[:n] for rows, n in zip(req_to_rows, seq_lens)]).to(torch.int32)
        if not use_ragged:
            wrapper_paged.plan(qo_indptr, kv_indptr, kv_indices, kv_indptr[1:] - kv_indptr[:-1], HEADS)


class StockBackend:
    """FlashInfer MLA's paged extend: the whole pool cast, as SGLang does it."""

    def __init__(self, pool: Pool, gather: bool):
        self.token_to_kv_pool = pool
        self.skip_prefill = False
        self.forward_metadata = SimpleNamespace(prefill_wrapper=PagedWrapper(), use_ragged=False)
        self.indices_updater_prefill = Updater(None, self)
        if gather:
            self.init_prefill_gather(SimpleNamespace(dtype=torch.bfloat16), Updater)  # type: ignore[attr-defined]

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)
        qall = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        q, q_rope = qall[:, :, :V_DIM], qall[:, :, V_DIM:]
        k_buf = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)
        o = q.new_empty(q.shape)
        o = self.forward_metadata.prefill_wrapper.run(q, q_rope, k_buf[:, :, :V_DIM], k_buf[:, :, V_DIM:], out=o)
        return o.view(-1, layer.tp_q_head_num * V_DIM)


class GatheringBackend(mpg.PrefillGatherMixin, StockBackend):
    def __init__(self, pool: Pool):
        super().__init__(pool, gather=True)


LAYER = SimpleNamespace(tp_q_head_num=HEADS, v_head_dim=V_DIM, head_dim=V_DIM + ROPE, layer_id=0)


def _batch(seed: int, prefix_lens: list[int], new_lens: list[int], pool_rows: int):
    """Requests with KV in the pool already (prefix) and new tokens, their rows scattered over the pool."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(pool_rows - 1, generator=g) + 1  # row 0: SGLang's padding slot
    seq_lens = [p + n for p, n in zip(prefix_lens, new_lens)]
    starts = [sum(seq_lens[:i]) for i in range(len(seq_lens))]
    req_rows = [perm[s:s + n] for s, n in zip(starts, seq_lens)]
    new_loc = torch.cat([rows[p:] for rows, p in zip(req_rows, prefix_lens)])
    n_new = sum(new_lens)
    q = torch.randn(n_new, HEADS * (V_DIM + ROPE), generator=g).to(torch.bfloat16)
    k = torch.randn(n_new, 1, V_DIM + ROPE, generator=g).to(torch.bfloat16)
    return req_rows, seq_lens, new_loc, q, k


def _extend(backend: StockBackend, req_rows, seq_lens, prefix_lens, new_loc, q, k, use_ragged=False,
            spec_info: Optional[object] = None):
    backend.forward_metadata.use_ragged = use_ragged
    backend.indices_updater_prefill.call_begin_forward(None, backend.forward_metadata.prefill_wrapper, req_rows,
                                                       seq_lens, prefix_lens, use_ragged, spec_info)
    fb = SimpleNamespace(out_cache_loc=new_loc, attn_attend_prefix_cache=None, extend_prefix_lens_cpu=prefix_lens)
    return backend.forward_extend(q, k, k[:, :, :V_DIM], LAYER, fb)


@pytest.mark.parametrize("prefix_lens,new_lens", [([7], [5]), ([0, 33, 4], [3, 9, 1]), ([120, 1], [1, 64])])
def test_the_gathered_prefill_equals_the_whole_pool_cast(prefix_lens, new_lens):
    pool_rows = 4096
    req_rows, seq_lens, new_loc, q, k = _batch(1, prefix_lens, new_lens, pool_rows)
    stock = _extend(StockBackend(Pool(pool_rows, 2), gather=False), req_rows, seq_lens, prefix_lens, new_loc, q, k)
    gathering = GatheringBackend(Pool(pool_rows, 2))
    ours = _extend(gathering, req_rows, seq_lens, prefix_lens, new_loc, q, k)
    assert gathering.prefill_gather is not None, "the paged prefill was not gathered"
    # Planned on the compact rows 0..n-1, not on pool row ids.
    assert torch.equal(gathering.forward_metadata.prefill_wrapper.kv_indices, torch.arange(sum(seq_lens)))
    assert torch.equal(ours, stock)


def test_the_new_tokens_are_written_before_they_are_gathered():
    pool_rows = 512
    req_rows, seq_lens, new_loc, q, k = _batch(3, [10], [6], pool_rows)
    backend = GatheringBackend(Pool(pool_rows, 4))
    stock = _extend(StockBackend(Pool(pool_rows, 4), gather=False), req_rows, seq_lens, [10], new_loc, q, k)
    assert torch.equal(_extend(backend, req_rows, seq_lens, [10], new_loc, q, k), stock)
    assert len(backend.token_to_kv_pool.written) == 1


def test_ragged_and_speculative_prefills_keep_the_stock_path():
    pool_rows = 512
    req_rows, seq_lens, new_loc, q, k = _batch(5, [4], [4], pool_rows)
    backend = GatheringBackend(Pool(pool_rows, 6))
    _extend(backend, req_rows, seq_lens, [4], new_loc, q, k, spec_info=object())
    assert backend.prefill_gather is None
    planned = backend.forward_metadata.prefill_wrapper.kv_indices
    assert not torch.equal(planned, torch.arange(len(planned))), "a speculative plan must keep the pool row ids"


def test_a_pool_in_the_model_dtype_is_never_gathered():
    pool = Pool(64, 7)
    pool.buf, pool.dtype = pool.buf.to(torch.bfloat16), torch.bfloat16
    backend = GatheringBackend(pool)
    assert backend.gathers_prefill() is False
    assert type(backend.indices_updater_prefill) is Updater


def test_the_write_location_takes_the_form_the_release_wants(sglang_memory_pool):
    batch = SimpleNamespace(out_cache_loc=torch.tensor([3, 4]))
    assert mpg.kv_write_loc(batch) is batch.out_cache_loc  # 0.5.16: a bare loc
    sglang_memory_pool.KVWriteLoc.for_batch = classmethod(lambda cls, fb: ("loc-of", fb))  # 0.5.23
    assert mpg.kv_write_loc(batch) == ("loc-of", batch)
