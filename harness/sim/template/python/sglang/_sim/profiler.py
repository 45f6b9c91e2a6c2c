"""Simulated torch profiler: Chrome trace JSON in the shape `torch.profiler` exports.

While a profile runs, the scheduler hands every forward step's simulated device time by kind (the
cost model: the KV cast, the gather, attention, the dense layers) to `Recorder.step`. On stop the
recorder writes one trace per TP rank under the names the profiler manager gives
(`{profile_id}-TP-{rank}.trace.json.gz`, …): CPU ops (`cat: cpu_op`), the runtime launch
(`cuda_runtime`) and the GPU kernel (`cat: kernel`) linked by `External id` and `correlation`, like real
traces — so the stock FlashInfer MLA run shows `aten::copy_` eating the step.
"""

import gzip
import json
import os
import threading

# kind → (framework op, kernel name, share of the kind's time): what real traces call these.
KERNELS = {
    "cast": [("aten::copy_", "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
                             "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::Float8_e4m3fn)#1}"
                             ", std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, "
                             "TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
                             "at::native::memory::StoreWithCast<1> >", 1.0)],
    "gather": [("sglang::gather_cast_kv", "_gather_cast_kv_kernel", 1.0)],
    "other": [("aten::mm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
                           "execute_segment_k_off_kernel__5x_cublas", 0.55),
              ("sglang::fused_moe", "fused_moe_kernel", 0.3),
              ("c10d::allreduce_", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0.1),
              ("aten::add", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<"
                            "c10::BFloat16>, std::array<char*, 3ul> >", 0.05)],
}
ATTENTION = {
    "flashinfer": ("flashinfer::batch_mla_paged_attention_run",
                   "void flashinfer::mla::BatchMLAPagedAttentionKernel<flashinfer::mla::KernelTraits<true, 2, 8, 4, "
                   "512, 64, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >"),
    "custom_fp8_mla": ("sglang::custom_fp8_mla_decode", "mla_fp8_split"),  # the CUDA path on an H200
    "trtllm_mla": ("flashinfer::trtllm_batch_decode_with_kv_cache_mla",
                   "fmhaSm100fKernel_QkvE4m3OBfloat16HQk576HV512HVPerCta256PagedKvDenseP64MultiCtasKvCgaVarSeqQ128"),
}


# Seconds of the profiler's stop and export per second it ran over the scheduler's idle loop with its
# Python tracer on (with_stack and CPU activity): torch 2.11 on an H200, 0.5 s of a busy Python loop ->
# stop 5.9 s + export 22.1 s (24 MB); 5 s of it took longer than 160 s.
PYTHON_TRACER_S_PER_IDLE_S = 56.0


class Recorder(object):
    def __init__(self, tp_size, backend, layers, device_name):
        self.tp_size = tp_size
        self.backend = backend
        self.layers = max(1, int(layers))
        self.device_name = device_name
        self.steps = []  # (mode, batch_size, num_tokens, {kind: seconds})
        self.lock = threading.Lock()

    def step(self, mode, batch_size, num_tokens, cost):
        """Record one forward step."""
        with self.lock:
            self.steps.append((mode, batch_size, num_tokens, dict(cost)))

    def write(self, output_dir, names):
        """One trace per rank, `names[rank]` in `output_dir`, gzipped straight into place as torch does (the
        file appears, grows, and is whole when "Profiling done" is logged)."""
        paths = []
        for rank in range(self.tp_size):
            path = os.path.join(output_dir, names[rank])
            with gzip.open(path, "wt") as f:
                json.dump(self._trace(rank), f)
            paths.append(path)
        return paths

    def _trace(self, rank):
        pid, tid, stream = 1000 + rank, 1000 + rank, 7
        events = []
        ts = 1.0e6
        ext = corr = 0
        for mode, batch_size, num_tokens, cost in self.steps:
            step_start = ts
            for layer in range(self.layers):
                for kind, seconds in sorted(cost.items()):
                    if seconds <= 0:
                        continue
                    per_layer_us = seconds * 1e6 / self.layers
                    for op, kernel, share in self._ops(kind):
                        ext += 1
                        corr += 1
                        dur = per_layer_us * share
                        events.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": pid, "tid": tid, "ts": ts,
                                       "dur": 6.0, "args": {"External id": ext, "Record function id": 0,
                                                            "Sequence number": ext}})
                        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                                       "tid": tid, "ts": ts + 1, "dur": 3.0,
                                       "args": {"External id": ext, "correlation": corr}})
                        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": rank, "tid": stream,
                                       "ts": ts + 5, "dur": round(dur, 3),
                                       "args": {"External id": ext, "correlation": corr, "device": rank,
                                                "stream": stream, "grid": [132, 1, 1], "block": [128, 1, 1]}})
                        events.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": ts + 1,
                                       "cat": "ac2g", "name": "ac2g"})
                        events.append({"ph": "f", "id": corr, "pid": rank, "tid": stream, "ts": ts + 5,
                                       "cat": "ac2g", "name": "ac2g", "bp": "e"})
                        ts += max(dur, 0.5)
            # SGLang's span around each forward (profile_utils.build_step_span_name), a record_function
            span = ("step[EXTEND bs=%d toks=%d]" % (batch_size, num_tokens) if mode == "extend"
                    else "step[DECODE bs=%d]" % batch_size)
            events.append({"ph": "X", "cat": "user_annotation", "name": span, "pid": pid,
                           "tid": tid, "ts": step_start, "dur": ts - step_start,
                           "args": {"External id": 0, "Record function id": 0}})
        return {"schemaVersion": 1,
                "deviceProperties": [{"id": r, "name": self.device_name, "computeMajor": 9, "computeMinor": 0}
                                     for r in range(self.tp_size)],
                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": self.tp_size},
                "traceEvents": events, "traceName": "sglang-sim", "displayTimeUnit": "ms"}

    def _ops(self, kind):
        if kind == "attention":
            op, kernel = ATTENTION.get(self.backend, ("%s::attention" % self.backend, "%s_attention_kernel"
                                                      % self.backend))
            return [(op, kernel, 1.0)]
        return KERNELS.get(kind, [("sglang::%s" % kind, "%s_kernel" % kind, 1.0)])
