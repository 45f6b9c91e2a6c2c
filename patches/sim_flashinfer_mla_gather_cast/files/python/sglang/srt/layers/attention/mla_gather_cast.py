"""Gather-cast for FlashInfer MLA over a low-precision (FP8) KV pool.

Stock ``flashinfer_mla_backend.py`` runs FlashInfer's BF16 MLA kernel on
``token_to_kv_pool.get_key_buffer(layer_id).to(q.dtype)``: a BF16 copy of the *whole*
per-layer pool, every layer, every step, although a batch reads only the rows its
``kv_indices`` name. Gather-cast copies just those rows, in ``kv_indices`` order, into a
compact BF16 buffer. Row ``j`` of the compact buffer is pool row ``kv_indices[j]``, so the
kernel's indices become ``0 .. n-1`` (:func:`remapped_kv_indices`) with the same
``kv_indptr``: plan once per batch with those, gather once per layer, run the kernel on
the compact buffer.

Simulated version of the real module: the gather is one fused Triton kernel (load the FP8
row, convert, store the BF16 row), so it charges the bytes of the rows it copies, read at
the pool's dtype and written at the kernel's, at copy bandwidth.
"""

import os

from sglang._sim import torch

# Pool dtypes FlashInfer's MLA kernel cannot read, for which gather-cast replaces the full cast.
GATHER_CAST_KV_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def gather_cast_enabled(pool_dtype, q_dtype):
    """Gather-cast for a pool stored in FP8 when the kernel runs in the model dtype.

    ``SGLANG_FLASHINFER_MLA_GATHER_CAST=0`` keeps the stock full-pool cast.
    """
    if os.environ.get("SGLANG_FLASHINFER_MLA_GATHER_CAST", "1") == "0":
        return False
    return pool_dtype in GATHER_CAST_KV_DTYPES and pool_dtype is not q_dtype


def gather_cast_capacity(pool_rows, max_batch_size, max_context_len):
    """Rows of the compact buffer: the most a batch can name, never more than the pool has.

    A batch that names more rows (requests sharing a cached prefix count those rows once
    each) falls back to the full cast.
    """
    return max(0, min(pool_rows, max_batch_size * max_context_len))


def remapped_kv_indices(num_rows):
    """The kernel's indices for a compact buffer: ``arange(num_rows)``, int32.

    The real code slices a constant device buffer; the simulated tensor carries only its
    shape, like the pool indices it replaces.
    """
    return torch.empty((num_rows,), dtype=torch.int32, device="cuda")


def gather_cast_kv(k_buffer, kv_indices, dtype):
    """``result[j] = k_buffer[kv_indices[j]].to(dtype)``: a compact copy of only those rows.

    One fused kernel: each row is read once at its storage dtype (FP8: 1 byte per element)
    and written once at ``dtype``. The work follows the batch's KV, not the pool.
    """
    rows = kv_indices.numel()
    row_elems = 1
    for d in k_buffer.shape[1:]:
        row_elems *= d
    bytes_moved = rows * row_elems * (k_buffer.dtype.itemsize + dtype.itemsize)
    torch.cuda.meter.charge("cast", bytes_moved / torch.copy_bandwidth())
    return torch.empty((rows,) + tuple(k_buffer.shape[1:]), dtype=dtype, device=k_buffer.device)


class GatherCastPlan(object):
    """One batch's gather: the pool rows it reads (``kv_indices``, in kernel order)."""

    def __init__(self, kv_indices, num_rows):
        self.kv_indices = kv_indices
        self.num_rows = num_rows

    def run(self, k_buffer, dtype):
        """The compact buffer for this layer's pool: what the planned kernel reads."""
        return gather_cast_kv(k_buffer, self.kv_indices, dtype)
