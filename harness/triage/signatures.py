"""What SGLang's log lines mean, as data (pure): the categories and phases a verdict names, the prefixes real
logs put before a message, the lines that mean a server is going down, and the ranked signature table that
harness.triage.classify reads a log with. The agent receives READY_PATTERN, LINE_PREFIX_PATTERN, PREFILL_PATTERN and
FATAL_PATTERNS in its spec (harness.experiments.spec), so both halves read lines alike."""

from __future__ import annotations

import re

CATEGORIES = (
    "ready", "oom", "illegal-memory-access", "jit-compile-error", "build-tool-missing", "unsupported-arch",
    "nccl-error", "import-error", "port-in-use", "config-error", "python-exception", "warmup-failed", "killed",
    "incomplete", "unknown",
)
PHASES = ("args", "distributed-init", "load-weights", "kv-cache", "cuda-graph-capture", "warmup", "serving")

READY_LINE = "The server is fired up and ready to roll!"
READY_PATTERN = re.escape(READY_LINE)
# The scheduler's line for each prefill batch (scheduler.log_prefill_stats): tokens computed and tokens the
# prefix cache had, e.g. "Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 45, token usage: 0.00, …"
PREFILL_PATTERN = r"Prefill batch[,.].*?#new-token: (?P<new>\d+), #cached-token: (?P<cached>\d+)"

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

# Categories ranked from here on name no cause: a bare exception, a bare kill. While the server is
# alive, only a line ranked below this makes it a crash.
BARE_RANK = 90
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

# The signatures by category: (category, the category's rank, its patterns). A lower rank wins; within a
# category, earlier patterns are more telling (the static_assert line beats ninja's exit). Root causes rank
# above their consequences; harness.triage.classify compiles this table into SIGNATURES.
SIGNATURE_TABLE: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("unsupported-arch", 10, (
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
        r"(?=.*(?i:support|requir|\bonly\b|\bneeds?\b|expect|compatib|\bmust\b))(?=.*" + GPU_GENERATION + ")",
    )),
    # A JIT build that cannot run at all: a tool it needs is not installed (or not on PATH). Ranked above the
    # build's own failure messages, which are its consequences.
    ("build-tool-missing", 15, (
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
        r"CUDA_HOME (?:environment variable )?is not set",
    )),
    ("jit-compile-error", 20, (
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
        r"(?:JIT|jit) compil\w+ (?:failed|error)",
    )),
    ("oom", 30, (
        r"CUDA out of memory",
        r"OutOfMemoryError",
        r"CUDA error: out of memory",
        r"cudaErrorMemoryAllocation",
        r"\bout of memory\b",
        r"Not enough memory\. Please try to increase --mem-fraction-static",
    )),
    ("illegal-memory-access", 40, (
        r"an illegal memory access was encountered",
        r"illegal memory access",
        r"misaligned address",
        r"an illegal instruction was encountered",
        r"device-side assert triggered",
        r"unspecified launch failure",
    )),
    ("import-error", 50, (
        r"undefined symbol",
        r"ModuleNotFoundError",
        r"ImportError",
        r"cannot import name",
    )),
    ("port-in-use", 55, (
        r"[Aa]ddress already in use",
        r"EADDRINUSE",
        r"Port is already in use",
        r"is not available in \d+ seconds",
    )),
    ("nccl-error", 60, (
        r"NCCL [Ee]rror",
        r"nccl(?:Unhandled\w*|System|Internal|Invalid\w*|Remote)Error",
        r"Dist(?:Backend|Network|Store)Error",
        r"ProcessGroupNCCL.*(?:error|Error|timed out|[Tt]imeout)",
        r"Watchdog caught collective operation timeout",
        r"NCCL WARN",
    )),
    ("config-error", 70, (
        r"argument --[\w-]+: invalid choice",
        r"unrecognized arguments:",
        r"error: the following arguments are required",
        r"does not (?:recognize|support) this architecture",
        r"has model type `[^`]+` but Transformers does not recognize",
        r"Unrecognized configuration class",
        r"^(?:\w+\.)*(?:ValueError|TypeError|AssertionError|OSError|FileNotFoundError): .*"
        r"(?:backend|kv.cache.dtype|page.size|not supported|must be|config|model_type|model path|"
        r"does not appear to have|is not a (?:local folder|valid))",
    )),
    ("warmup-failed", 80, (r"Initialization failed\. warmup error",)),
    ("python-exception", BARE_RANK, (EXCEPTION_LINE,)),
    ("killed", 85, (r"died during initialization \(exit code: -9\)", r"exit code:? -9\b")),
    # A bare "Killed" is usually the launcher killing itself after a child failed: a consequence.
    ("killed", 95, (r"^Killed$", r"signal 9\b|SIGKILL")),
    # The launcher's sigquit notice says only that a child failed: the key line only when the child's own
    # error is nowhere in the log.
    ("unknown", 97, (SIGQUIT_NOTICE, SIGQUIT_RECEIVED)),
)
