"""Simulated ``flashinfer.mla.BatchMLAPagedAttentionWrapper``.

Its checks follow the simulated FlashInfer version (``jit.flashinfer_version()``):

* ``backend="auto"`` is ``determine_mla_backend``: ``fa3`` on SM90, ``fa2`` elsewhere.
* ``plan()`` with an FP8 (e4m3) ``kv_data_type``: from 0.6.14 FlashInfer checks it before
  building (fa3 only until 0.6.17, fa2 too from 0.6.18; SM90 only; BF16 queries; head dims
  512/64) and raises ``ValueError``; up to 0.6.13 nothing is checked and the JIT build fails.
* ``run()`` of an FP8 plan needs the dequant scales (0.6.14-0.6.17: ``ckv_scale`` and
  ``kpe_scale``; from 0.6.18: exactly one of ``ckv_scale`` / ``ckv_scale_arr``, and
  ``kpe_scale``); the kernel then reads the FP8 cache as stored.
"""

import math

from sglang._sim import kernels, torch
from sglang._sim.flashinfer.jit import FP8_MLA_FA2_SINCE, flashinfer_version, get_batch_mla_module, version_tuple
from sglang._sim.gpus import device_capability

_FP8_CHECKS_SINCE = (0, 6, 14)  # plan()/run() validate FP8 KV from here on
_SCALE_ARR_SINCE = (0, 6, 18)  # run() takes ckv_scale_arr (per-token scales) from here on


def determine_mla_backend():
    major, _ = device_capability()
    return "fa3" if major == 9 else "fa2"


def _version():
    return version_tuple(flashinfer_version())


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
        self._backend = determine_mla_backend() if backend == "auto" else backend
        self._cached_module = None
        self._kv_lens = []
        self._num_kv_tokens = 0

    def _check_fp8_plan(self, q_data_type, head_dim_ckv, head_dim_kpe):
        """What FlashInfer >= 0.6.14 checks before it builds an FP8 (e4m3) MLA module."""
        if self._backend != "fa3" and _version() < FP8_MLA_FA2_SINCE:
            raise ValueError(
                "FP8 kv_data_type for MLA is only supported with the fa3 "
                "backend on SM90, got backend=%r." % self._backend
            )
        major, minor = device_capability()
        if major != 9:
            raise ValueError(
                "FP8 kv_data_type for MLA requires an SM90 (Hopper) device, got SM%d%d." % (major, minor)
            )
        if q_data_type is not torch.bfloat16:
            raise ValueError(
                "FP8 kv_data_type for MLA currently only supports q_data_type=torch.bfloat16, got %r."
                % q_data_type
            )
        if head_dim_ckv != 512 or head_dim_kpe != 64:
            raise ValueError(
                "FP8 kv_data_type for MLA currently only supports head_dim_ckv=512 and head_dim_kpe=64 "
                "(DeepSeek MLA), got head_dim_ckv=%d, head_dim_kpe=%d." % (head_dim_ckv, head_dim_kpe)
            )

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
        if kv_data_type is torch.float8_e4m3fn and _version() >= _FP8_CHECKS_SINCE:
            self._check_fp8_plan(q_data_type, head_dim_ckv, head_dim_kpe)
        # The kernel is compiled (or loaded) for exactly this (backend, q, kv) combination.
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

    def _check_scales(self, scales):
        version = _version()
        if version < _FP8_CHECKS_SINCE:
            allowed = ()
        elif version < _SCALE_ARR_SINCE:
            allowed = ("ckv_scale", "kpe_scale")
        else:
            allowed = ("ckv_scale", "kpe_scale", "ckv_scale_arr")
        for key in scales:
            if key not in allowed:
                raise TypeError("run() got an unexpected keyword argument %r" % key)
        ckv, arr, kpe = scales.get("ckv_scale"), scales.get("ckv_scale_arr"), scales.get("kpe_scale")
        if self._kv_data_type is not torch.float8_e4m3fn:
            if ckv is not None or kpe is not None or arr is not None:
                raise ValueError("ckv_scale / kpe_scale are only valid when kv_data_type is FP8.")
            return
        if version >= _SCALE_ARR_SINCE:
            if (ckv is None) == (arr is None):
                raise ValueError("Exactly one of ckv_scale or ckv_scale_arr is required when kv_data_type is FP8.")
            if kpe is None:
                raise ValueError("kpe_scale is required when kv_data_type is FP8.")
        elif ckv is None or kpe is None:
            raise ValueError("ckv_scale and kpe_scale are required when kv_data_type is FP8.")
        for key in ("ckv_scale", "kpe_scale"):
            value = scales.get(key)
            if value is not None and (not math.isfinite(float(value)) or float(value) <= 0.0):
                raise ValueError("%s must be a finite positive value, got %s" % (key, value))

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False, **scales):
        if self._cached_module is None:
            raise RuntimeError("plan() must be called before run()")
        if _version() >= _FP8_CHECKS_SINCE:
            # The C++ launcher reinterprets storage by the type chosen at plan(): FlashInfer checks.
            for arg, tensor, planned in (
                ("q_nope", q_nope, self._q_data_type),
                ("q_pe", q_pe, self._q_data_type),
                ("ckv_cache", ckv_cache, self._kv_data_type),
                ("kpe_cache", kpe_cache, self._kv_data_type),
            ):
                if tensor.dtype is not planned:
                    kind = "q_data_type" if arg.startswith("q") else "kv_data_type"
                    raise ValueError(
                        "%s.dtype=%r does not match the planned %s=%r." % (arg, tensor.dtype, kind, planned)
                    )
        self._check_scales(scales)
        row = ckv_cache.shape[-1] + kpe_cache.shape[-1]
        kv_bytes = self._num_kv_tokens * row * ckv_cache.dtype.itemsize
        kernel = "flashinfer"
        if ckv_cache.dtype is torch.float8_e4m3fn and self._kv_data_type is torch.float8_e4m3fn:
            kernel = "flashinfer_fp8_" + self._backend  # FP8 MLA kernel: dequantises in the kernel, slowly
        kernels.charge_attention(kernel, kv_bytes, q_nope.nbytes + q_pe.nbytes)
        o = out if out is not None else q_nope.new_empty(q_nope.shape)
        if return_lse:
            return o, torch.empty((q_nope.shape[0], q_nope.shape[1]), dtype=torch.float32)
        return o
