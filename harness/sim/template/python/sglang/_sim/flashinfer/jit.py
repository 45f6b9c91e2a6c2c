"""Simulated FlashInfer JIT: one "compiled" module per kernel configuration.

The FlashInfer version is a fact of the simulated installation (``harness sim init
--flashinfer-version``, stored in ``gpus.json`` and in the venv's
``flashinfer_python-<version>.dist-info``). What an MLA module with a non-16-bit KV
dtype does depends on it, as measured on an H200:

* FA2 template (``attention/mla.cuh``): the softmax row sum goes through
  ``mma::m16k16_rowsum_f16f16f32``, whose ``static_assert(sizeof(DType) == 2, ...)``
  rejects an 8-bit KV dtype -- up to 0.6.17 for e4m3 (FP8 MLA on fa2 came in 0.6.18,
  ``plan()`` refuses it before the build from 0.6.14 on), and in every version for a KV
  type the FP8 path does not cover (e5m2, FP4).
* FA3 template (``attention/mla_hopper.cuh``, SM90): up to 0.6.13 an 8-bit KV dtype fails
  with ``WGMMA_ASYNC_SS<DTypeKV, ...> has no member "op"``; from 0.6.14 it builds the
  FP8 (e4m3) kernel.

A failing build fails the way a real JIT build fails: ninja exits 1 and FlashInfer raises
``RuntimeError("Ninja build failed. ...")`` from the ``CalledProcessError``.
"""

import os
import re
import subprocess
import sys

from sglang._sim import startup_sleep
from sglang._sim.gpus import load_facts

DEFAULT_FLASHINFER_VERSION = "0.7.2"
# First versions with the FP8 (e4m3) MLA kernel: fa3 (SM90) and fa2 (SM90 too).
FP8_MLA_FA3_SINCE = (0, 6, 14)
FP8_MLA_FA2_SINCE = (0, 6, 18)
_MODULES = {}


def version_tuple(version):
    """'0.6.14' -> (0, 6, 14); '0.6.18rc7' / '0.7.2.post1' -> the leading numbers only."""
    nums = []
    for part in str(version).split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        nums.append(int(m.group()))
        if m.end() != len(part):
            break
    return tuple(nums)


def flashinfer_version():
    """The simulated installation's FlashInfer version (``gpus.json``, default 0.7.2)."""
    return str(load_facts().get("flashinfer_version") or DEFAULT_FLASHINFER_VERSION)


def has_fp8_mla(backend):
    """Whether this FlashInfer has the FP8 (e4m3) MLA kernel for an fa2/fa3 plan."""
    since = FP8_MLA_FA3_SINCE if backend == "fa3" else FP8_MLA_FA2_SINCE
    return version_tuple(flashinfer_version()) >= since


_SHORT = {
    "bfloat16": "bf16",
    "float16": "f16",
    "float8_e4m3fn": "e4m3",
    "float8_e5m2": "e5m2",
    "float4_e2m1fn_x2": "e2m1",
    "int32": "i32",
}
_CUDA_TYPE = {
    "bfloat16": "__nv_bfloat16",
    "float16": "half",
    "float8_e4m3fn": "__nv_fp8_e4m3",
    "float8_e5m2": "__nv_fp8_e5m2",
    "float4_e2m1fn_x2": "__nv_fp4x2_e2m1",
}


class JitModule(object):
    def __init__(self, name, q_dtype, kv_dtype):
        self.name = name
        self.q_dtype = q_dtype
        self.kv_dtype = kv_dtype

    def plan(self, *args, **kwargs):
        return None


def _paths(name):
    arch = load_facts()["arch"][2:] + "a"
    site = os.path.join("/usr/local/lib", "python%d.%d" % sys.version_info[:2], "dist-packages", "flashinfer")
    cache = os.path.join(os.path.expanduser("~"), ".cache", "flashinfer", flashinfer_version(), arch)
    workdir = os.path.join(cache, "cached_ops", name)
    gen = os.path.join(cache, "generated", name)
    return arch, site, workdir, gen


def _nvcc_line(name, arch, site, gen, source):
    return (
        "/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile --dependency-output "
        "%s.cuda.o.d -DTORCH_EXTENSION_NAME=%s -DTORCH_API_INCLUDE_EXTENSION_H "
        "-DPy_LIMITED_API=0x03090000 -D_GLIBCXX_USE_CXX11_ABI=1 "
        "-isystem /usr/include/python%d.%d -isystem /usr/local/cuda/include "
        "-isystem /usr/local/cuda/include/cccl -isystem %s/data/include "
        "-isystem %s/data/csrc -isystem %s/data/cutlass/include "
        "-isystem %s/data/cutlass/tools/util/include --compiler-options=-fPIC "
        "--expt-relaxed-constexpr -static-global-template-stub=false "
        "-gencode=arch=compute_%s,code=sm_%s -O3 -std=c++17 --threads=4 -use_fast_math "
        "-DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_BF16 -DFLASHINFER_ENABLE_FP8_E4M3 "
        "-DFLASHINFER_ENABLE_FP8_E5M2 -c %s/%s.cu -o %s.cuda.o"
        % (
            source,
            name,
            sys.version_info[0],
            sys.version_info[1],
            site,
            site,
            site,
            site,
            arch,
            arch,
            gen,
            source,
            source,
        )
    )


def _types(q_dtype, kv_dtype):
    q_t = _CUDA_TYPE.get(q_dtype.name, q_dtype.name)
    kv_t = _CUDA_TYPE.get(kv_dtype.name, kv_dtype.name)
    return q_t, kv_t, "flashinfer::MLAParams<%s, %s, %s, int32_t>" % (q_t, kv_t, q_t)


def _fa2_static_assert(name, q_dtype, kv_dtype):
    """The FA2 MLA template (mla.cuh) instantiated with an 8-bit KV dtype: mma.cuh's static_assert."""
    arch, site, workdir, gen = _paths(name)
    q_t, kv_t, params = _types(q_dtype, kv_dtype)
    traits = (
        "flashinfer::mla::KernelTraits<false, 2U, 2U, 8U, 2U, 512U, 64U, 32U, 64U, %s, %s, %s, int32_t>"
        % (q_t, kv_t, q_t)
    )
    mla = "%s/data/include/flashinfer/attention/mla.cuh" % site
    nvcc = _nvcc_line(name, arch, site, gen, "batch_mla_run")
    nvcc_plan = _nvcc_line(name, arch, site, gen, "batch_mla_plan")
    lines = [
        "ninja: Entering directory `%s'" % workdir,
        "[1/4] %s" % nvcc_plan,
        "[2/4] %s" % nvcc,
        "FAILED: batch_mla_run.cuda.o ",
        nvcc,
        "%s/data/include/flashinfer/mma.cuh(523): error: static assertion failed with "
        '"DType must be 16bit floating data type"' % site,
        '    static_assert(sizeof(DType) == 2, "DType must be 16bit floating data type");',
        "    ^",
        "          detected during:",
        '            instantiation of "void flashinfer::mma::m16k16_rowsum_f16f16f32<DType>('
        'float *, DType *) [with DType=%s]" at line 511 of %s' % (kv_t, mla),
        '            instantiation of "void flashinfer::mla::compute_mla_pv<KTraits>('
        "KTraits::SharedStorage *, uint32_t, KTraits::DTypeQKAccum (*)[8], KTraits::DTypeQKAccum *, "
        "float (*)[8])"
        ' [with KTraits=%s]" at line 905 of %s' % (traits, mla),
        '            instantiation of "void flashinfer::mla::BatchMLAPagedAttentionKernel<KTraits,Params>('
        'Params) [with KTraits=%s, Params=%s]" at line 1053 of %s' % (traits, params, mla),
        '            instantiation of "cudaError_t flashinfer::mla::BatchMLAPagedAttention<CAUSAL,'
        "HEAD_DIM_CKV,HEAD_DIM_KPE,Params>(Params, uint32_t, uint32_t, cudaStream_t) [with "
        "CAUSAL=flashinfer::MaskMode::kNone,"
        ' HEAD_DIM_CKV=512U, HEAD_DIM_KPE=64U, Params=%s]" at line 117 of %s/batch_mla_run.cu'
        % (params, gen),
        "",
        '1 error detected in the compilation of "%s/batch_mla_run.cu".' % gen,
        "ninja: build stopped: subcommand failed.",
        "",
    ]
    return _ninja_failure(workdir, lines)


def _fa3_wgmma_error(name, q_dtype, kv_dtype):
    """The FA3 MLA template (mla_hopper.cuh) before FP8 support (<= 0.6.13): no WGMMA for an 8-bit KV."""
    arch, site, workdir, gen = _paths(name)
    q_t, kv_t, params = _types(q_dtype, kv_dtype)
    hopper = "%s/data/include/flashinfer/attention/mla_hopper.cuh" % site
    wgmma = "flashinfer::WGMMA_ASYNC_SS<%s, 64U, 64U, 32U, true>" % kv_t
    traits = "flashinfer::mla::hopper::HopperKernelTraits<false, 64U, 64U, 512U, 64U, %s, %s, %s, int32_t>" % (
        q_t,
        kv_t,
        q_t,
    )
    nvcc = _nvcc_line(name, arch, site, gen, "batch_mla_sm90_run")
    nvcc_plan = _nvcc_line(name, arch, site, gen, "batch_mla_sm90_plan")
    lines = [
        "ninja: Entering directory `%s'" % workdir,
        "[1/4] %s" % nvcc_plan,
        "[2/4] %s" % nvcc,
        "FAILED: batch_mla_sm90_run.cuda.o ",
        nvcc,
        '%s(312): error: class "%s" has no member "op"' % (hopper, wgmma),
        "          detected during:",
        '            instantiation of "void flashinfer::mla::hopper::compute_mla_qk<KTraits>('
        'KTraits::SharedStorage &, int) [with KTraits=%s]" at line 598 of %s' % (traits, hopper),
        '            instantiation of "void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<KTraits,'
        'Params>(Params) [with KTraits=%s, Params=%s]" at line 873 of %s' % (traits, params, hopper),
        '            instantiation of "cudaError_t flashinfer::mla::BatchMLAPageAttentionHopper<CAUSAL,'
        "HEAD_DIM_CKV,HEAD_DIM_KPE,Params>(Params, uint32_t, uint32_t, cudaStream_t) [with "
        "CAUSAL=flashinfer::MaskMode::kNone,"
        ' HEAD_DIM_CKV=512U, HEAD_DIM_KPE=64U, Params=%s]" at line 114 of %s/batch_mla_sm90_run.cu'
        % (params, gen),
        "",
        '1 error detected in the compilation of "%s/batch_mla_sm90_run.cu".' % gen,
        "ninja: build stopped: subcommand failed.",
        "",
    ]
    return _ninja_failure(workdir, lines)


def _ninja_failure(workdir, lines):
    output = "\n".join(lines)
    command = ["ninja", "-v", "-C", workdir, "-f", os.path.join(workdir, "build.ninja")]
    return command, output, workdir


def _run_ninja(command, output, workdir):
    # What flashinfer.jit.cpp_ext.run_ninja does when the build fails.
    try:
        raise subprocess.CalledProcessError(1, command, output=output)
    except subprocess.CalledProcessError as e:
        msg = "Ninja build failed."
        if e.output:
            msg += " Ninja output:\n" + e.output
        raise RuntimeError(msg) from e


def get_batch_mla_uri(
    backend, q_dtype, kv_dtype, o_dtype, idx_dtype, head_dim_ckv, head_dim_kpe, use_profiler=False
):
    return (
        "batch_mla_attention_dtype_q_%s_dtype_kv_%s_dtype_o_%s_dtype_idx_%s_head_dim_ckv_%d_head_dim_kpe_%d"
        "_profiler_%s"
        % (
            _SHORT.get(q_dtype.name, q_dtype.name),
            _SHORT.get(kv_dtype.name, kv_dtype.name),
            _SHORT.get(o_dtype.name, o_dtype.name),
            _SHORT.get(idx_dtype.name, idx_dtype.name),
            head_dim_ckv,
            head_dim_kpe,
            use_profiler,
        )
    ) + ("_sm90" if backend == "fa3" else "")


def get_batch_mla_module(backend, q_dtype, kv_dtype, o_dtype, idx_dtype, head_dim_ckv, head_dim_kpe):
    """Build (once per process) and load the MLA module of `backend` ("fa2" or "fa3") for these dtypes."""
    name = get_batch_mla_uri(backend, q_dtype, kv_dtype, o_dtype, idx_dtype, head_dim_ckv, head_dim_kpe)
    if name in _MODULES:
        return _MODULES[name]
    if kv_dtype.bits != 16 or q_dtype.bits != 16:
        fp8_kernel = kv_dtype.name == "float8_e4m3fn" and q_dtype.bits == 16 and has_fp8_mla(backend)
        if not fp8_kernel:
            startup_sleep(0.15)  # nvcc runs for a while before it fails
            if backend == "fa3" and not has_fp8_mla("fa3"):
                failure = _fa3_wgmma_error(name, q_dtype, kv_dtype)
            else:
                failure = _fa2_static_assert(name, q_dtype, kv_dtype)
            _run_ninja(*failure)
        startup_sleep(0.1)  # the FP8 kernel is JIT-only: the first plan compiles it
    module = JitModule(name, q_dtype, kv_dtype)
    _MODULES[name] = module
    return module
