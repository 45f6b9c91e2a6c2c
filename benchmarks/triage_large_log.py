"""Triage of a very large server log: streamed, bounded memory, fast.

Builds a realistic ~100 MB SGLang log (8 ranks' startup, a long serving stretch of decode-batch and
access-log lines with tqdm redraws and ANSI colours, then an illegal memory access and the sigquit
cascade at the very end) and times `triage_file` on it. Target: under 2 s, memory bounded.

Run:  python benchmarks/triage_large_log.py [--mb 100] [--json benchmarks/results/triage_large_log.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.triage.classify import triage_file  # noqa: E402

START = """[2026-11-01 10:00:00] server_args=ServerArgs(model_path='/models/GLM-5-NVFP4', tp_size=8, kv_cache_dtype='fp8_e4m3')
{ranks_init}
[2026-11-01 10:03:00] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-11-01 10:03:05] The server is fired up and ready to roll!
"""
SERVING = (
    "[2026-11-01 10:{m:02d}:{s:02d} TP{r}] Decode batch. #running-req: 32, #token: 81234, token usage: 0.05, "
    "cuda graph: True, gen throughput (token/s): 1234.56, #queue-req: 0\n"
    '[2026-11-01 10:{m:02d}:{s:02d}] INFO:     127.0.0.1:{p} - "POST /generate HTTP/1.1" 200 OK\n'
    "\x1b[32m[2026-11-01 10:{m:02d}:{s:02d} TP{r}] Prefill batch. #new-seq: 1, #new-token: 1024, #cached-token: 0, "
    "token usage: 0.05, #running-req: 31, #queue-req: 0\x1b[0m\n"
    "Processed prompts:  {pct}%|#####     | {n}/1000 [00:10<00:10, 50.00it/s]\r"
    "Processed prompts:  {pct}%|######    | {n}/1000 [00:11<00:09, 51.00it/s]\n"
)
END = """[2026-11-01 11:00:00 TP5] Scheduler hit an exception: Traceback (most recent call last):
  File "/sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process
    scheduler.event_loop_overlap()
RuntimeError: CUDA error: an illegal memory access was encountered
[2026-11-01 11:00:00 TP2] Scheduler hit an exception: Traceback (most recent call last):
torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited
[2026-11-01 11:00:01] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
Killed
"""


def build(path: Path, mb: int) -> int:
    init = "\n".join(f"[2026-11-01 10:00:0{r} TP{r}] Init torch distributed begin.\n"
                     f"[2026-11-01 10:01:0{r} TP{r}] Load weight begin. avail mem=139.28 GB\n"
                     f"[2026-11-01 10:02:0{r} TP{r}] Capture cuda graph begin. This can take up to several minutes."
                     for r in range(8))
    with open(path, "w") as f:
        f.write(START.format(ranks_init=init))
        i = 0
        block = []
        while f.tell() < mb * 1_000_000:
            block.append(SERVING.format(m=i // 60 % 60, s=i % 60, r=i % 8, p=40000 + i % 20000, pct=i % 100,
                                        n=i % 1000))
            i += 1
            if len(block) == 2000:
                f.write("".join(block))
                block.clear()
        f.write("".join(block))
        f.write(END)
        return f.tell()


def build_startup_noise(path: Path, mb: int) -> int:
    """A server that never gets ready while NCCL_DEBUG=INFO floods the log (the worst case: every
    startup milestone and frame clue is still being looked for)."""
    line = "[2026-11-01 10:00:00 TP3] vm:1234:1234 [3] NCCL INFO Channel 07/0 : 3[3] -> 4[4] via P2P/CUMEM/read\n"
    with open(path, "w") as f:
        f.write("[2026-11-01 10:00:00] server_args=ServerArgs(model_path='/models/GLM-5-NVFP4')\n"
                "[2026-11-01 10:00:01 TP0] Init torch distributed begin.\n")
        block = line * 10000
        while f.tell() < mb * 1_000_000:
            f.write(block)
        return f.tell()


def time_triage(log: Path, repeats: int, exit_code: int | None) -> tuple[list[float], object, int]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        v = triage_file(log, exit_code=exit_code)
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    triage_file(log, exit_code=exit_code)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return times, v, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for scenario, builder, exit_code in (("serving-then-crash", build, 137),
                                             ("startup-noise-never-ready", build_startup_noise, None)):
            log = Path(tmp) / f"{scenario}.log"
            size = builder(log, args.mb)
            times, v, peak = time_triage(log, args.repeats, exit_code)
            log.unlink()
            r = {"scenario": scenario, "log_bytes": size, "seconds": [round(t, 3) for t in times],
                 "worst_s": round(max(times), 3), "mb_per_s": round(size / 1e6 / min(times), 1),
                 "python_peak_alloc_mib": round(peak / 2**20, 1), "verdict": v.to_dict()}
            results.append(r)
            print(f"{scenario}: {size / 1e6:.1f} MB, triage_file {', '.join(f'{t:.2f}s' for t in times)} "
                  f"({r['mb_per_s']} MB/s), peak Python allocation {r['python_peak_alloc_mib']} MiB")
            print(f"    verdict: {v.verdict} / {v.category} / phase {v.phase} / key line: {v.key_line}")
    ok = all(r["worst_s"] < 2.0 for r in results)
    print(f"max RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print("target: < 2 s per 100 MB log, memory bounded ->", "PASS" if ok else "FAIL")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"target": "< 2 s for 100 MB", "pass": ok, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
