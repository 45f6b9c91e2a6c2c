"""Plumbing of the simulated SGLang target (not part of real SGLang).

Everything that makes this checkout a *simulation* lives under ``sglang._sim``:
the simulated GPUs, the fake tensor and kernel modules, and the fault-injection
knobs read from the environment. The rest of the tree mimics SGLang's layout.

Environment knobs (all optional):

* ``SGLANG_SIM_STARTUP_SCALE``  float, multiplies every startup delay (default 1.0,
  a healthy start takes about one second).
* ``SGLANG_SIM_SERVE_SCALE``    float, multiplies the wall time of every simulated
  forward step (default 1.0).
* ``SGLANG_SIM_IGNORE_SIGTERM`` "1": the server and its children ignore SIGTERM.
* ``SGLANG_SIM_HANG_AFTER``     a milestone name (see ``MILESTONES``): stop making
  progress, silently, right after that milestone.
* ``SGLANG_SIM_CRASH_IN_BENCH`` n: the TP0 scheduler hits an illegal memory access
  at the first forward step after n client requests have finished.
* ``SGLANG_SIM_PROFILE_EXPORT_S`` seconds: the profiler's stop and export take this much longer (the
  scheduler serves nothing meanwhile), as the export of a huge trace does.
* ``SGLANG_SIM_PROFILE_STALL_S`` seconds: the TP0 scheduler is busy this long before it takes a
  ``/start_profile`` or ``/stop_profile`` request (stuck in a long step, or still exporting), so the HTTP
  call blocks, as SGLang's does (its tokenizer manager waits for the scheduler without a timeout).
* ``SGLANG_SIM_LEAK_GPU_MEMORY`` "1": the simulated driver keeps the server's GPU memory held
  after its processes are gone (``nvidia-smi --query-compute-apps`` keeps listing it).
* ``SGLANG_SIM_JIT_BUILD_S`` device seconds a first-use kernel build takes (default 2.0, i.e. 0.2 s of
  wall time at the default scales; 0: none): the first prefill batch of a new shape (requests in flight in
  tiles of 1, up to 8, then powers of two; the longest input rounded up to a power of two) pays it once
  per server, with FlashInfer's ``flashinfer.jit: Loading JIT ops: …`` lines, as a JIT build does.
* ``SGLANG_SIM_STATE_DIR``      where the simulated GPUs are described
  (default: ``<sys.prefix>/sglang-sim``, i.e. inside the venv).
"""

import os
import sys
import threading
import time

# Real seconds of wall time per simulated second of GPU time while serving.
TIME_SCALE = 0.1

# Named points of the startup sequence, in order. "where" says which process.
MILESTONES = (
    "server-args",  # main: after the server_args=... line
    "init-distributed",  # scheduler: after "Init torch distributed ends."
    "load-weights",  # scheduler: after "Load weight end."
    "memory-pool",  # scheduler: after "Memory pool end."
    "cuda-graph",  # scheduler: after "Capture ... CUDA graph end."
    "scheduler-ready",  # scheduler: after "max_total_num_tokens=..."
    "uvicorn",  # main: after "Uvicorn running on ..."
    "warmup",  # main: after the warmup request, before the ready line
)


def _env_float(name, default):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("%s=%r is not a number" % (name, raw))
    if value < 0:
        raise ValueError("%s=%r must be >= 0" % (name, raw))
    return value


def startup_scale():
    return _env_float("SGLANG_SIM_STARTUP_SCALE", 1.0)


def serve_scale():
    return _env_float("SGLANG_SIM_SERVE_SCALE", 1.0)


def startup_sleep(seconds):
    """Sleep for a simulated startup phase (scaled by SGLANG_SIM_STARTUP_SCALE)."""
    delay = seconds * startup_scale()
    if delay > 0:
        time.sleep(delay)


def device_seconds_to_wall(seconds):
    return seconds * TIME_SCALE * serve_scale()


def ignore_sigterm():
    return os.environ.get("SGLANG_SIM_IGNORE_SIGTERM", "") not in ("", "0", "false", "False")


def hang_after():
    name = os.environ.get("SGLANG_SIM_HANG_AFTER", "").strip()
    if name and name not in MILESTONES:
        raise ValueError(
            "SGLANG_SIM_HANG_AFTER=%r is not a known milestone (choose from %s)"
            % (name, ", ".join(MILESTONES))
        )
    return name or None


def crash_in_bench():
    raw = os.environ.get("SGLANG_SIM_CRASH_IN_BENCH", "").strip()
    if not raw:
        return None
    value = int(raw)
    if value < 0:
        raise ValueError("SGLANG_SIM_CRASH_IN_BENCH must be >= 0")
    return value


def jit_build_s():
    return _env_float("SGLANG_SIM_JIT_BUILD_S", 2.0)


def profile_export_s():
    return _env_float("SGLANG_SIM_PROFILE_EXPORT_S", 0.0)


def profile_stall_s():
    return _env_float("SGLANG_SIM_PROFILE_STALL_S", 0.0)


def milestone(name):
    """Called right after a startup milestone; hangs forever if asked to."""
    assert name in MILESTONES, name
    if hang_after() == name:
        hang_forever()


def hang_forever():
    sys.stdout.flush()
    sys.stderr.flush()
    forever = threading.Event()
    while True:
        forever.wait(3600)


def state_dir():
    explicit = os.environ.get("SGLANG_SIM_STATE_DIR")
    if explicit:
        return explicit
    return os.path.join(sys.prefix, "sglang-sim")
