"""The host side of the SM90 CUDA path of the FP8 MLA kernel, checked without a GPU.

What a GPU run cannot cheaply catch and a wrong value would silently break: the packed launch
arguments must sit exactly where the kernel reads its parameters (C struct layout), the split
count must depend on batch and heads only (CUDA-graph capture), Q's 16-byte loads need aligned
views, the kernel must build for sm_90 within its budget (registers and shared memory for two
CTAs per SM, no spills), and the same source must build for the other archs (the seed's sm_120 among
them) while the dispatch says which path each gets. The compile test needs NVRTC (pip ``nvidia-cuda-nvrtc``, which
``scripts/test`` installs); the kernel's numbers are checked on a GPU (test_fp8_mla_decode.py). Not in
tests/unit: mutation testing runs tests/unit over a copy of harness/ that has no kernels/.
"""

from __future__ import annotations

import ctypes
import re

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (optional extra `kernels`)")

from kernels import fp8_mla_decode_cuda as cu  # noqa: E402

_CTYPE = {"Q": ctypes.c_uint64, "f": ctypes.c_float, "i": ctypes.c_int32, "q": ctypes.c_int64}
H200_SMEM_PER_SM = 228 * 1024  # bytes; each resident CTA also takes 1 KB reserved by the driver
H200_REGS_PER_SM = 65536


def c_struct(fmt: str) -> type[ctypes.Structure]:
    fields = [(f"f{i}", _CTYPE[code]) for i, code in enumerate(fmt.lstrip("<"))]
    return type("Args", (ctypes.Structure,), {"_fields_": fields})


@pytest.mark.parametrize("fmt", [cu._SPLIT_FMT, cu._MERGE_FMT])
def test_arg_block_offsets_are_the_c_struct_layout(fmt):
    block, struct_type = cu._ArgBlock(fmt), c_struct(fmt)
    base = ctypes.addressof(block.buffer)
    offsets = [p - base for p in block.params]
    assert offsets == [getattr(struct_type, name).offset for name, _ in struct_type._fields_]
    assert block.layout.size == ctypes.sizeof(struct_type)


def test_arg_block_values_land_where_each_parameter_points():
    block = cu._ArgBlock(cu._MERGE_FMT)  # pointers, a float, ints, 64-bit strides
    values = (0x1000, 0x2000, 0x3000, 0x4000, 1.5, 64, 16, 7, -576, 2**40)
    block.pack(*values)
    read = [ctypes.cast(p, ctypes.POINTER(_CTYPE[code])).contents.value
            for p, code in zip(block.params, cu._MERGE_FMT.lstrip("<"))]
    assert read == list(values)


def test_small_batch_plan_fills_one_wave_with_whole_clusters():
    """cluster_splits: whole clusters, the same count for every row of a (batch, heads), never more CTAs than
    one wave holds, at least one cluster per (row, head tile) or no small-batch plan at all."""
    for cluster in (2, 4, 8):
        for slots in (256, 264, 240):
            for batch in (1, 2, 3, 4, 8, 16, 32, 33, 64, 128):
                for heads in (8, 16, 64, 128):
                    n = cu.cluster_splits(batch, heads, slots, cluster)
                    pairs = batch * -(-heads // cu.HEAD_TILE)
                    if pairs * cluster > slots:
                        assert n is None, (cluster, slots, batch, heads)
                        continue
                    assert n is not None and n % cluster == 0 and n <= cu.MAX_SPLITS
                    assert n * pairs <= slots, "one wave"
                    assert (n + cluster) * pairs > slots or n == cu.MAX_SPLITS, "as many clusters as fit"
    assert cu.cluster_splits(1, 8, 256, 8) == 256 and cu.cluster_splits(8, 16, 256, 8) == 32
    assert cu.cluster_splits(8, 64, 256, 8) == 8 and cu.cluster_splits(64, 16, 256, 8) is None
    assert cu.cluster_splits(1, 8, 256, 0) is None
    assert cu.cluster_splits(1, 8, 256, 8, row_max=16) == 128 and cu.cluster_splits(8, 16, 256, 8, row_max=16) == 32


def test_dispatch_says_which_path_each_gpu_gets():
    """The CUDA path where it is built, tuned and checked (sm_90: H100/H200); Triton on every other GPU,
    the seed's RTX PRO 6000 (sm_120) included, and for 16-bit caches; the reference without a GPU."""
    assert cu.path_for((9, 0)) == "cuda"
    assert cu.path_for((9, 0), fp8=False) == "triton"
    for cap in ((12, 0), (10, 0), (8, 9), (8, 0)):
        assert cu.path_for(cap) == "triton", cap
    assert cu.path_for(None) == "reference"
    assert not cu.supported(torch.device("cpu")) and not cu.supported(-1)


def test_split_count_depends_on_batch_and_heads_only_and_fills_the_sms():
    for batch in (1, 3, 8, 64, 128, 1000):
        for heads in (8, 16, 64, 128):
            n = cu.num_splits(batch, heads, 132, 2)
            tiles = batch * -(-heads // cu.HEAD_TILE)
            assert 1 <= n <= 512
            if tiles <= 264:
                assert abs(n * tiles - 264) <= tiles / 2 + 1, (batch, heads, n)  # one wave of 2 CTAs per SM
            else:
                assert n == 1


def test_eligible_wants_half_precision_and_16_byte_rows():
    q = torch.zeros(4, 16, 576, dtype=torch.bfloat16)
    assert cu.eligible(q[..., :512], q[..., 512:])  # SGLang's absorbed query
    assert not cu.eligible(q.float()[..., :512], q.float()[..., 512:])
    odd = torch.zeros(4, 16, 580, dtype=torch.bfloat16)  # row stride 580: not a multiple of 8 elements
    assert not cu.eligible(odd[..., :512], odd[..., 512:576])
    assert not cu.eligible(q[..., 1:513], q[..., 512:])  # 2 bytes off a 16-byte boundary


def test_eligible_wants_16_byte_kv_rows_and_float32_scales():
    q = torch.zeros(4, 16, 576, dtype=torch.bfloat16)
    qn, qr = q[..., :512], q[..., 512:]
    pool = torch.zeros(64, 1, 576, dtype=torch.uint8)
    assert cu.eligible(qn, qr, pool)
    assert not cu.eligible(qn, qr, pool.view(-1)[8:8 + 63 * 576].view(63, 1, 576))  # rows 8 bytes off
    padded = torch.zeros(64, 580, dtype=torch.uint8)[:, :576]  # 580-byte row pitch
    assert not cu.eligible(qn, qr, padded)
    assert cu.eligible(qn, qr, pool, torch.ones(64), torch.ones(1))
    assert not cu.eligible(qn, qr, pool, torch.ones(64, dtype=torch.float16))
    assert not cu.eligible(qn, qr, pool, torch.ones(128)[::2])
    assert not cu.eligible(qn, qr, pool, None, torch.ones(1, dtype=torch.float64))


def _source_smem_total(stages: int, block_n: int) -> int:
    """SM_TOTAL as the CUDA source defines it, its #define chain evaluated here."""
    env = {"STAGES": stages, "BLOCK_N": block_n}
    for name, expr in re.findall(r"^#define (\w+) (.+?)(?:\s*/\*.*)?$", cu.CUDA_SOURCE, re.M):
        if name in env or not re.fullmatch(r"[\w\s()+*/-]+", expr):
            continue
        try:
            env[name] = eval(re.sub(r"\b([A-Z_][A-Z0-9_]*)\b", lambda m: str(env[m.group(1)]), expr))
        except KeyError:  # names this chain does not need (CLUSTER's, the merge's)
            continue
    return int(env["SM_TOTAL"])


@pytest.mark.parametrize("stages,block_n", [(2, 64), (4, 32), (3, 32)])
def test_host_shared_memory_is_what_the_source_lays_out(stages, block_n):
    assert cu._smem_bytes(stages, block_n) == _source_smem_total(stages, block_n)


@pytest.mark.parametrize("cfg", [cu.CudaConfig(), cu.CudaConfig(stages=4, block_n=32),
                                 cu.CudaConfig(stages=2, block_n=32, ctas_per_sm=3)])
def test_shared_memory_fits_the_ctas_per_sm_it_is_budgeted_for(cfg):
    smem = cu._smem_bytes(cfg.stages, cfg.block_n)
    assert smem >= 16 * 512 * 4, "the epilogue stages a 16 x 512 fp32 output tile in the KV buffers"
    assert cfg.ctas_per_sm * (smem + 128 + 1024) <= H200_SMEM_PER_SM


def test_grown_buffers_keep_the_old_one_alive_and_counters_start_at_zero():
    k = object.__new__(cu._DeviceKernels)  # no GPU: only the buffer bookkeeping
    k.retired, k.workspace, k.arrivals = [], None, None
    first = k.workspace_for(10, torch.device("cpu"))
    assert k.workspace_for(8, torch.device("cpu")) is first  # big enough: reused
    second = k.workspace_for(100, torch.device("cpu"))
    assert second.numel() == 100 and k.retired == [first]  # a captured graph may still use the first
    counters = k.arrivals_for(5, torch.device("cpu"))
    assert counters.numel() == 1024 and counters.dtype == torch.int32 and not counters.any()


def test_cuda_call_refuses_a_layout_it_cannot_read_before_launching():
    """mla_decode_cuda checks the layout from the values it packs anyway (no second pass in the dispatch),
    and refuses before it touches the device: here the tensors are on the CPU and nothing is compiled."""
    q = torch.zeros(2, 16, 576, dtype=torch.bfloat16)
    pool = torch.zeros(64, 1, 576, dtype=torch.float8_e4m3fn)
    indptr, idx = torch.tensor([0, 1, 2], dtype=torch.int32), torch.arange(2, dtype=torch.int32)
    out = torch.empty(2, 16, 512, dtype=torch.bfloat16)
    args = (pool, indptr, idx, 0.1)
    with pytest.raises(cu.LayoutError, match="16-byte"):
        cu.mla_decode_cuda(q[..., 1:513], q[..., 512:], *args, 1.0, 1.0, None, out)
    with pytest.raises(cu.LayoutError, match="16-byte"):
        cu.mla_decode_cuda(q[..., :512], q[..., 512:], pool.view(-1)[8:8 + 63 * 576].view(63, 576), indptr, idx,
                           0.1, 1.0, 1.0, None, out)
    with pytest.raises(cu.LayoutError, match="float32"):
        cu.mla_decode_cuda(q[..., :512], q[..., 512:], *args, 1.0, 1.0, torch.ones(64, dtype=torch.float16), out)
    with pytest.raises(cu.LayoutError, match="BF16/FP16"):
        cu.mla_decode_cuda(q.float()[..., :512], q.float()[..., 512:], *args, 1.0, 1.0, None, out)
    assert cu._KERNELS == {}, "nothing may be compiled or launched for a refused layout"


def test_the_merge_grid_is_the_width_the_kernel_takes():
    assert f"#define MERGE_COLS {cu.MERGE_COLS} " in cu.CUDA_SOURCE and cu.D_NOPE % cu.MERGE_COLS == 0


def test_config_refuses_more_fused_splits_than_the_merge_holds():
    assert cu.CudaConfig(fused_merge_max=cu.FUSED_MERGE_LIMIT).fused_merge_max == 16
    with pytest.raises(ValueError, match="fused_merge_max"):
        cu.CudaConfig(fused_merge_max=cu.FUSED_MERGE_LIMIT + 1)


def test_config_takes_the_cluster_sizes_the_kernel_is_written_for():
    for c in (2, 4, 8):
        opts = cu.CudaConfig(cluster=c).nvrtc_options(q_fp16=False)
        assert f"-DCLUSTER={c}" in opts and "-DQ_FP16" not in opts
    # the plan of 2026-12-01 and a capped one are the same module as the default: one compile
    assert cu.CudaConfig(cluster=0).nvrtc_options(True) == cu.CudaConfig().nvrtc_options(True)
    assert cu.CudaConfig(row_clusters_max=16, cluster_slots=8).nvrtc_options(False) == cu.CudaConfig().nvrtc_options(False)
    assert cu.CudaConfig().cluster == 8, "the small-batch plan is the default"
    for bad in (1, 3, 16):
        with pytest.raises(ValueError, match="cluster"):
            cu.CudaConfig(cluster=bad)
    with pytest.raises(ValueError, match="cluster_slots"):
        cu.CudaConfig(cluster_slots=-1)
    with pytest.raises(ValueError, match="row_clusters_max"):
        cu.CudaConfig(row_clusters_max=-1)


def test_launch_config_is_the_driver_struct():
    """CUlaunchConfig for cuOccupancyMaxActiveClusters: 7 unsigned ints, the stream, the attribute pointer
    and their count, in that order, 8-byte aligned (56 bytes on x86-64)."""
    offsets = [getattr(cu._LaunchConfig, f).offset for f, _ in cu._LaunchConfig._fields_]
    assert offsets == [0, 4, 8, 12, 16, 20, 24, 32, 40, 48] and ctypes.sizeof(cu._LaunchConfig) == 56


def _bare_kernels(cluster_slots: int = 0) -> cu._DeviceKernels:
    k = object.__new__(cu._DeviceKernels)  # no GPU: only the host-side bookkeeping
    k.retired, k.workspace, k.arrivals, k.plans, k.sms = [], None, None, {}, 132
    k.split_cl = ctypes.c_void_p(1) if cluster_slots else None  # a small-batch kernel "loaded"
    k.cluster_slots = cluster_slots
    return k


def test_small_batch_plan_is_one_launch_with_a_workspace_per_cluster():
    k, cfg, cpu = _bare_kernels(cluster_slots=256), cu.CudaConfig(), torch.device("cpu")
    one = cu._plan(k, cfg, 1, 8, None, cpu)  # batch 1: 32 clusters of 8
    assert one.cluster and one.grid == (1, 256, 1) and one.n_split == 256 and not one.fused
    assert one.arrivals_ptr == k.arrivals.data_ptr() and one.ws_ptr == k.workspace.data_ptr()
    assert k.workspace.numel() >= 1 * 8 * 32 * 513 and one.lse_ptr == one.ws_ptr + 8 * 32 * 512 * 4
    eight = cu._plan(k, cfg, 8, 64, None, cpu)  # 8 rows x 4 head tiles: one cluster each
    assert eight.cluster and eight.grid == (4, 8, 8)
    big = cu._plan(k, cfg, 64, 16, None, cpu)  # 64 (row, tile) pairs do not fit one wave of clusters
    assert not big.cluster and big.n_split == cu.num_splits(64, 16, 132, 2)
    forced = cu._plan(k, cfg, 1, 8, 40, cpu)  # a split count asked for: the large-batch plan
    assert not forced.cluster and forced.n_split == 40
    old = cu._plan(_bare_kernels(), cu.CudaConfig(cluster=0), 1, 8, None, cpu)  # the plan of 2026-12-01
    assert not old.cluster and old.n_split == cu.num_splits(1, 8, 132, 2)


def test_a_plan_points_into_the_workspace_and_is_dropped_when_it_grows():
    k, cfg, cpu = _bare_kernels(), cu.CudaConfig(), torch.device("cpu")
    small = cu._plan(k, cfg, 64, 16, None, cpu)  # 4 splits: fused merge, counters
    assert small.grid == (1, small.n_split, 64) and small.n_split == cu.num_splits(64, 16, 132, 2)
    assert small.fused and small.arrivals_ptr == k.arrivals.data_ptr()
    ws = k.workspace
    assert small.ws_ptr == ws.data_ptr()
    assert small.lse_ptr + 64 * 16 * small.n_split * 4 <= ws.data_ptr() + ws.numel() * 4  # the lse fit
    k.plans[(64, 16, None)] = small
    big = cu._plan(k, cfg, 2, 16, None, cpu)  # 132 splits: the merge kernel, a larger workspace
    assert not big.fused and big.grid == (1, 132, 2)
    assert k.plans == {} and k.retired == [ws], "plans made before the growth point at the old buffer"
    assert big.ws_ptr == k.workspace.data_ptr()


def test_launch_arguments_are_pointer_objects_not_plain_ints():
    """cuLaunchKernel is called without argtypes (they cost ~2 us a call): a pointer passed as a plain
    int would be cut to 32 bits, so the stream and the parameter array go in as c_void_p objects."""
    drv = object.__new__(cu._Driver)
    drv._streams = {}
    s = drv.stream(0x7F00DEADBEEF)
    assert isinstance(s, ctypes.c_void_p) and s.value == 0x7F00DEADBEEF and drv.stream(0x7F00DEADBEEF) is s
    block = cu._ArgBlock(cu._SPLIT_FMT)
    assert isinstance(block.params_arg, ctypes.c_void_p)
    assert block.params_arg.value == ctypes.addressof(block.params)


def _nvrtc_or_skip():
    try:
        return cu._nvrtc()
    except cu.CudaKernelError as exc:
        pytest.skip(f"NVRTC not installed (pip nvidia-cuda-nvrtc): {exc}")


def _build(arch: str, cfg: cu.CudaConfig, q_fp16: bool = False) -> tuple[dict[str, str], dict[str, int], str]:
    """Compile for ``arch``: each kernel's spill line and register count, and the whole log."""
    nvrtc = _nvrtc_or_skip()
    cubin = nvrtc.compile(cu.CUDA_SOURCE, arch, cfg.nvrtc_options(q_fp16) + ["--ptxas-options=-v"])
    assert cubin[:4] == b"\x7fELF"
    log = nvrtc.last_log
    spills = dict(re.findall(r"Function properties for (\w+)\n(.*?)\n", log))
    regs = {name: int(n) for name, n in re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, re.S)}
    return spills, regs, log


@pytest.mark.parametrize("cfg,q_fp16", [(cu.CudaConfig(), False), (cu.CudaConfig(), True),
                                        (cu.CudaConfig(stages=4, block_n=32), False),
                                        (cu.CudaConfig(cluster=4), False), (cu.CudaConfig(cluster=2), True),
                                        (cu.CudaConfig(stages=2, block_n=32, ctas_per_sm=3, defines=("Q_REG_KSTEPS=8",)),
                                         False)])
def test_kernels_build_for_sm90_within_budget(cfg, q_fp16):
    spills, regs, log = _build("sm_90", cfg, q_fp16)
    assert set(spills) == {"mla_fp8_split", "mla_fp8_split_cl", "mla_fp8_merge"}, log
    for name, line in spills.items():
        assert "0 bytes spill stores, 0 bytes spill loads" in line, f"{name} spills: {line}"
    for name in ("mla_fp8_split", "mla_fp8_split_cl"):
        assert regs[name] * 128 * cfg.ctas_per_sm <= H200_REGS_PER_SM, f"{name}: {regs[name]} registers"


@pytest.mark.parametrize("arch", ["sm_120", "sm_100a", "sm_89"])
def test_the_same_source_builds_for_the_other_archs(arch):
    """One source per arch: the seed's RTX PRO 6000 (sm_120), B200 (sm_100a), Ada (sm_89, no clusters: no
    small-batch kernel). The dispatch runs Triton there (path_for); this keeps the CUDA path buildable."""
    spills, regs, log = _build(arch, cu.CudaConfig())
    expected = {"mla_fp8_split", "mla_fp8_merge"} | ({"mla_fp8_split_cl"} if arch != "sm_89" else set())
    assert set(spills) == expected, log
    assert all(n <= 255 for n in regs.values())


def test_dispatch_rejects_cuda_where_it_cannot_run():
    pytest.importorskip("triton", reason="the dispatching module needs triton")
    from kernels.fp8_mla_decode import mla_decode

    q = torch.zeros(1, 16, 576, dtype=torch.bfloat16)
    kv = torch.zeros(4, 576, dtype=torch.float8_e4m3fn)
    indptr, idx = torch.tensor([0, 4], dtype=torch.int32), torch.arange(4, dtype=torch.int32)
    with pytest.raises(ValueError, match="impl='cuda'"):
        mla_decode(q[..., :512], q[..., 512:], kv, indptr, idx, 0.1, impl="cuda")
