"""Crash triage: read an SGLang server log like an experienced engineer (pure, streaming).

Given the log (text, lines or a file) and optionally the exit code, return a `Verdict`:

* `verdict`  — ready | crash | incomplete
* `category` — one of CATEGORIES (fixed: records, the agent and the comparison table use it)
* `key_line` — the single most telling line: the root cause, never a bare `Traceback` or the
  `Received sigquit` that merely follows it
* `phase`    — where startup was: args, distributed-init, load-weights, kv-cache, cuda-graph-capture,
  warmup, serving (or unknown when a cut log gives no clue)
* `hint`     — one actionable sentence

How it reads a log (logtext.py): every line is stripped of what real logs wrap around SGLang's messages (docker
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
from dataclasses import dataclass
from pathlib import Path

from ..safetext import display_line
from .hints import HINTS
from .hints import crash_hint as _hint  # Triage.verdict's name for it
from .hints import hang_hint as hang_hint
from .logtext import clean_line, iter_file_chunks, line_starts
from .logtext import iter_file_lines as iter_file_lines  # where callers of the triage have found it
from .signatures import (
    BARE_RANK,
    EXCEPTION_LINE,
    FATAL_PATTERNS,
    READY_LINE,
    SIGNATURE_TABLE,
)
from .signatures import CATEGORIES as CATEGORIES
from .signatures import LINE_PREFIX_PATTERN as LINE_PREFIX_PATTERN
from .signatures import PHASES as PHASES
from .signatures import READY_PATTERN as READY_PATTERN
from .verdict import Verdict as Verdict  # the log reader's answer, which records keep as is


@dataclass(frozen=True)
class Signature:
    category: str
    pattern: re.Pattern[str]
    rank: tuple[int, int]  # (the category's rank, the pattern's place in it): lower wins


def _sig(category: str, rank: int, *patterns: str) -> list[Signature]:
    """Within a category, earlier patterns are more telling (the static_assert line beats ninja's exit)."""
    return [Signature(category, re.compile(p), (rank, i)) for i, p in enumerate(patterns)]


# A key line is kept to this many characters (a tensor printed on one line stays out of the record).
KEY_LINE_MAX = 500

SIGNATURES: tuple[Signature, ...] = tuple(sorted(
    (sig for category, rank, patterns in SIGNATURE_TABLE for sig in _sig(category, rank, *patterns)),
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
        starts = line_starts(body, [a for a in anchors if a not in ERROR_ANCHORS])
        errors = line_starts(body, ERROR_ANCHORS)
        if errors:
            tail, self._tail = self._tail, ""
            for line_start in sorted(line_starts(tail, CONTEXT_ANCHORS)):
                self._line(tail[line_start:tail.find("\n", line_start)])
            starts |= errors | line_starts(body, CONTEXT_ANCHORS)
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
        # The line is shown (terminal, record, page): a host's control sequences in it are shown escaped.
        return Verdict("crash", category, display_line(key_line), phase, _hint(category, phase, key_line))


def triage_text(text: str, exit_code: int | None = None) -> Verdict:
    t = Triage()
    t.feed_text(text if text.endswith("\n") else text + "\n")
    return t.verdict(exit_code)


def triage_file(path: Path, exit_code: int | None = None) -> Verdict:
    """Streamed: 4 MiB at a time, so a 100 MB log costs 4 MiB of memory."""
    t = Triage()
    for chunk in iter_file_chunks(path):
        t.feed_text(chunk)
    return t.finish().verdict(exit_code)
