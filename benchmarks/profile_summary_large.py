"""Summarising a large torch-profiler trace: streamed, memory bounded by ids, not by the file.

Writes a Chrome trace of about --mb MB (CPU ops, launches, kernels, flow events, like torch's export) and
times `summarize_trace` on it, with the peak Python allocation.

Run:  python benchmarks/profile_summary_large.py [--mb 300] [--json benchmarks/results/profile_summary_large.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.triage.profile import summarize_trace  # noqa: E402

OPS = [("aten::copy_", "direct_copy_kernel_cuda", 6460.0), ("flashinfer::mla_run", "BatchMLAPagedAttentionKernel", 900.0),
       ("aten::mm", "sm90_xmma_gemm_bf16bf16_bf16f32", 1940.0), ("sglang::fused_moe", "fused_moe_kernel", 800.0)]


def build(path: Path, mb: int) -> int:
    ext = 0
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [')
        first = True
        while f.tell() < mb * 1_000_000:
            chunk = []
            for _ in range(2000):
                name, kern, dur = OPS[ext % len(OPS)]
                ext += 1
                ts = ext * 10.0
                chunk.append(json.dumps({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
                                         "dur": 6.0, "args": {"External id": ext, "Sequence number": ext}}))
                chunk.append(json.dumps({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                                         "tid": 1, "ts": ts + 1, "dur": 3.0,
                                         "args": {"External id": ext, "correlation": ext}}))
                chunk.append(json.dumps({"ph": "X", "cat": "kernel", "name": kern, "pid": 0, "tid": 7, "ts": ts + 5,
                                         "dur": dur, "args": {"External id": ext, "correlation": ext, "device": 0,
                                                              "stream": 7, "grid": [132, 1, 1], "block": [128, 1, 1]}}))
                chunk.append(json.dumps({"ph": "f", "id": ext, "pid": 0, "tid": 7, "ts": ts + 5, "cat": "ac2g",
                                         "name": "ac2g", "bp": "e"}))
            f.write(("" if first else ",") + ",".join(chunk))
            first = False
        f.write("]}")
        return f.tell()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.trace.json"
        size = build(path, args.mb)
        t0 = time.perf_counter()
        s = summarize_trace(path)
        seconds = time.perf_counter() - t0
        tracemalloc.start()
        summarize_trace(path)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    result = {"trace_bytes": size, "kernels": s.kernels, "seconds": round(seconds, 2),
              "mb_per_s": round(size / 1e6 / seconds, 1), "python_peak_alloc_mib": round(peak / 2**20, 1),
              "top": [(o.name, o.share) for o in s.top[:4]]}
    print(f"trace {size / 1e6:.0f} MB, {s.kernels} kernels: summarised in {seconds:.1f} s "
          f"({result['mb_per_s']} MB/s), peak Python allocation {result['python_peak_alloc_mib']} MiB")
    print("top:", ", ".join(f"{n} {sh * 100:.1f}%" for n, sh in result["top"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
