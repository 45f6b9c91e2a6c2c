"""Gather-cast for FlashInfer MLA over a low-precision (FP8) KV pool.

Stock ``flashinfer_mla_backend.py`` runs FlashInfer's BF16 MLA kernel on
``token_to_kv_pool.get_key_buffer(layer_id).to(q.dtype)``: a BF16 copy of the
*whole* per-layer pool, every layer, every step, although a batch reads only
the rows its ``kv_indices`` name. This module copies just those rows, in
``kv_indices`` order, into a compact BF16 buffer. Row ``j`` of the compact
buffer is pool row ``kv_indices[j]``, so the kernel's indices become simply
``0 .. n-1`` (:func:`remapped_kv_indices`) with the same ``kv_indptr``: plan
once per batch with those, gather once per layer, run the kernel on the
compact buffer. The attention result is the same as the full-cast path's.

API
---
``gather_cast_kv(k_buffer, kv_indices, out=None, num_valid=None)``
    The gather itself (one function; the rest of this file only holds buffers
    for it).
``remapped_kv_indices(num_rows)``
    The kernel's indices for a compact buffer: ``arange(num_rows)``, int32.
``GatherCastBuffers``
    Preallocated fixed-address state for one attention backend: the compact
    buffer, the remapped indices, and what CUDA-graph replay needs (a device
    live-row count, the graph wrappers' index buffer, the overflow fallback).
``GatherCastPlan``
    What ``forward_decode``/``forward_extend`` need for one batch.

CUDA graphs
-----------
A captured graph replays fixed kernels on fixed addresses with fixed launch
shapes, so nothing in the captured path may depend on the live row count on
the host, and nothing may synchronise with the host. The fixed-size form
``gather_cast_kv(pool, kv_indices_buf[:rows], out=compact[:rows],
num_valid=count)`` takes the live count as a one-element *device* tensor
written before each replay. On CUDA the Triton kernel below launches a fixed
grid and loops up to that count, so each replay copies only the live rows. The
portable PyTorch path gathers all ``rows`` rows and points the padding rows
(position >= count) at a valid pool row (``pad_index``), so a stale tail of
the index buffer is never dereferenced; it does fixed work, which is correct
but does not save anything in a graph (it is what the CPU tests run).

Nothing here imports the rest of SGLang.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch

try:  # Triton ships with SGLang's CUDA builds; the PyTorch path needs nothing.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None
    tl = None

__all__ = [
    "GatherCastBuffers",
    "GatherCastPlan",
    "gather_cast_capacity",
    "gather_cast_kv",
    "remapped_kv_indices",
]

NumValid = Union[int, torch.Tensor, None]


def remapped_kv_indices(
    num_rows: int,
    *,
    out: Optional[torch.Tensor] = None,
    device: Union[torch.device, str, None] = None,
) -> torch.Tensor:
    """The kernel's page indices for a compact buffer: ``0, 1, ..., num_rows-1`` (int32).

    With page size 1, request ``i`` reads ``kv_indices[kv_indptr[i]:kv_indptr[i+1]]``;
    the compact buffer holds exactly those rows in that order, so the remapped
    index of position ``j`` is ``j`` and ``kv_indptr`` stays as it is. With
    ``out`` the values are written into ``out[:num_rows]`` (no allocation, no
    host synchronisation) and that view is returned.
    """
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    if out is None:
        return torch.arange(num_rows, dtype=torch.int32, device=device)
    if out.dim() != 1 or out.shape[0] < num_rows:
        raise ValueError(
            f"out must be 1-D with at least {num_rows} entries, got shape {tuple(out.shape)}"
        )
    view = out[:num_rows]
    torch.arange(num_rows, out=view)
    return view


def gather_cast_kv(
    k_buffer: torch.Tensor,
    kv_indices: torch.Tensor,
    out: Optional[torch.Tensor] = None,
    num_valid: NumValid = None,
    *,
    dtype: torch.dtype = torch.bfloat16,
    pad_index: int = 0,
    impl: str = "auto",
) -> torch.Tensor:
    """Copy the pool rows ``kv_indices`` names into a compact buffer, cast to ``dtype``.

    ``result[j] = k_buffer[kv_indices[j]].to(result.dtype)`` for every live
    position ``j < num_valid`` (all ``len(kv_indices)`` positions when
    ``num_valid`` is None).

    Args:
        k_buffer: the per-layer pool, ``[pool_rows, *row_shape]`` (SGLang's MLA
            pool: ``[size + page_size, 1, kv_lora_rank + qk_rope_head_dim]``,
            float8_e4m3fn with an FP8 KV cache).
        kv_indices: 1-D int32/int64 pool row ids, in the order the kernel reads
            them (SGLang's ``kv_indices``, page size 1).
        out: optional preallocated buffer ``[>= len(kv_indices), *row_shape]``;
            the result is written to ``out[:len(kv_indices)]`` and that view is
            returned. Without it a new tensor of ``dtype`` is allocated.
        num_valid: the live count. None: every position is live. An int: only
            ``kv_indices[:num_valid]`` is read and ``out[:num_valid]`` written
            and returned (the eager form). A one-element integer tensor on
            ``k_buffer``'s device: the CUDA-graph form -- ``kv_indices`` and
            ``out`` keep their fixed size and the count is read on the device
            (values above ``len(kv_indices)`` are clamped to it).
        dtype: the result dtype when ``out`` is None (the query dtype).
        pad_index: a valid pool row the PyTorch path reads for padding
            positions (``>= num_valid``) instead of whatever stale value the
            index buffer holds there; SGLang's slot 0 is its padding slot.
        impl: "auto" (Triton on CUDA when available -- for FP8 from SM 8.9 on --,
            else PyTorch), "torch" or "triton".

    Rows of the result at positions ``>= num_valid`` are not part of the
    result: the PyTorch path fills them with row ``pad_index``, the Triton path
    leaves them untouched. The kernel never reads them.

    No host synchronisation on any path: shapes depend only on the arguments'
    shapes, never on tensor values.
    """
    if impl not in ("auto", "torch", "triton"):
        raise ValueError(f"impl must be 'auto', 'torch' or 'triton', got {impl!r}")
    if kv_indices.dim() != 1:
        raise ValueError(f"kv_indices must be 1-D, got shape {tuple(kv_indices.shape)}")
    if kv_indices.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"kv_indices must be int32 or int64, got {kv_indices.dtype}")
    if k_buffer.dim() < 1:
        raise ValueError("k_buffer must have a row dimension")
    if kv_indices.device != k_buffer.device:
        raise ValueError(
            f"kv_indices is on {kv_indices.device} but k_buffer is on {k_buffer.device}"
        )
    n = kv_indices.shape[0]
    row_shape = tuple(k_buffer.shape[1:])
    if out is None:
        out = torch.empty((n, *row_shape), dtype=dtype, device=k_buffer.device)
    else:
        if tuple(out.shape[1:]) != row_shape:
            raise ValueError(
                f"out rows are {tuple(out.shape[1:])}, k_buffer rows are {row_shape}"
            )
        if out.shape[0] < n:
            raise ValueError(f"out has {out.shape[0]} rows, {n} are needed")
        if out.device != k_buffer.device:
            raise ValueError(f"out is on {out.device} but k_buffer is on {k_buffer.device}")
        out = out[:n]
    if isinstance(num_valid, torch.Tensor):
        if num_valid.numel() != 1 or num_valid.dtype not in (torch.int32, torch.int64):
            raise ValueError("num_valid must be a one-element int32/int64 tensor")
        if num_valid.device != k_buffer.device:
            raise ValueError(f"num_valid is on {num_valid.device} but k_buffer is on {k_buffer.device}")
    elif num_valid is not None:
        num_valid = int(num_valid)
        if not 0 <= num_valid <= n:
            raise ValueError(f"num_valid must be in [0, {n}], got {num_valid}")
        kv_indices, out = kv_indices[:num_valid], out[:num_valid]
        n, num_valid = num_valid, None
    if n == 0:
        return out
    use_triton = impl == "triton" or (
        impl == "auto" and triton is not None and k_buffer.is_cuda and _triton_converts(k_buffer)
    )
    if use_triton:
        _gather_cast_triton(k_buffer, kv_indices, out, num_valid)
    else:
        _gather_cast_torch(k_buffer, kv_indices, out, num_valid, pad_index)
    return out


def _gather_cast_torch(
    k_buffer: torch.Tensor,
    kv_indices: torch.Tensor,
    out: torch.Tensor,
    num_valid: Optional[torch.Tensor],
    pad_index: int,
) -> None:
    if not 0 <= pad_index < max(k_buffer.shape[0], 1):
        raise ValueError(f"pad_index {pad_index} is outside the pool's {k_buffer.shape[0]} rows")
    idx = kv_indices
    if num_valid is not None:
        positions = torch.arange(idx.shape[0], device=idx.device, dtype=idx.dtype)
        idx = torch.where(positions < num_valid.reshape(1), idx, pad_index)
    src = k_buffer
    byte_view = src.element_size() == 1 and src.dtype.is_floating_point
    if byte_view:  # gather FP8 rows as raw bytes: index_select need not know the type
        src = src.view(torch.uint8)
    rows = torch.index_select(src, 0, idx)
    out.copy_(rows.view(k_buffer.dtype) if byte_view else rows)


def _rows_2d(t: torch.Tensor) -> Optional[torch.Tensor]:
    """``t`` as ``[rows, row_elems]`` without a copy, or None when its rows are not contiguous."""
    try:
        return t.view(t.shape[0], -1)
    except RuntimeError:
        return None


def _device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=None)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def _capability(device_index: int) -> tuple:
    return torch.cuda.get_device_capability(device_index)


def _triton_converts(k_buffer: torch.Tensor) -> bool:
    """Triton converts FP8 (e4m3/e5m2) only from SM 8.9 (Ada, Hopper) on; older GPUs use PyTorch."""
    if k_buffer.element_size() == 1 and k_buffer.dtype.is_floating_point:
        return _capability(_device_index(k_buffer)) >= (8, 9)
    return True


def _gather_cast_triton(
    k_buffer: torch.Tensor,
    kv_indices: torch.Tensor,
    out: torch.Tensor,
    num_valid: Optional[torch.Tensor],
) -> None:
    if triton is None:
        raise RuntimeError("impl='triton' needs the triton package")
    src, dst = _rows_2d(k_buffer), _rows_2d(out)
    if src is None or dst is None or src.stride(1) != 1 or dst.stride(1) != 1:
        raise ValueError("the Triton gather needs k_buffer and out with contiguous rows")
    n = kv_indices.shape[0]
    row = src.shape[1]
    block_r = 8
    block_d = triton.next_power_of_2(row)
    # A fixed grid (it depends only on n, which is static) that strides over the rows; with
    # num_valid the loop stops at the device-side count, so a replay copies live rows only.
    grid = (max(1, min(triton.cdiv(n, block_r), _num_sms(_device_index(k_buffer)) * 8)),)
    _gather_cast_kv_kernel[grid](
        src,
        kv_indices,
        dst,
        num_valid if num_valid is not None else kv_indices,  # unused when HAS_NUM_VALID is False
        n,
        src.stride(0),
        dst.stride(0),
        ROW=row,
        BLOCK_R=block_r,
        BLOCK_D=block_d,
        HAS_NUM_VALID=num_valid is not None,
        num_warps=4,
    )


if triton is not None:

    @triton.jit
    def _gather_cast_kv_kernel(
        src_ptr,
        idx_ptr,
        out_ptr,
        num_valid_ptr,
        num_rows,
        src_row_stride,
        out_row_stride,
        ROW: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_D: tl.constexpr,
        HAS_NUM_VALID: tl.constexpr,
    ):
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK_R
        if HAS_NUM_VALID:
            n = tl.minimum(tl.load(num_valid_ptr).to(tl.int32), num_rows)
        else:
            n = num_rows
        cols = tl.arange(0, BLOCK_D)
        col_ok = cols < ROW
        for start in range(pid * BLOCK_R, n, step):
            rows = start + tl.arange(0, BLOCK_R)
            row_ok = rows < n
            slots = tl.load(idx_ptr + rows, mask=row_ok, other=0).to(tl.int64)
            mask = row_ok[:, None] & col_ok[None, :]
            vals = tl.load(src_ptr + slots[:, None] * src_row_stride + cols[None, :], mask=mask)
            tl.store(
                out_ptr + rows.to(tl.int64)[:, None] * out_row_stride + cols[None, :],
                vals.to(out_ptr.dtype.element_ty),
                mask=mask,
            )


def gather_cast_capacity(pool_rows: int, max_batch_size: int, max_context_len: int) -> int:
    """Rows of the compact buffer: the most a batch can name, never more than the pool has.

    ``max_batch_size * max_context_len`` bounds ``sum(seq_lens)``. Past ``pool_rows``
    the buffer would be bigger than the full-pool BF16 copy stock SGLang makes,
    so it is capped there; a batch that names more rows than that (requests
    sharing a cached prefix count those rows once each) falls back to the full
    cast, which a pool-sized compact buffer can also hold.
    """
    return max(0, min(pool_rows, max_batch_size * max_context_len))


@dataclass
class GatherCastPlan:
    """One batch's gather: ``run(k_buffer)`` fills the compact buffer and returns it.

    ``kv_indices[:num_rows]`` are pool row ids (eager: exactly the batch's;
    CUDA graph: the fixed index buffer, live up to the device count
    ``num_valid``). The returned tensor is the whole compact buffer, so its
    shape never depends on the batch; the kernel reads rows ``0..n-1`` through
    the remapped indices.
    """

    kv_indices: torch.Tensor
    num_rows: int
    out: torch.Tensor
    num_valid: Optional[torch.Tensor] = None

    def run(self, k_buffer: torch.Tensor) -> torch.Tensor:
        gather_cast_kv(
            k_buffer,
            self.kv_indices[: self.num_rows],
            out=self.out,
            num_valid=self.num_valid,
        )
        return self.out


class GatherCastBuffers:
    """Fixed-address buffers for gather-cast in one attention backend.

    Eager batches: :meth:`plan_eager` (None when the batch names more rows than
    the buffer holds: use the full cast) and :meth:`kernel_indices` for the
    plan. CUDA graphs: :meth:`init_graph` before capture, :meth:`plan_graph` for
    the captured forward, and :meth:`prepare_replay` outside the graph before
    capture and before every replay.

    Overflow under a graph: a captured graph always gathers into the compact
    buffer. When a replayed batch names more rows than the graph's
    ``graph_rows(bs)`` (only possible when that is the whole pool, i.e. cached
    prefixes are shared), :meth:`prepare_replay` turns the replay into the stock
    full cast without recapturing: the gather source becomes ``0..pool_rows-1``
    (so the compact buffer is the pool in BF16) and the graph wrappers' kernel
    indices become the real pool ids. The next ordinary replay restores them.
    """

    def __init__(self, compact: torch.Tensor, *, pool_rows: int, max_rows_per_seq: int):
        self.compact = compact
        self.capacity = compact.shape[0]
        self.pool_rows = pool_rows
        self.max_rows_per_seq = max_rows_per_seq
        self.arange = remapped_kv_indices(self.capacity, device=compact.device)
        self.num_valid = torch.zeros((1,), dtype=torch.int32, device=compact.device)
        self.graph_kernel_indices: Optional[torch.Tensor] = None
        self._graph_kernel_indices_dirty = 0  # kernel indices [:n] hold pool ids after a full-cast replay

    @staticmethod
    def allocate(
        capacity: int, row_shape: Sequence[int], *, dtype: torch.dtype, device
    ) -> torch.Tensor:
        """The compact buffer (callers may share one between backends that never run at once)."""
        return torch.empty((capacity, *row_shape), dtype=dtype, device=device)

    # -- eager batches ------------------------------------------------------------------

    def plan_eager(self, kv_indices: torch.Tensor, num_rows: int) -> Optional[GatherCastPlan]:
        if num_rows > self.capacity:
            return None
        return GatherCastPlan(kv_indices=kv_indices, num_rows=num_rows, out=self.compact)

    def kernel_indices(self, num_rows: int) -> torch.Tensor:
        """Remapped indices for an eager plan (a view of a constant buffer)."""
        return self.arange[:num_rows]

    # -- CUDA graphs --------------------------------------------------------------------

    def init_graph(self, max_num_indices: int) -> torch.Tensor:
        """Allocate the graph wrappers' kernel-index buffer (0..n-1; long enough for a full-cast replay)."""
        self.graph_kernel_indices = remapped_kv_indices(
            max(max_num_indices, self.capacity), device=self.compact.device
        )
        self._graph_kernel_indices_dirty = 0
        return self.graph_kernel_indices

    def graph_rows(self, bs: int) -> int:
        """Rows a graph captured for ``bs`` requests gathers (its fixed launch size)."""
        return min(self.capacity, bs * self.max_rows_per_seq)

    def plan_graph(self, kv_indices_buf: torch.Tensor, bs: int) -> GatherCastPlan:
        rows = self.graph_rows(bs)
        if kv_indices_buf.shape[0] < rows:
            raise ValueError(f"the graph index buffer has {kv_indices_buf.shape[0]} entries, {rows} needed")
        return GatherCastPlan(
            kv_indices=kv_indices_buf, num_rows=rows, out=self.compact, num_valid=self.num_valid
        )

    def prepare_replay(self, kv_indices_buf: torch.Tensor, num_kv: int, bs: int) -> bool:
        """Before a replay (outside the graph): publish the live count; handle overflow.

        ``kv_indices_buf[:num_kv]`` holds the batch's pool ids (written by
        SGLang's index builder); ``num_kv`` is host-known (the sum of the
        host-side ``seq_lens``). Only device-side writes, no synchronisation.
        Returns True when this replay runs as a full cast.
        """
        if self.graph_kernel_indices is None:
            raise RuntimeError("init_graph() was not called before capture")
        kernel_indices = self.graph_kernel_indices
        if self._graph_kernel_indices_dirty:
            remapped_kv_indices(self._graph_kernel_indices_dirty, out=kernel_indices)
            self._graph_kernel_indices_dirty = 0
        rows = self.graph_rows(bs)
        if num_kv <= rows:
            self.num_valid.fill_(num_kv)
            return False
        if rows < self.pool_rows or num_kv > kernel_indices.shape[0]:
            raise RuntimeError(
                f"gather-cast: a batch of {bs} requests names {num_kv} KV rows, more than the "
                f"{rows} its CUDA graph gathers; set SGLANG_FLASHINFER_MLA_GATHER_CAST=0 to use "
                "the full cast"
            )
        kernel_indices[:num_kv].copy_(kv_indices_buf[:num_kv])
        self._graph_kernel_indices_dirty = num_kv
        remapped_kv_indices(rows, out=kv_indices_buf)
        self.num_valid.fill_(rows)
        return True
