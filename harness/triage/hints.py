"""The advice a verdict gives (pure): by category, by the key line's words, by phase for OOM, and for a
server that stopped making progress."""

from __future__ import annotations

import re

from ..results.attemptdir import STACK_DUMP
from .signatures import SIGQUIT_NOTICE, SIGQUIT_RECEIVED

# Advice that depends on the key line's words rather than only on its category.
KEY_LINE_HINTS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), hint) for p, hint in (
    (r"fatal error: |cannot open source file",
     "the JIT build could not find a file it includes: the CUDA toolkit it compiles against (CUDA_HOME) or the "
     "headers the kernel library ships (FlashInfer's cutlass) are missing or older than the kernels need — point "
     "CUDA_HOME at a full toolkit of the version torch was built for, reinstall the library, or add the include "
     "path (FLASHINFER_EXTRA_CUDAFLAGS=-I…)"),
    # Seen live: FlashInfer's MLA plan given an e5m2 cache ("MLA kv_data_type torch.float8_e5m2 is not
    # supported. Supported dtypes: [...]"), raised during CUDA graph capture, not at argument parsing.
    (r"(?i)\bkv_(?:cache_)?(?:data_)?d?type\b.*\b(?:not supported|unsupported)",
     "the attention backend's kernels cannot read this KV cache dtype (the key line lists the ones they can): set "
     "the experiment's server.kv_cache_dtype (--kv-cache-dtype) to one of them, or pick a backend that reads it"),
    (SIGQUIT_NOTICE + "|" + SIGQUIT_RECEIVED[len("(?i)"):],
     "a child process (a scheduler) failed and the launcher shut everything down, but the child's own error is "
     "not in this log: look for its traceback in the scheduler's output, or rerun with one GPU (--tp 1) to see it"),
))

HINTS = {
    "build-tool-missing": "the JIT build cannot start: a tool it runs is missing or not on PATH — `pip install "
                          "ninja` in the server's environment, install the CUDA toolkit and set CUDA_HOME (nvcc "
                          "under $CUDA_HOME/bin), install a C++ compiler, or use prebuilt kernels "
                          "(flashinfer-jit-cache / AOT wheels)",
    "illegal-memory-access": "a kernel read out of bounds: suspect the attention backend or the patch under "
                             "test; rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel",
    "jit-compile-error": "a JIT-compiled kernel failed to build: that kernel does not support this dtype/shape "
                         "(FlashInfer's MLA kernel needs a 16-bit KV cache); revert the patch or pick a "
                         "backend that does",
    "unsupported-arch": "this backend's kernels do not run on this GPU: on Hopper (SM90) use flashinfer, fa3, "
                        "flashmla or triton; cutlass_mla and trtllm_mla need Blackwell (SM100)",
    "nccl-error": "NCCL failed between ranks: rerun with NCCL_DEBUG=INFO, check P2P/IB settings "
                  "(NCCL_P2P_DISABLE=1, NCCL_IB_DISABLE=1) and that no other job holds the GPUs",
    "import-error": "the server's Python environment is broken (a missing module or an ABI mismatch between "
                    "sgl-kernel/flashinfer and torch): reinstall matching versions",
    "port-in-use": "a port the server needs is taken: stop the old server or pick another --port (internal "
                   "ports such as the dist-init port derive from it)",
    "config-error": "the server rejected its arguments or the model config before starting: fix the flag or "
                    "model named in the key line",
    "python-exception": "the server raised an exception: the key line is the error, the traceback above it "
                        "says where",
    "warmup-failed": "the server came up but its warmup request failed: check the model path and the "
                     "first request's error",
    "killed": "the process was killed (SIGKILL): check `dmesg -T | grep -i oom` for the OS OOM killer",
    "unknown": "the server died without a recognised error: read the end of the log",
    "incomplete": "the log ends before the server was ready and without an error: still starting, cut "
                  "short, or hung (a live watcher decides hangs by time)",
}


def crash_hint(category: str, phase: str, key_line: str | None = None) -> str | None:
    if key_line is not None:
        for pattern, hint in KEY_LINE_HINTS:
            if pattern.search(key_line):
                return hint
    if category == "oom":
        if phase == "cuda-graph-capture":
            return ("out of GPU memory while capturing CUDA graphs: lower --cuda-graph-max-bs or "
                    "--mem-fraction-static (graphs live outside the static pool)")
        if phase in ("load-weights", "kv-cache"):
            return ("out of GPU memory before serving: the weights do not fit beside the KV pool — lower "
                    "--mem-fraction-static, raise --tp-size, or free the GPUs (another process?)")
        return ("out of GPU memory while serving: lower --max-running-requests, --chunked-prefill-size or "
                "--mem-fraction-static")
    return HINTS.get(category)


def hang_hint(phase: str | None, stack_dump: bool = True) -> str:
    """Advice for a server that stopped making progress, by where its log says it was (seen live: a server
    stuck before CUDA graph capture was sent to NCCL). The stack dump shows where each process waits."""
    where = {
        "args": "before it parsed its arguments: the launcher itself is blocked (a Python import or a file lock)",
        "distributed-init": "at distributed init: usually NCCL or the rendezvous port (try NCCL_DEBUG=INFO, "
                            "NCCL_P2P_DISABLE=1; check that no other job holds the GPUs)",
        "load-weights": "while loading the weights: slow or unreachable storage, or a rank that died and left "
                        "the others waiting",
        "kv-cache": "after sizing the KV cache, before CUDA graph capture: a kernel JIT build waiting on a "
                    "lock, or the patch under test",
        "cuda-graph-capture": "while capturing CUDA graphs: a kernel that never returns (the attention backend "
                              "or the patch under test), or a collective one rank never reached",
        "warmup": "in the warmup request: the first forward pass never finished",
        "serving": "while serving: a request that never finishes, or a deadlock between ranks",
    }.get(phase or "", "before its log said where it was")
    see = (f"{STACK_DUMP} shows where each process waits" if stack_dump
           else "no stack dump was taken (install py-spy on the host to get one)")
    return f"the server stopped making progress {where}; {see}"
