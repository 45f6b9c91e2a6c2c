"""Crash triage: read an SGLang server log like an experienced engineer (pure, streaming).

Given the log lines (and optionally the exit code) return a `Verdict`: whether the server got ready,
crashed or the log is incomplete; the cause as a fixed category; the single most telling line; where
startup was (phase); and one actionable hint. Memory stays bounded whatever the log size: only the
best match so far, the phase and a few counters are kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

CATEGORIES = (
    "ready", "oom", "illegal-memory-access", "jit-compile-error", "unsupported-arch", "nccl-error",
    "import-error", "port-in-use", "config-error", "python-exception", "warmup-failed", "killed",
    "incomplete", "unknown",
)

READY_LINE = "The server is fired up and ready to roll!"
READY_PATTERN = re.escape(READY_LINE)

# Lines that mean "this server is going down" when a live process prints them. The agent watches for
# these to stop waiting early (a fatal line while alive = crash after a short grace period).
FATAL_PATTERNS: tuple[str, ...] = (
    r"Scheduler hit an exception",
    r"Received sigquit from a child proc",
    r"SIGQUIT received",
    r"scheduler died during initialization",
    r"scheduler is dead",
    r"Capture cuda graph failed",
    r"Initialization failed\. warmup error",
    r"Subprocess \S+ \(pid=\d+\) crashed with exit code",
    r"watchdog timeout \(self\.watchdog_timeout",
    r"CUDA error: an illegal memory access",
    r"terminate called after throwing an instance of",
)


@dataclass(frozen=True)
class Signature:
    category: str
    pattern: re.Pattern[str]
    rank: int  # lower wins: root causes beat their consequences


def _sig(category: str, rank: int, *patterns: str) -> list[Signature]:
    """Within a category, earlier patterns are more telling (the static_assert line beats ninja's exit)."""
    return [Signature(category, re.compile(p), rank * 100 + i) for i, p in enumerate(patterns)]


SIGNATURES: tuple[Signature, ...] = tuple(sorted(
    _sig("unsupported-arch", 10,
         r"Unsupported architecture",
         r"is only supported on (?:Blackwell|Hopper|SM\d+)",
         r"only supported on Hopper \(SM90\)",
         r"no kernel image is available for execution",
         r"requires SM>=\d+ and SM<=\d+",
         r"requires an SM\d+ \(\w+\) device")
    + _sig("jit-compile-error", 20,
           r"error: static assertion failed",
           r"static_assert\(.*\) failed",
           r"Error building extension",
           r"Ninja build failed",
           r"CalledProcessError: Command '\['ninja'",
           r"ninja: build stopped",
           r"nvcc fatal")
    + _sig("oom", 30,
           r"CUDA out of memory",
           r"OutOfMemoryError",
           r"out of memory",
           r"Not enough memory\.")
    + _sig("illegal-memory-access", 40,
           r"an illegal memory access was encountered",
           r"illegal memory access",
           r"misaligned address",
           r"an illegal instruction was encountered")
    + _sig("import-error", 50,
           r"ModuleNotFoundError",
           r"ImportError",
           r"undefined symbol")
    + _sig("port-in-use", 55,
           r"[Aa]ddress already in use",
           r"EADDRINUSE",
           r"Port is already in use",
           r"is not available in \d+ seconds")
    + _sig("nccl-error", 60,
           r"NCCL error",
           r"nccl\w*Error",
           r"DistBackendError",
           r"DistNetworkError",
           r"ProcessGroupNCCL")
    + _sig("config-error", 70,
           r"argument --[\w-]+: invalid choice",
           r"unrecognized arguments:",
           r"does not recognize this architecture",
           r"^\s*ValueError: .*(?:backend|kv-cache-dtype|page_size|not supported|must be)",
           r"Unrecognized configuration class",
           r"(?:OSError|ValueError): .*(?:config\.json|model_type)")
    + _sig("warmup-failed", 80, r"Initialization failed\. warmup error")
    + _sig("python-exception", 90, r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception): ")
    + _sig("killed", 95, r"^Killed$", r"exit code: -9", r"exit code -9"),
    key=lambda s: s.rank))

# Startup milestones in the order SGLang prints them; the phase is the last one reached.
MILESTONES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (phase, re.compile(p)) for phase, p in (
        ("args", r"server_args=ServerArgs\("),
        ("distributed-init", r"Init torch distributed begin"),
        ("load-weights", r"Load weight begin"),
        ("kv-cache", r"Load weight end"),
        ("cuda-graph-capture", r"Capture (?:cuda graph|\w+ decode CUDA graph|.*CUDA graph) begin"),
        ("warmup", r"Capture (?:cuda graph|.*CUDA graph) end|max_total_num_tokens=|Uvicorn running on"),
        ("serving", re.escape(READY_LINE)),
    )
)

HINTS = {
    "oom": "lower --mem-fraction-static or --cuda-graph-max-bs (or --max-running-requests); the OOM came "
           "during {phase}",
    "illegal-memory-access": "a kernel read out of bounds: suspect the attention backend or the patch "
                             "under test; rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel",
    "jit-compile-error": "a JIT-compiled kernel failed to build: the dtype/shape combination is not "
                         "supported by that kernel (e.g. FlashInfer MLA needs 16-bit KV); revert the "
                         "patch or pick a backend that supports it",
    "unsupported-arch": "this backend's kernels do not run on this GPU: pick a backend that fits the "
                        "arch (Hopper SM90: flashinfer, fa3, flashmla, triton; Blackwell SM100: "
                        "trtllm_mla, cutlass_mla, flashinfer)",
    "nccl-error": "NCCL failed between ranks: check NCCL_DEBUG=INFO output, P2P/IB settings "
                  "(NCCL_P2P_DISABLE, NCCL_IB_DISABLE) and that no other job holds the GPUs",
    "import-error": "the server's Python environment is broken (missing module or ABI mismatch "
                    "between sgl-kernel/flashinfer and torch): reinstall matching versions",
    "port-in-use": "a port the server needs is taken: stop the old server or choose another --port "
                   "(internal ports derive from it)",
    "config-error": "the server rejected its arguments or model config before starting: fix the "
                    "flag or model path named in the key line",
    "python-exception": "the server raised an exception: read the key line and the traceback above it",
    "warmup-failed": "the server started but its warmup request failed: check the model path and "
                     "the first request's error",
    "killed": "the process was killed (SIGKILL): check `dmesg -T | grep -i oom` for the OS OOM "
              "killer",
    "unknown": "the server died without a recognised error: read the end of the log",
    "incomplete": "the log ends before the server was ready and without an error: still starting, "
                  "cut short, or hung",
}


@dataclass(frozen=True)
class Verdict:
    verdict: str  # ready | crash | incomplete
    category: str
    key_line: str | None
    phase: str
    hint: str | None

    def to_dict(self) -> dict:
        return asdict(self)


_PREFIXES = (
    re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]"),  # ANSI colours
)
_LEAD = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\s+)?"  # docker --timestamps
    r"(?:\((?:\w+)\s+pid=\d+(?:,\s*ip=[\d.]+)?\)\s+)?"  # Ray-style (EngineCore pid=123)
)


def clean_line(raw: str) -> str:
    """One display line: tqdm redraws collapsed, colours and container prefixes removed."""
    line = raw.rstrip("\n").rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    for p in _PREFIXES:
        line = p.sub("", line)
    return _LEAD.sub("", line, count=1)


class Triage:
    """Feed lines one by one; ask for the verdict at any time."""

    def __init__(self) -> None:
        self.phase = "start"
        self._phase_rank = -1
        self.ready = False
        self.best: tuple[int, int, str, str, str] | None = None  # rank, line no, category, line, phase
        self.lines = 0
        self.fatal_seen = False

    def feed(self, raw: str) -> None:
        line = clean_line(raw)
        self.lines += 1
        if not line.strip():
            return
        for rank, (phase, pat) in enumerate(MILESTONES):
            if rank > self._phase_rank and pat.search(line):
                self.phase, self._phase_rank = phase, rank
                if phase == "serving":
                    self.ready = True
        if not self.fatal_seen and any(re.search(p, line) for p in FATAL_PATTERNS):
            self.fatal_seen = True
        for sig in SIGNATURES:
            if sig.pattern.search(line):
                if self.best is None or sig.rank < self.best[0]:
                    self.best = (sig.rank, self.lines, sig.category, line.strip()[:500], self.phase)
                break  # signatures are sorted by rank: the first match is this line's best

    def feed_all(self, lines: Iterable[str]) -> Triage:
        for line in lines:
            self.feed(line)
        return self

    def verdict(self, exit_code: int | None = None) -> Verdict:
        died = exit_code is not None and exit_code != 0
        crashed = died or self.fatal_seen or (self.best is not None and not self.ready and self.best[0] < 9000)
        if self.ready and not died and not self.fatal_seen:
            return Verdict("ready", "ready", READY_LINE, "serving", None)
        if not crashed:
            if self.best is not None and exit_code is None:
                # An exception with no sign of the process going down: not (yet) a crash.
                return Verdict("incomplete", "incomplete", None, self.phase, HINTS["incomplete"])
            if exit_code == 0:
                return Verdict("incomplete", "incomplete", None, self.phase, "the server exited with code 0 "
                               "before it was ready")
            return Verdict("incomplete", "incomplete", None, self.phase, HINTS["incomplete"])
        if self.best is None:
            category = "killed" if exit_code in (137, -9) else "unknown"
            return Verdict("crash", category, None, self.phase, HINTS[category])
        _, _, category, key_line, phase = self.best
        return Verdict("crash", category, key_line, phase, HINTS[category].format(phase=phase))


def triage_lines(lines: Iterable[str], exit_code: int | None = None) -> Verdict:
    return Triage().feed_all(lines).verdict(exit_code)


def triage_text(text: str, exit_code: int | None = None) -> Verdict:
    return triage_lines(text.splitlines(), exit_code)


def iter_file_lines(path: Path, chunk: int = 1 << 20, max_line: int = 1 << 16) -> Iterator[str]:
    """Lines of a possibly huge file in bounded memory (overlong lines are cut at `max_line`)."""
    with open(path, "rb") as f:
        partial = b""
        while True:
            data = f.read(chunk)
            if not data:
                break
            data = partial + data
            pieces = data.split(b"\n")
            partial = pieces.pop()
            if len(partial) > max_line:
                partial = partial[-max_line:]
            for p in pieces:
                yield p[:max_line].decode("utf-8", errors="replace")
        if partial:
            yield partial.decode("utf-8", errors="replace")


def triage_file(path: Path, exit_code: int | None = None) -> Verdict:
    return triage_lines(iter_file_lines(path), exit_code)
