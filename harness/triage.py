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
Signatures are ranked: root causes (an unsupported arch, a missing build tool, a failed JIT build, OOM, an
illegal memory access) beat their consequences (NCCL aborts, generic exceptions, the launcher's sigquit
notice, a kill), and within a category the most specific line wins. Signatures say what a message means
(a compiler's `fatal error: <header>: …` in any locale, a `FileNotFoundError` naming a build tool, a GPU
generation named as a requirement), not one log's words. A traceback is read as a structure: a bare
exception takes the category its frames name (raised inside NCCL/torch.distributed setup: nccl-error), one
whose first frame is the top of a process (`_run_module_as_main`, a script's `<module>`) was caught by
nothing and ended that process, and one raised inside Python's logging package is logging's own. After a
stop asked for (`SIGTERM received`) the shutdown's lines are not a crash. Lines that echo a request's text
are never evidence. Memory is bounded whatever the log size: a cheap keyword prefilter runs over whole
chunks and only candidate lines are parsed; the state is the best match, the phase and a few flags.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CATEGORIES = (
    "ready", "oom", "illegal-memory-access", "jit-compile-error", "build-tool-missing", "unsupported-arch",
    "nccl-error", "import-error", "port-in-use", "config-error", "python-exception", "warmup-failed", "killed",
    "incomplete", "unknown",
)
PHASES = ("args", "distributed-init", "load-weights", "kv-cache", "cuda-graph-capture", "warmup", "serving")

READY_LINE = "The server is fired up and ready to roll!"
READY_PATTERN = re.escape(READY_LINE)

# What real logs put in front of SGLang's own message; removed repeatedly (a docker timestamp can
# precede an SGLang prefix). The agent receives this pattern in its spec, so both read lines alike.
LINE_PREFIX_PATTERN = (
    r"^(?:"
    # docker --timestamps (2025-01-01T10:00:00.123Z), or a bare timestamp that a wrapper's logger put in front,
    # with Python logging's " - name - LEVEL - " or a "|" or "-" after it
    r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    r"(?:(?:\s+-\s+[\w.-]{1,40})?\s+-\s+(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-|\s+[|-])?\s+"
    r"|\((?:[\w-]+)\s+pid=\d+(?:,\s*ip=[\d.:]+)?\)\s*"  # Ray: (EngineCore pid=123)
    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s[^\]]{0,40})?\]\s*"  # [2025-01-01 10:00:00 TP0]
    r"|\[rank\d+\]:\s?"  # torch.distributed: [rank0]:
    # vLLM-style "ERROR 03-05 09:56:09 [multiproc_executor.py:880] "
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[\w./-]+:\d+\]\s"
    r"|[\w.-]{1,40}\s{0,8}\|\s"  # docker compose "sglang-1  | ", a logger's "ERROR | name | "
    r")+"
)
_PREFIX = re.compile(LINE_PREFIX_PATTERN)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ray's log deduplication appends this to a line that several workers printed.
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")

# The launcher's notice that a child failed ("Received sigquit from a child process. It usually means the
# child failed."): old builds spelled it "proces", users retype it, and a logging failure in the signal
# handler prints it as "Message: 'Received sigquit …'". So: the words, any case, after at most two words.
SIGQUIT_NOTICE = r"(?i)^\W*(?:\w+\W+){0,2}?rec\w{0,3}ved\W+sig\W?quit\W+from\W+(?:an?|the|one)\W+ch\w{2,3}\b"
# The same once the server runs: "SIGQUIT received. signum=…, frame=…. It usually means one child failed."
SIGQUIT_RECEIVED = r"(?i)^\W*(?:\w+\W+){0,2}?sig\W?quit\W+received\b"

# Lines that mean "this server is going down" when a live process prints them; matched against the
# message after the prefix, so a request quoting these words is not mistaken for them. The agent
# watches for these to stop waiting early (a fatal line while alive = crash after a grace period).
FATAL_PATTERNS: tuple[str, ...] = (
    r"^Scheduler hit an exception",
    SIGQUIT_NOTICE,
    SIGQUIT_RECEIVED,
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
# A Python exception line: "RuntimeError: …", "torch.distributed.DistBackendError: …", a bare "KeyboardInterrupt".
EXCEPTION_LINE = r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt)(?::|$)"


# What the message words mean, shared by several signatures below.
# A GPU generation or compute capability named in words: Blackwell, Hopper (SM90), sm_100a, SM>=80,
# compute capability 12.0 (a path component such as .../sm100/... is not one).
GPU_GENERATION = (r"(?:\b(?:Blackwell|Hopper|Ampere|Ada|Lovelace|Turing|Volta|Pascal)\b"
                  r"|(?<![/\w])[Ss][Mm][_ ]?\d{2,3}[a-z]?\b|\b[Ss][Mm]\s?[<>=]=?\s?\d{2,3}\b"
                  r"|\b[Cc]ompute[_ ][Cc]apabilit)")
# The tools a JIT build runs: ninja, the CUDA toolchain, a C/C++ compiler (with a target prefix or a
# version suffix: x86_64-linux-gnu-g++-12), cmake/make, the linker.
BUILD_TOOL = (r"(?:ninja|nvcc|ptxas|nvlink|fatbinary|cicc|hipcc|cmake|make|ld"
              r"|(?:[\w.]+-)*(?:g\+\+|gcc|c\+\+|cc|clang\+\+|clang)(?:-\d+(?:\.\d+)*)?)")
# A C/C++/CUDA source or header file name.
_SOURCE_FILE = r"[^\s:'\"]+\.(?:h|hh|hpp|hxx|cuh|inc|inl|tcc|def|c|cc|cpp|cxx|cu)"

SIGNATURES: tuple[Signature, ...] = tuple(sorted(
    _sig("unsupported-arch", 10,
         r"Unsupported architecture",
         r"is only supported on (?:Blackwell|Hopper|SM\s?\d+)",
         r"only supported on Hopper \(SM90\)",
         r"no kernel image is available for execution",
         r"requires SM\s?>=\s?\d+ and SM\s?<=\s?\d+",
         r"requires an SM\d+ \(\w+\) device",
         r"(?:not supported|unsupported) (?:on|for) (?:this|the current) (?:GPU|device|architecture)",
         r"compute capability \d+\.\d+ (?:is )?not supported",
         # Any exception or assertion that names a GPU generation as what is supported, required or expected
         # ("AssertionError: … only supported on Blackwell GPUs", "… requires SM90", "expected sm90 or
         # sm100", "Unsupported compute capability: 12.0"): the cause is the GPU, not a flag.
         r"^(?=(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b|.*\b[Aa]ssert)"
         r"(?=.*(?i:support|requir|\bonly\b|\bneeds?\b|expect|compatib|\bmust\b))(?=.*" + GPU_GENERATION + ")")
    # A JIT build that cannot run at all: a tool it needs is not installed (or not on PATH). Ranked above the
    # build's own failure messages, which are its consequences.
    + _sig("build-tool-missing", 15,
           # Python could not start the tool (any locale's errno text): [Errno 2] … 'ninja' / '/…/bin/nvcc'
           r"(?:FileNotFoundError|OSError): \[Errno 2\][^']*'(?:[^']*/)?" + BUILD_TOOL + r"'",
           # torch.utils.cpp_extension: "Ninja is required to load C++ extensions"
           r"\b(?:[Nn]inja|nvcc|[Cc][Mm]ake|C\+\+ compiler)\b (?:is|are) (?:required|needed) to "
           r"(?:load|build|compile)",
           # the shell ninja runs a rule with: "/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found"
           r"\bsh: (?:line )?\d+: (?:\S*/)?" + BUILD_TOOL + r": (?:command )?not found",
           # FlashInfer ("Could not find nvcc and default cuda_home=… doesn't exist"), triton ("Failed to
           # find C compiler"), "nvcc not found"
           r"(?i:(?:could not|failed to|unable to|cannot) find (?:the |a |an )?(?:nvcc|ninja|cmake|c\+\+ compiler"
           r"|c compiler|cuda compiler|host compiler))|\b(?:nvcc|ninja) (?:was )?not found\b",
           r"CUDA_HOME (?:environment variable )?is not set")
    + _sig("jit-compile-error", 20,
           r"error: static assertion failed",
           r"static_assert\(.*\) failed",
           # The compiler cannot open an included file: gcc "fatal error: cuda_fp8.h: <No such file or
           # directory, in the locale's words>", clang "fatal error: 'cuda_fp8.h' file not found", nvcc's
           # front end "catastrophic error: cannot open source file "cuda_fp8.h""
           r"fatal error: (?:'" + _SOURCE_FILE + r"' file not found|" + _SOURCE_FILE + r"\s?:\s*\S)",
           r"catastrophic error: cannot open source file",
           # nvcc's front end: "/x/mla.cuh(511): error: …", "mma_sm90.hpp(3064): error: …"
           r"\berror\b.*\.(?:cuh?|hpp|hh|hxx|h|inl)\(\d+\)|\.(?:cuh?|hpp|hh|hxx|h|inl|cpp|cc|cxx)\(\d+\): error",
           # gcc/clang diagnostics: "/x/mla.cuh:511:7: error: …"
           _SOURCE_FILE + r":\d+(?::\d+)?: (?:fatal )?error: ",
           r"nvcc fatal",
           r"Error building extension",
           r"Ninja build failed",
           r"CalledProcessError: Command '\['ninja'",
           r"ninja: build stopped",
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
           r"NCCL [Ee]rror",
           r"nccl(?:Unhandled\w*|System|Internal|Invalid\w*|Remote)Error",
           r"Dist(?:Backend|Network|Store)Error",
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
    + _sig("python-exception", BARE_RANK, EXCEPTION_LINE)
    + _sig("killed", 85, r"died during initialization \(exit code: -9\)", r"exit code:? -9\b")
    # A bare "Killed" is usually the launcher killing itself after a child failed: a consequence.
    + _sig("killed", 95, r"^Killed$", r"signal 9\b|SIGKILL")
    # The launcher's sigquit notice says only that a child failed: the key line only when the child's own
    # error is nowhere in the log.
    + _sig("unknown", 97, SIGQUIT_NOTICE, SIGQUIT_RECEIVED),
    key=lambda s: s.rank))

# An exception raised inside Python's logging package is logging failing to write a record (a reentrant write
# to stderr from a signal handler, a closed pipe; printed under "--- Logging error ---", the record after it as
# "Message: '…'"): logging's trouble, not the server's, so it is no evidence. (Its category is never used.)
LOGGING_FAILURE = Signature("python-exception", re.compile(r'[/\\]logging[/\\]\w+\.py", line \d+, in \w+$'),
                            (BARE_RANK, 0))
# A bare exception takes its category from the frames of its traceback when they name the cause's layer:
# one raised while torch.distributed/NCCL sets up or talks between ranks (init_torch_distributed's
# init_process_group, initialize_model_parallel, PyNccl's ncclCommInitRank, a TCPStore rendezvous) is an
# NCCL/distributed failure, whatever its own words; ranked after that category's named patterns. The innermost
# frame that names one of these decides.
FRAME_CAUSES: tuple[Signature, ...] = (
    Signature("nccl-error", re.compile(
        r"[/\\](?:torch|sglang[/\\]srt|vllm)[/\\]distributed[/\\]|pynccl|ProcessGroupNCCL"
        r"|, in (?:init_distributed_environment|initialize_model_parallel|init_model_parallel_group"
        r"|init_process_group|ncclCommInitRank|rendezvous)$"), (60, 50)),
    LOGGING_FAILURE,
)

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

# The structure of a Python traceback, read line by line.
_TRACEBACK_HEADER = re.compile(r"Traceback \(most recent call last\):$")
_FRAME = re.compile(r'^File "[^"]*", line \d+, in \S+$')
# A traceback that starts here was not caught by anything: it ends the process that prints it (the main
# process run by `python -m`, a console script, or a multiprocessing child's bootstrap).
_TOP_LEVEL_FRAME = re.compile(r', in (?:<module>|_run_module_as_main)$|multiprocessing[/\\]process\.py", line \d+, '
                              r'in _bootstrap$')
_EXCEPTION = re.compile(EXCEPTION_LINE)
# A stop asked for from outside (the harness's SIGTERM: "SIGTERM received. … Draining requests and shutting
# down..."): what the server prints while it goes down — a child "crashed with exit code -15", the SIGQUIT
# cleanup, SGLang killing its own tree — is not a crash.
_SHUTDOWN = re.compile(r"^(?:SIGTERM|SIGINT) received\b|^Received (?:SIGTERM|SIGINT)\b")

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
# Every extra anchor costs one more pass over the text, so one anchor serves several messages where it can
# ("ille": Killed and illegal; "SIG": SIGQUIT/SIGTERM/SIGINT received; "exit code": a subprocess "crashed with
# exit code"), and a longer one is used where it is as good (a pass for a longer string is faster).
ERROR_ANCHORS = ("rror", "xception", "ille", "exit code", "already in use", "EADDRINUSE", "NCCL WARN", "igquit", "SIG",
                 "scheduler is dead", "atchdog", "terminate", "supported", "emory", "ssert", "not found")
# Lines that only matter beside an error: a traceback's header and frames (they say where the exception that
# ends them was raised, and whether anything caught it), and a JIT build's own lines that name no error word
# ("nvcc fatal : …", "ninja: build stopped", "compilation terminated"). Looked for only in a chunk where an
# error anchor was found, and in the end of the text before it (up to CONTEXT_TAIL characters).
CONTEXT_ANCHORS = ("most recent call", 'File "', "nvcc fatal", "build stopped", "ompil")
CONTEXT_TAIL = 1 << 18
# (One anchor serves several milestones where it can: "Load" for "Load weight" and "Loading safetensors",
# "Captur" for "Capture cuda graph" and "Capturing batches"; "Memory pool end" holds the error anchor "emory".)
MILESTONE_ANCHORS: tuple[tuple[str, ...], ...] = (
    ("ServerArgs",),
    ("Init torch distributed",),
    ("Load",),
    ("Load", "KV Cache"),
    ("CUDA graph", "Captur"),
    ("CUDA graph", "Captur", "max_total_num_tokens", "Uvicorn running", "Application startup"),
    (READY_LINE,),
)
CLUE_ANCHORS = ('File "', "Captur", "Load", "KV Cache", "server socket", "ServerArgs")
_FATAL = [re.compile(p) for p in FATAL_PATTERNS]


def _line_starts(body: str, anchors: Iterable[str]) -> set[int]:
    """Where the lines of `body` (which ends with a newline) that hold any of `anchors` start."""
    starts: set[int] = set()
    for anchor in anchors:
        i = body.find(anchor)
        while i >= 0:
            starts.add(body.rfind("\n", 0, i) + 1)
            i = body.find(anchor, body.find("\n", i) + 1)  # body ends with "\n": always found
    return starts


def _hint(category: str, phase: str, key_line: str | None = None) -> str | None:
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
    see = ("stack-dump.txt shows where each process waits" if stack_dump
           else "no stack dump was taken (install py-spy on the host to get one)")
    return f"the server stopped making progress {where}; {see}"


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
    if "[repeated " in line:
        line = _RAY_REPEAT.sub("", line)
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
        self.shutdown = False  # a stop was asked for (SIGTERM, SIGINT): fatal lines after it are its consequences
        self._partial = ""
        self._tail = ""  # the end of the text read since context lines were last looked for
        # The traceback being read: did its first frame show that nothing catches it (None: that frame is still to
        # come), and which cause (a layer such as NCCL, or logging itself) its frames name.
        self._uncaught: bool | None = False
        self._frame_cause: Signature | None = None

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
        """A chunk of the log (any size, may end mid-line); only lines holding an anchor are parsed.

        Context lines (a traceback's header and frames, a build's own lines) matter only beside an error, so
        they are looked for only in a chunk where some error anchor was found, and in the end of the text before
        it (a traceback can straddle two chunks): a long healthy stretch costs no extra pass.
        """
        text = self._partial + text
        cut = text.rfind("\n")
        if cut < 0:
            self._partial = text[-65536:]
            return
        self._partial = text[cut + 1:][-65536:]
        body = text[: cut + 1]
        anchors = self._anchors()
        starts = _line_starts(body, [a for a in anchors if a not in ERROR_ANCHORS])
        errors = _line_starts(body, ERROR_ANCHORS)
        if errors:
            tail, self._tail = self._tail, ""
            for line_start in sorted(_line_starts(tail, CONTEXT_ANCHORS)):
                self._line(tail[line_start:tail.find("\n", line_start)])
            starts |= errors | _line_starts(body, CONTEXT_ANCHORS)
        else:  # keep the end of the text read since the last look (line-aligned: bodies end with a newline)
            tail = body if len(body) >= CONTEXT_TAIL else self._tail + body
            if len(tail) > CONTEXT_TAIL:
                tail = tail[-CONTEXT_TAIL:]
                tail = tail[tail.find("\n") + 1:]
            self._tail = tail
        for line_start in sorted(starts):
            self._line(body[line_start:body.find("\n", line_start)])

    def feed(self, raw_line: str) -> None:
        if any(a in raw_line for a in self._anchors() + CONTEXT_ANCHORS):
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
        if _TRACEBACK_HEADER.search(line):
            self._uncaught, self._frame_cause = None, None
        if _FRAME.match(line):  # a frame is never evidence itself; it says where and whether anything catches
            if self._uncaught is None:  # the traceback's first frame: the top of the stack that raised
                self._uncaught = bool(_TOP_LEVEL_FRAME.search(line))
            for cause in FRAME_CAUSES:
                if cause.pattern.search(line):
                    self._frame_cause = cause
            return
        if _SHUTDOWN.search(line):
            self.shutdown = True
        fatal = any(p.search(line) for p in _FATAL)
        frame_cause = self._frame_cause
        if _EXCEPTION.match(line):  # the exception line ends its traceback: what the frames said is used now
            self._frame_cause = None
            if frame_cause is LOGGING_FAILURE:
                return
            fatal = fatal or self._uncaught is True  # nothing caught it: that process is gone
        if fatal and not self.shutdown:
            self.fatal_seen = True
            if self.ready:
                self.fatal_after_ready = True
        if _CODE_LINE.match(line):
            return
        for sig in SIGNATURES:
            if sig.pattern.search(line):
                if sig.rank[0] == BARE_RANK and frame_cause is not None:
                    sig = frame_cause  # a bare exception, raised where its frames name the cause
                if self.best is None or sig.rank < self.best[0]:
                    self.best = (sig.rank, sig.category, line[:KEY_LINE_MAX], self.phase)
                return  # signatures are sorted by rank: the first match is this line's best

    # ------------------------------------------------------------------ output

    def verdict(self, exit_code: int | None = None) -> Verdict:
        # A server that was asked to stop exits non-zero too (SGLang's cleanup SIGKILLs its own tree): not a death.
        died = exit_code is not None and exit_code != 0 and not self.shutdown
        strong = self.best is not None and self.best[0][0] < BARE_RANK  # a named cause, not a bare exception
        if self.ready and not died and not self.fatal_after_ready:
            # A healthy server may log handled exceptions; only its death or a fatal line undoes ready.
            return Verdict("ready", "ready", READY_LINE, "serving", None)
        crashed = died or self.fatal_seen or (strong and not self.ready)
        if not crashed:
            hint = HINTS["incomplete"]
            if self.shutdown:
                hint = "the server was asked to stop (SIGTERM or Ctrl-C) before it was ready"
            elif exit_code == 0:
                hint = "the server exited with code 0 before it was ready"
            return Verdict("incomplete", "incomplete", None, self.phase, hint)
        if self.best is None:
            # 137 after SGLang's own sigquit cascade means a child failed without a readable error.
            category = "killed" if exit_code in (137, -9) and not self.fatal_seen else "unknown"
            return Verdict("crash", category, None, self.phase, HINTS[category])
        _, category, key_line, phase = self.best
        if phase == "unknown":
            phase = self.phase
        return Verdict("crash", category, key_line, phase, _hint(category, phase, key_line))


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
