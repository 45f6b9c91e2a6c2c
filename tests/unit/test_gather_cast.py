"""Gather-cast (patch set flashinfer_mla_gather_cast) equals the stock full-pool cast.

Stock SGLang runs FlashInfer's MLA kernel on `get_key_buffer(layer).to(bf16)`, the whole FP8 pool cast
every layer. The patch set instead copies only the rows the batch's `kv_indices` name into a compact
BF16 buffer and runs the kernel there with the remapped indices 0..n-1. These tests run a small
reference MLA decode (softmax(q·k)·v over the selected rows, v = the first 512 columns) on both and
require identical outputs: random FP8 pools, ragged batches, shared prefixes, empty batches, the
fixed-size (CUDA-graph) form with padding, and the graph replay bookkeeping including the overflow
fallback. The module is loaded straight from the patch set's files/ tree; it needs no SGLang.

The tests marked gpu also run the Triton path and a real CUDA-graph capture/replay; they skip without
CUDA (the CPU build of torch).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip(
    "torch", reason="torch not installed (pip install torch==2.13.0 for the CPU build)"
)

FILES = Path(__file__).resolve().parents[2] / "patches" / "flashinfer_mla_gather_cast" / "files"
MODULE = FILES / "python" / "sglang" / "srt" / "layers" / "attention" / "mla_gather_cast.py"


def _load_module():
    name = "mla_gather_cast_under_test"
    spec = importlib.util.spec_from_file_location(name, MODULE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    # No __pycache__/ inside the patch set: everything under files/ is shipped into the target.
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = before
    return mod


gc = _load_module()

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
KV_LORA, ROPE = 512, 64
DIM = KV_LORA + ROPE
HEADS = 8  # GLM-5 at TP 8
SM_SCALE = 1.0 / (192 + 64) ** 0.5
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA (the Triton path and CUDA graphs)")


# ----------------------------------------------------------------------------- helpers


def random_pool(rows: int, seed: int, device="cpu") -> torch.Tensor:
    """An SGLang MLA pool layer: [rows, 1, 576] stored as float8_e4m3fn."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 1, DIM, generator=g) * 3).to(FP8).to(device)


def make_batch(lens: list[int], pool_rows: int, seed: int, shared_prefix: int = 0):
    """kv_indptr / kv_indices for requests of `lens` tokens (page size 1), slots drawn from 1..pool_rows-1
    (slot 0 is SGLang's padding slot); the first `shared_prefix` tokens of every request are the same
    slots, as with a cached prefix."""
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(1, pool_rows, (shared_prefix,), generator=g, dtype=torch.int32)
    parts = []
    for n in lens:
        own = torch.randint(1, pool_rows, (max(0, n - shared_prefix),), generator=g, dtype=torch.int32)
        parts.append(torch.cat([prefix[: min(n, shared_prefix)], own]))
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    if lens:
        indptr[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int32), 0)
    indices = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int32)
    return indptr, indices.to(torch.int32)


def random_q(bs: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(bs, HEADS, DIM, generator=g).to(BF16)


def mla_decode_ref(q, kv, kv_indptr, kv_indices) -> torch.Tensor:
    """Absorbed-MLA decode, one query token per request: softmax(q·k·scale)·v over the rows
    kv[kv_indices[indptr[b]:indptr[b+1]]], k = all 576 columns, v = the first 512. An empty request
    gives zeros. fp32 math on the kernel's BF16 inputs."""
    out = torch.zeros(q.shape[0], q.shape[1], KV_LORA, dtype=torch.float32)
    for b in range(q.shape[0]):
        s, e = int(kv_indptr[b]), int(kv_indptr[b + 1])
        if s == e:
            continue
        rows = kv[kv_indices[s:e].long(), 0, :].float()
        p = torch.softmax((q[b].float() @ rows.T) * SM_SCALE, dim=-1)
        out[b] = p @ rows[:, :KV_LORA]
    return out


def full_cast_decode(q, pool, kv_indptr, kv_indices) -> torch.Tensor:
    """Stock SGLang: cast the whole pool, index it with the real slot ids."""
    return mla_decode_ref(q, pool.to(BF16), kv_indptr, kv_indices)


def gather_cast_decode(q, pool, kv_indptr, kv_indices) -> torch.Tensor:
    """The patch: gather + cast the used rows, index the compact buffer with 0..n-1."""
    compact = gc.gather_cast_kv(pool, kv_indices)
    remapped = gc.remapped_kv_indices(kv_indices.shape[0])
    return mla_decode_ref(q, compact, kv_indptr, remapped)


# ----------------------------------------------------------------------------- the gather itself


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gathered_rows_are_the_cast_rows_in_kv_indices_order(index_dtype):
    pool = random_pool(300, seed=1)
    _, idx = make_batch([40, 3, 77], pool_rows=300, seed=2, shared_prefix=2)
    idx = idx.to(index_dtype)
    compact = gc.gather_cast_kv(pool, idx)
    assert compact.dtype == BF16 and compact.shape == (idx.shape[0], 1, DIM)
    assert torch.equal(compact, pool.to(BF16)[idx.long()])
    assert torch.equal(compact.float(), pool.float()[idx.long()]), "fp8 -> bf16 is exact"


def test_remapped_indices_are_0_to_n_minus_1_int32():
    r = gc.remapped_kv_indices(7)
    assert r.dtype == torch.int32 and r.tolist() == list(range(7))
    assert gc.remapped_kv_indices(0).shape == (0,)
    buf = torch.full((10,), -1, dtype=torch.int32)
    view = gc.remapped_kv_indices(4, out=buf)
    assert view.data_ptr() == buf.data_ptr() and buf.tolist() == [0, 1, 2, 3, -1, -1, -1, -1, -1, -1]
    with pytest.raises(ValueError):
        gc.remapped_kv_indices(11, out=buf)


@pytest.mark.parametrize(
    "lens, shared_prefix",
    [
        ([1], 0),
        ([5, 1, 17, 64, 3], 0),  # ragged
        ([0, 7, 0, 0, 12], 0),  # some requests with no tokens
        ([120, 90, 200, 33], 24),  # a shared cached prefix: the same slots appear several times
        ([257] * 3 + [1], 0),
    ],
)
def test_decode_on_compact_buffer_equals_full_cast(lens, shared_prefix):
    pool = random_pool(512, seed=len(lens))
    indptr, idx = make_batch(lens, pool_rows=512, seed=sum(lens), shared_prefix=shared_prefix)
    q = random_q(len(lens), seed=3)
    expected = full_cast_decode(q, pool, indptr, idx)
    got = gather_cast_decode(q, pool, indptr, idx)
    assert torch.equal(got, expected)
    assert expected.abs().sum() > 0  # the comparison is not between two zero tensors
    for b, n in enumerate(lens):
        if n == 0:
            assert torch.count_nonzero(got[b]) == 0


def test_empty_batch_zero_rows():
    pool = random_pool(64, seed=4)
    indptr, idx = make_batch([], pool_rows=64, seed=5)
    compact = gc.gather_cast_kv(pool, idx)
    assert compact.shape == (0, 1, DIM) and compact.dtype == BF16
    q = random_q(0, seed=6)
    got, expected = gather_cast_decode(q, pool, indptr, idx), full_cast_decode(q, pool, indptr, idx)
    assert got.shape == expected.shape == (0, HEADS, KV_LORA)


def test_batch_of_only_empty_requests():
    pool = random_pool(64, seed=7)
    indptr, idx = make_batch([0, 0, 0], pool_rows=64, seed=8)
    assert idx.numel() == 0
    q = random_q(3, seed=9)
    got = gather_cast_decode(q, pool, indptr, idx)
    assert torch.equal(got, full_cast_decode(q, pool, indptr, idx))
    assert torch.count_nonzero(got) == 0


# ----------------------------------------------------------------------------- fixed-size (CUDA-graph) form


def test_fixed_size_buffers_with_device_count_equal_full_cast():
    """The captured form: index buffer and output of a fixed size, the live count in a device tensor.
    Stale entries past the count (even ones that are not valid slots) are never dereferenced."""
    capacity, pool_rows = 600, 512
    pool = random_pool(pool_rows, seed=10)
    lens = [100, 0, 37, 211]
    indptr, idx = make_batch(lens, pool_rows=pool_rows, seed=11, shared_prefix=9)
    n = idx.shape[0]
    index_buf = torch.randint(10**6, 2 * 10**6, (capacity,), dtype=torch.int32)  # stale garbage
    index_buf[-3:] = -5
    index_buf[:n] = idx
    out = torch.full((capacity, 1, DIM), float("nan"), dtype=BF16)
    num_valid = torch.tensor([n], dtype=torch.int32)

    ret = gc.gather_cast_kv(pool, index_buf, out=out, num_valid=num_valid)
    assert ret.data_ptr() == out.data_ptr() and ret.shape == out.shape
    assert torch.equal(out[:n], pool.to(BF16)[idx.long()])
    assert torch.equal(out[n:], pool[0:1].to(BF16).expand(capacity - n, 1, DIM)), "padding reads slot 0"

    q = random_q(len(lens), seed=12)
    kernel_indices = gc.remapped_kv_indices(capacity)  # a constant buffer; the kernel reads [:n]
    got = mla_decode_ref(q, out, indptr, kernel_indices)
    assert torch.equal(got, full_cast_decode(q, pool, indptr, idx))


def test_fixed_size_int_count_leaves_the_tail_alone():
    pool = random_pool(256, seed=13)
    _, idx = make_batch([20, 5], pool_rows=256, seed=14)
    out = torch.full((64, 1, DIM), float("nan"), dtype=BF16)
    buf = torch.zeros(64, dtype=torch.int64)
    buf[:25] = idx
    ret = gc.gather_cast_kv(pool, buf, out=out, num_valid=25)
    assert ret.shape == (25, 1, DIM)
    assert torch.equal(out[:25], pool.to(BF16)[idx.long()])
    assert torch.isnan(out[25:].float()).all()


def test_device_count_zero_and_above_length():
    pool = random_pool(128, seed=15)
    idx = torch.randint(1, 128, (16,), dtype=torch.int32)
    out = torch.empty((16, 1, DIM), dtype=BF16)
    gc.gather_cast_kv(pool, idx, out=out, num_valid=torch.tensor([0]))
    assert torch.equal(out, pool[0:1].to(BF16).expand(16, 1, DIM))
    gc.gather_cast_kv(pool, idx, out=out, num_valid=torch.tensor([10**6]))  # clamped to the buffer
    assert torch.equal(out, pool.to(BF16)[idx.long()])


def test_bad_arguments_are_refused():
    pool = random_pool(32, seed=16)
    idx = torch.arange(8, dtype=torch.int32)
    with pytest.raises(ValueError, match="rows"):
        gc.gather_cast_kv(pool, idx, out=torch.empty((7, 1, DIM), dtype=BF16))
    with pytest.raises(ValueError, match="rows"):
        gc.gather_cast_kv(pool, idx, out=torch.empty((8, 1, DIM - 1), dtype=BF16))
    with pytest.raises(ValueError, match="1-D"):
        gc.gather_cast_kv(pool, idx.view(2, 4))
    with pytest.raises(TypeError):
        gc.gather_cast_kv(pool, idx.float())
    with pytest.raises(ValueError, match="num_valid"):
        gc.gather_cast_kv(pool, idx, num_valid=9)
    with pytest.raises(ValueError, match="num_valid"):
        gc.gather_cast_kv(pool, idx, num_valid=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="impl"):
        gc.gather_cast_kv(pool, idx, impl="cuda")
    with pytest.raises(ValueError, match="pad_index"):
        gc.gather_cast_kv(pool, idx, num_valid=torch.tensor([3]), pad_index=32)


def test_capacity_is_capped_by_the_pool():
    assert gc.gather_cast_capacity(pool_rows=495_001, max_batch_size=64, max_context_len=202_752) == 495_001
    assert gc.gather_cast_capacity(pool_rows=495_001, max_batch_size=2, max_context_len=4096) == 8192


# ----------------------------------------------------------------------------- the backend's bookkeeping


POOL_ROWS, MAX_CTX, MAX_BS = 64, 48, 4


def graph_buffers():
    capacity = gc.gather_cast_capacity(POOL_ROWS, MAX_BS, MAX_CTX)
    compact = gc.GatherCastBuffers.allocate(capacity, (1, DIM), dtype=BF16, device="cpu")
    return gc.GatherCastBuffers(compact, pool_rows=POOL_ROWS, max_rows_per_seq=MAX_CTX)


def test_eager_plan_and_overflow_fallback():
    b = graph_buffers()
    assert b.capacity == POOL_ROWS
    pool = random_pool(POOL_ROWS, seed=17)
    indptr, idx = make_batch([30, 0, 20], pool_rows=POOL_ROWS, seed=18)
    plan = b.plan_eager(idx, idx.shape[0])
    compact = plan.run(pool)
    assert compact.data_ptr() == b.compact.data_ptr() and compact.shape[0] == b.capacity
    q = random_q(3, seed=19)
    got = mla_decode_ref(q, compact, indptr, b.kernel_indices(idx.shape[0]))
    assert torch.equal(got, full_cast_decode(q, pool, indptr, idx))
    # Requests sharing a cached prefix can name more rows than the pool has: the backend keeps the
    # full cast for that batch.
    _, big = make_batch([40, 40], pool_rows=POOL_ROWS, seed=20, shared_prefix=30)
    assert big.shape[0] > b.capacity and b.plan_eager(big, big.shape[0]) is None


def test_graph_replays_including_full_cast_overflow():
    """What the patched backend does around a captured decode graph for bs=2, simulated on CPU:
    the builder writes pool ids into the fixed index buffer, prepare_replay publishes the count (or
    switches to the full cast), the 'captured' gather runs at its fixed size, and the kernel reads the
    compact buffer through the graph wrapper's fixed kernel-index buffer."""
    b = graph_buffers()
    index_buf = torch.zeros(MAX_BS * MAX_CTX, dtype=torch.int32)  # cuda_graph_kv_indices
    kernel_indices = b.init_graph(index_buf.shape[0])
    bs = 2
    captured = b.plan_graph(index_buf, bs)
    assert captured.num_rows == b.graph_rows(bs) == POOL_ROWS
    pool = random_pool(POOL_ROWS, seed=21)

    def replay(lens, seed, shared_prefix=0):
        indptr, idx = make_batch(lens, pool_rows=POOL_ROWS, seed=seed, shared_prefix=shared_prefix)
        n = idx.shape[0]
        index_buf[:n] = idx
        full = b.prepare_replay(index_buf, n, bs)
        compact = captured.run(pool)
        q = random_q(bs, seed=seed + 1)
        got = mla_decode_ref(q, compact, indptr, kernel_indices)
        assert torch.equal(got, full_cast_decode(q, pool, indptr, idx)), (lens, full)
        return full, n

    assert replay([30, 20], seed=22) == (False, 50)
    assert int(b.num_valid) == 50
    full, n = replay([45, 44], seed=24, shared_prefix=40)  # 89 rows > the pool's 64: full cast
    assert full and n == 89 and int(b.num_valid) == POOL_ROWS
    assert replay([3, 0], seed=26) == (False, 3)
    assert torch.equal(kernel_indices[:n], torch.arange(n, dtype=torch.int32)), "restored after overflow"
    assert replay([0, 0], seed=28) == (False, 0)


def test_graph_smaller_than_the_pool_refuses_an_impossible_batch():
    b = graph_buffers()
    index_buf = torch.zeros(MAX_BS * MAX_CTX, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="init_graph"):
        b.prepare_replay(index_buf, 1, 1)
    b.init_graph(index_buf.shape[0])
    assert b.graph_rows(1) == MAX_CTX < POOL_ROWS
    with pytest.raises(RuntimeError, match="SGLANG_FLASHINFER_MLA_GATHER_CAST=0"):
        b.prepare_replay(index_buf, MAX_CTX + 1, 1)


def test_loading_the_module_left_no_bytecode_in_the_patch_set():
    assert not list(FILES.rglob("__pycache__")), "files/ is shipped into the target tree as is"


# ----------------------------------------------------------------------------- CUDA (skip on CPU)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_triton_path_equals_torch_path(index_dtype):
    pool = random_pool(50_000, seed=30, device="cuda")
    _, idx = make_batch([4000, 1, 777, 0, 9000], pool_rows=50_000, seed=31, shared_prefix=100)
    idx = idx.to(index_dtype).cuda()
    got = gc.gather_cast_kv(pool, idx, impl="triton")
    assert torch.equal(got, gc.gather_cast_kv(pool, idx, impl="torch"))
    assert torch.equal(got, pool.to(BF16)[idx.long()])
    out = torch.full((20_000, 1, DIM), float("nan"), dtype=BF16, device="cuda")
    buf = torch.zeros(20_000, dtype=index_dtype, device="cuda")
    buf[: idx.shape[0]] = idx
    count = torch.tensor([idx.shape[0]], device="cuda")
    gc.gather_cast_kv(pool, buf, out=out, num_valid=count, impl="triton")
    assert torch.equal(out[: idx.shape[0]], pool.to(BF16)[idx.long()])
    assert torch.isnan(out[idx.shape[0]:].float()).all(), "the Triton path skips rows past the count"


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_cuda_graph_capture_and_replay(impl):
    """Capture the gather once at a fixed size; replay it for batches of other sizes (and one that
    overflows into the full cast) after only out-of-graph device writes. No host synchronisation
    anywhere on the replay path (torch's sync debug mode turns one into an error)."""
    pool_rows, max_ctx, max_bs, bs = 4096, 4096, 2, 2
    pool = random_pool(pool_rows, seed=40, device="cuda")
    capacity = gc.gather_cast_capacity(pool_rows, max_bs, max_ctx)
    b = gc.GatherCastBuffers(gc.GatherCastBuffers.allocate(capacity, (1, DIM), dtype=BF16, device="cuda"),
                             pool_rows=pool_rows, max_rows_per_seq=max_ctx)
    index_buf = torch.zeros(max_bs * max_ctx, dtype=torch.int32, device="cuda")
    kernel_indices = b.init_graph(index_buf.shape[0])
    plan = b.plan_graph(index_buf, bs)  # the captured call below reads these fixed tensors

    def captured_forward():
        gc.gather_cast_kv(pool, plan.kv_indices[: plan.num_rows], out=plan.out, num_valid=plan.num_valid,
                          impl=impl)

    b.prepare_replay(index_buf, 1, bs)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        captured_forward()  # warm-up (Triton compiles here, outside the capture)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured_forward()

    for lens, prefix in (([1000, 17], 0), ([3, 0], 0), ([3000, 2900], 2500), ([1, 1], 0)):
        indptr, idx = make_batch(lens, pool_rows=pool_rows, seed=sum(lens), shared_prefix=prefix)
        n = idx.shape[0]
        idx_dev = idx.cuda()
        torch.cuda.set_sync_debug_mode("error")
        try:
            index_buf[:n].copy_(idx_dev)
            full = b.prepare_replay(index_buf, n, bs)
            graph.replay()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert full == (n > pool_rows)
        q = random_q(bs, seed=n)
        got = mla_decode_ref(q, b.compact.cpu(), indptr, kernel_indices.cpu())
        assert torch.equal(got, full_cast_decode(q, pool.cpu(), indptr, idx)), lens
