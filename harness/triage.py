"""Crash triage: read an SGLang server log like an experienced engineer (pure, streaming).

Given the log (text, lines or a file) and optionally the exit code, return a `Verdict`:

* `verdict`  — ready | crash | incomplete
* `category` — one of CATEGORIES (fixed: records, the agent and the comparison table use it)
* `key_line` — the single most telling line: the root cause, never a bare `Traceback` or the
  `Received sigquit` that merely follows it
* `phase`    — where startup was: args, distributed-init, load-weights, kv-cache, cuda-graph-capture,
  warmup, serving (or unknown when a cut log gives no clue)
* `hint`     — one actionable sentence

How it reads a log: every line is stripped of what real logs wrap around SGLang's messages (docker
timestamps, `[2025-… TP3]`, Ray's `(EngineCore pid=…)`, ANSI colours, tqdm redraws after `\\r`).
Signatures are ranked: root causes (an unsupported arch, a failed JIT build, OOM, an illegal memory
access) beat their consequences (NCCL aborts, generic exceptions, a kill), and within a category the
most specific line wins. Lines that echo a request's text are never evidence. Memory is bounded
whatever the log size: a cheap keyword prefilter runs over whole chunks and only candidate lines are
parsed; the state is the best match, the phase and a few flags.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CATEGORIES = (
    "ready", "oom", "illegal-memory-access", "jit-compile-error", "unsupported-arch", "nccl-error",
    "import-error", "port-in-use", "config-error", "python-exception", "warmup-failed", "killed",
    "incomplete", "unknown",
)
PHASES = ("args", "distributed-init", "load-weights", "kv-cache", "cuda-graph-capture", "warmup", "serving")

READY_LINE = "The server is fired up and ready to roll!"
READY_PATTERN = re.escape(READY_LINE)

# What real logs put in front of SGLang's own message; removed repeatedly (a docker timestamp can
# precede an SGLang prefix). The agent receives this pattern in its spec, so both read lines alike.
LINE_PREFIX_PATTERN = (
    r"^(?:"
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\s+"  # docker --timestamps
    r"|\((?:[\w-]+)\s+pid=\d+(?:,\s*ip=[\d.:]+)?\)\s*"  # Ray: (EngineCore pid=123)
    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s[^\]]{0,40})?\]\s*"  # [2025-01-01 10:00:00 TP0]
    r"|[\w.-]{1,40}\s{0,8}\|\s"  # docker compose: "sglang-1  | "
    r")+"
)
_PREFIX = re.compile(LINE_PREFIX_PATTERN)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

# Lines that mean "this server is going down" when a live process prints them; matched against the
# message after the prefix, so a request quoting these words is not mistaken for them. The agent
# watches for these to stop waiting early (a fatal line while alive = crash after a grace period).
FATAL_PATTERNS: tuple[str, ...] = (
    r"^Scheduler hit an exception",
    r"^Received sigquit from a child proc",
    r"^SIGQUIT received",
    r"scheduler died during initialization",
    r"^Rank \d+ scheduler is dead",
    r"^Initialization failed\. warmup error",
    r"^Subprocess \S+ \(pid=\d+\) crashed with exit code",
    r"watchdog timeout \(self\.watchdog_timeout",
    r"^terminate called after throwing an instance of",
    r"^(?:\w+\.)*\w*(?:Error|Exception): Capture cuda graph failed",
)


@dataclass(frozen=True)
class Signature:
    category: str
    pattern: re.Pattern[str]
    rank: tuple[int, int]  # (the category's rank, the pattern's place in it): lower wins


def _sig(category: str, rank: int, *patterns: str) -> list[Signature]:
    """Within a category, earlier patterns are more telling (the static_assert line beats ninja's exit)."""
    return [Signature(category, re.compile(p), (rank, i)) for i, p in enumerate(patterns)]


# Categories ranked from here on name no cause: a bare exception, a bare kill. While the server is
# alive, only a line ranked below this makes it a crash.
BARE_RANK = 90
# A key line is kept to this many characters (a tensor printed on one line stays out of the record).
KEY_LINE_MAX = 500


SIGNATURES: tuple[Signature, ...] = tuple(sorted(
    _sig("unsupported-arch", 10,
         r"Unsupported architecture",
         r"is only supported on (?:Blackwell|Hopper|SM\s?\d+)",
         r"only supported on Hopper \(SM90\)",
         r"no kernel image is available for execution",
         r"requires SM\s?>=\s?\d+ and SM\s?<=\s?\d+",
         r"requires an SM\d+ \(\w+\) device",
         r"(?:not supported|unsupported) (?:on|for) (?:this|the current) (?:GPU|device|architecture)",
         r"compute capability \d+\.\d+ (?:is )?not supported")
    + _sig("jit-compile-error", 20,
           r"error: static assertion failed",
           r"static_assert\(.*\) failed",
           r"\berror\b.*\.cuh?\(\d+\)|\.cuh?\(\d+\): error",
           r"Error building extension",
           r"Ninja build failed",
           r"CalledProcessError: Command '\['ninja'",
           r"ninja: build stopped",
           r"nvcc fatal",
           r"(?:JIT|jit) compil\w+ (?:failed|error)")
    + _sig("oom", 30,
           r"CUDA out of memory",
           r"OutOfMemoryError",
           r"CUDA error: out of memory",
           r"cudaErrorMemoryAllocation",
           r"\bout of memory\b",
           r"Not enough memory\. Please try to increase --mem-fraction-static")
    + _sig("illegal-memory-access", 40,
           r"an illegal memory access was encountered",
           r"illegal memory access",
           r"misaligned address",
           r"an illegal instruction was encountered",
           r"device-side assert triggered",
           r"unspecified launch failure")
    + _sig("import-error", 50,
           r"undefined symbol",
           r"ModuleNotFoundError",
           r"ImportError",
           r"cannot import name")
    + _sig("port-in-use", 55,
           r"[Aa]ddress already in use",
           r"EADDRINUSE",
           r"Port is already in use",
           r"is not available in \d+ seconds")
    + _sig("nccl-error", 60,
           r"NCCL error",
           r"nccl(?:Unhandled\w*|System|Internal|Invalid\w*|Remote)Error",
           r"DistBackendError",
           r"DistNetworkError",
           r"ProcessGroupNCCL.*(?:error|Error|timed out|[Tt]imeout)",
           r"Watchdog caught collective operation timeout",
           r"NCCL WARN")
    + _sig("config-error", 70,
           r"argument --[\w-]+: invalid choice",
           r"unrecognized arguments:",
           r"error: the following arguments are required",
           r"does not (?:recognize|support) this architecture",
           r"has model type `[^`]+` but Transformers does not recognize",
           r"Unrecognized configuration class",
           r"^(?:\w+\.)*(?:ValueError|TypeError|AssertionError|OSError|FileNotFoundError): .*"
           r"(?:backend|kv.cache.dtype|page.size|not supported|must be|config|model_type|model path|"
           r"does not appear to have|is not a (?:local folder|valid))")
    + _sig("warmup-failed", 80, r"Initialization failed\. warmup error")
    + _sig("python-exception", BARE_RANK,
           r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt)(?::|$)")
    + _sig("killed", 85, r"died during initialization \(exit code: -9\)", r"exit code:? -9\b")
    # A bare "Killed" is usually the launcher killing itself after a child failed: a consequence.
    + _sig("killed", 95, r"^Killed$", r"signal 9\b|SIGKILL"),
    key=lambda s: s.rank))

# Startup milestones in the order SGLang prints them; the phase is the furthest one reached.
MILESTONES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (phase, re.compile(p)) for phase, p in (
        ("args", r"server_args=ServerArgs\("),
        ("distributed-init", r"Init torch distributed begin"),
        ("load-weights", r"Load weight begin|Loading safetensors checkpoint shards"),
        ("kv-cache", r"Load weight end|KV Cache is allocated|Memory pool end"),
        ("cuda-graph-capture", r"Capture (?:cuda graph|.*CUDA graph) begin|Capturing batches"),
        ("warmup", r"Capture (?:cuda graph|.*CUDA graph) end|max_total_num_tokens=|Uvicorn running on"
                   r"|Application startup complete"),
        ("serving", re.escape(READY_LINE)),
    )
)

# Where a failing frame or message places the failure, for logs cut before any milestone.
PHASE_CLUES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (phase, re.compile(p)) for phase, p in (
        ("args", r"server_args\.py|ServerArgs|__post_init__|arg_groups|argparse|launch_server\.py\", line"
                 r"|Please use a different (?:\w+ )?backend|error: argument --|invalid choice|unrecognized arguments"
                 r"|the following arguments are required"
                 r"|AutoConfig|configuration_auto|hf_transformers_utils|model_config\.py"),
        ("distributed-init", r"init_distributed_environment|init_torch_distributed|init_process_group"
                             r"|TCPStore|rendezvous|parallel_state\.py|initialize_model_parallel|pynccl"
                             r"|DistNetworkError|server socket has failed to listen"),
        ("load-weights", r"load_model|load_weights|model_loader|weight_utils|Loading safetensors"),
        ("kv-cache", r"init_memory_pool|memory_pool|profile_max_num_token|KV Cache"),
        ("cuda-graph-capture", r"cuda_graph_runner|Capture cuda graph|CUDA graph|capture_one_batch|Capturing batches"
                               r"|init_device_graphs|init_cuda_graphs"),
        ("warmup", r"_wait_and_warmup|_execute_server_warmup|warmup error"),
    )
)

# Source lines quoted in a traceback (`raise RuntimeError(f"NCCL error: …")`) name no error themselves.
_CODE_LINE = re.compile(r"^(?:raise|return|assert|if|elif|self\.\w+\s*=|\w+\s*=\s*\w+\()\b")

# A line that echoes a request (its prompt or output text) is never evidence of anything.
_REQUEST_ECHO = re.compile(r"GenerateReqInput\(|ChatCompletionRequest\(|CompletionRequest\(|Receive: obj="
                           r"|Finish: obj=|\"(?:text|prompt|content)\"\s*:|'(?:text|prompt|content)'\s*:|\bprompt=")

# Cheap first pass: a line is parsed only if it holds one of these literal anchors (found with
# str.find, which runs at memory speed; a regex alternation would be 10x slower on a 100 MB log).
# Error lines: every signature and fatal pattern above matches a line holding one of ERROR_ANCHORS
# (tests/unit/test_triage.py checks that for the examples). Milestones and frame clues are only
# looked for while they can still change the phase, so a long serving stretch costs few scans.
ERROR_ANCHORS = ("rror", "xcept", "Killed", "exit code", "in use", "EADDRINUSE", "NCCL WARN", "igquit", "IGQUIT",
                 "is dead", "crashed", "atchdog", "terminate", "upport", "emory", "illegal", "ssert")
MILESTONE_ANCHORS: tuple[tuple[str, ...], ...] = (
    ("ServerArgs",),
    ("Init torch distributed",),
    ("Load weight", "Loading safetensors"),
    ("Load weight", "KV Cache", "Memory pool"),
    ("CUDA graph", "Capture cuda graph", "Capturing batches"),
    ("CUDA graph", "Capture cuda graph", "max_total_num_tokens", "Uvicorn running", "Application startup"),
    (READY_LINE,),
)
CLUE_ANCHORS = ('File "', "Capturing batches", "Loading safetensors", "KV Cache", "server socket", "ServerArgs")
_FATAL = [re.compile(p) for p in FATAL_PATTERNS]


def _hint(category: str, phase: str) -> str | None:
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


HINTS = {
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


@dataclass(frozen=True)
class Verdict:
    verdict: str  # ready | crash | incomplete
    category: str
    key_line: str | None
    phase: str
    hint: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def clean_line(raw: str) -> str:
    """SGLang's message alone: tqdm redraws collapsed, colours and container/rank prefixes removed."""
    line = raw.rstrip("\n").rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _PREFIX.sub("", line.lstrip(), count=1).strip()


class Triage:
    """Feed text chunks or lines in order; ask for the verdict at any time."""

    def __init__(self) -> None:
        self._milestone = -1
        self._clue: str | None = None
        self.ready = False
        self.fatal_after_ready = False
        self.fatal_seen = False
        self.best: tuple[tuple[int, int], str, str, str] | None = None  # rank, category, line, phase
        self._partial = ""

    @property
    def phase(self) -> str:
        if self._milestone >= 0:
            return MILESTONES[self._milestone][0]
        return self._clue or "unknown"

    # ------------------------------------------------------------------ input

    def _anchors(self) -> tuple[str, ...]:
        anchors = set(ERROR_ANCHORS)
        for rank in range(self._milestone + 1, len(MILESTONE_ANCHORS)):
            anchors.update(MILESTONE_ANCHORS[rank])
        if self._milestone < 0:  # frame clues matter only while no milestone has placed the phase
            anchors.update(CLUE_ANCHORS)
        return tuple(anchors)

    def feed_text(self, text: str) -> None:
        """A chunk of the log (any size, may end mid-line); only lines holding an anchor are parsed."""
        text = self._partial + text
        cut = text.rfind("\n")
        if cut < 0:
            self._partial = text[-65536:]
            return
        self._partial = text[cut + 1:][-65536:]
        body = text[: cut + 1]
        starts: set[int] = set()
        for anchor in self._anchors():
            i = body.find(anchor)
            while i >= 0:
                line_start = body.rfind("\n", 0, i) + 1
                starts.add(line_start)
                i = body.find(anchor, body.find("\n", i) + 1)  # body ends with "\n": always found
        for line_start in sorted(starts):
            self._line(body[line_start:body.find("\n", line_start)])

    def feed(self, raw_line: str) -> None:
        if any(a in raw_line for a in self._anchors()):
            self._line(raw_line)

    def finish(self) -> Triage:
        if self._partial:
            self.feed(self._partial)
            self._partial = ""
        return self

    def _line(self, raw: str) -> None:
        if "\r" in raw.rstrip("\r"):  # a tqdm bar redrawn in place: every redraw is a line of its own
            for segment in raw.split("\r"):
                self._message(clean_line(segment))
        else:
            self._message(clean_line(raw))

    def _message(self, line: str) -> None:
        if not line or _REQUEST_ECHO.search(line):
            return
        for rank in range(self._milestone + 1, len(MILESTONES)):
            if MILESTONES[rank][1].search(line):
                self._milestone = rank
                if MILESTONES[rank][0] == "serving":
                    self.ready = True
        for phase, pat in PHASE_CLUES:
            if pat.search(line):
                self._clue = phase
        if any(p.search(line) for p in _FATAL):
            self.fatal_seen = True
            if self.ready:
                self.fatal_after_ready = True
        if _CODE_LINE.match(line):
            return
        for sig in SIGNATURES:
            if sig.pattern.search(line):
                if self.best is None or sig.rank < self.best[0]:
                    self.best = (sig.rank, sig.category, line[:KEY_LINE_MAX], self.phase)
                return  # signatures are sorted by rank: the first match is this line's best

    # ------------------------------------------------------------------ output

    def verdict(self, exit_code: int | None = None) -> Verdict:
        died = exit_code is not None and exit_code != 0
        strong = self.best is not None and self.best[0][0] < BARE_RANK  # a named cause, not a bare exception
        if self.ready and not died and not self.fatal_after_ready:
            # A healthy server may log handled exceptions; only its death or a fatal line undoes ready.
            return Verdict("ready", "ready", READY_LINE, "serving", None)
        crashed = died or self.fatal_seen or (strong and not self.ready)
        if not crashed:
            hint = HINTS["incomplete"]
            if exit_code == 0:
                hint = "the server exited with code 0 before it was ready"
            return Verdict("incomplete", "incomplete", None, self.phase, hint)
        if self.best is None:
            # 137 after SGLang's own sigquit cascade means a child failed without a readable error.
            category = "killed" if exit_code in (137, -9) and not self.fatal_seen else "unknown"
            return Verdict("crash", category, None, self.phase, HINTS[category])
        _, category, key_line, phase = self.best
        if phase == "unknown":
            phase = self.phase
        return Verdict("crash", category, key_line, phase, _hint(category, phase))


def triage_text(text: str, exit_code: int | None = None) -> Verdict:
    t = Triage()
    t.feed_text(text if text.endswith("\n") else text + "\n")
    return t.verdict(exit_code)


def iter_file_chunks(path: Path, chunk: int = 4 << 20) -> Iterator[str]:
    with open(path, "rb") as f:
        while True:
            data = f.read(chunk)
            if not data:
                return
            yield data.decode("utf-8", errors="replace")


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
    """Streamed: 4 MiB at a time, so a 100 MB log costs 4 MiB of memory."""
    t = Triage()
    for chunk in iter_file_chunks(path):
        t.feed_text(chunk)
    return t.finish().verdict(exit_code)
