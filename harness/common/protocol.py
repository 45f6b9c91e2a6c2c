"""The controller–agent protocol: one versioned module that both sides import.

Standard library only: it ships inside the agent's zipapp and runs under the host's Python >= 3.8.

    controller → agent   one `Spec` (a JSON line on stdin), then `{"cmd": "ping"}` / `{"cmd": "abort"}` lines
    agent → controller   JSON-lines events (`Hello` first, `Final` last), one class per kind below

Both sides check `PROTOCOL`: a spec or an event of another version, an unknown event kind or an unknown
key is a `ProtocolError`, never silently dropped. `encode`/`decode` are the only ways across the link.
The final report's typed parts (and `Status`) are in outcome.py, the JSON round trip (and `PROTOCOL`) in
wire.py; this module names them all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Dict, Optional, Union

from .outcome import (
    JOURNAL_VERSION,
    BenchFacts,
    CaseFacts,
    ChangedPaths,
    GcEntry,
    GcReport,
    GcRequest,
    GpuClocks,
    GpuInfo,
    GpuState,
    HistoryReport,
    HistoryRequest,
    Journal,
    JournalServer,
    LockHolder,
    LockState,
    PatchFacts,
    PrefillTokens,
    PreflightFacts,
    RecoveryReport,
    RepoStatus,
    RevertReport,
    ServerFacts,
    StackFacts,
    Status,
    StopReport,
)
from .wire import PROTOCOL, Message, Nested, ProtocolError

__all__ = ["JOURNAL_VERSION", "PROTOCOL", "AnswersSpec", "ArgvItem", "BenchCase", "BenchFacts", "CaseFacts",
           "ChangedPaths", "Cooldown", "Event", "EVENTS", "FileEntry", "Final", "GcEntry", "GcReport", "GcRequest",
           "GpuClocks", "GpuInfo", "GpuState", "HistoryReport", "HistoryRequest", "Journal", "JournalServer",
           "LockHolder", "LockState", "Message", "Mode", "PatchEntry", "PatchFacts", "PORT_SLOT", "PrefillTokens",
           "SEED_SLOT", "PreflightFacts", "ProfileSpec", "ProtocolError", "RecoveryReport", "RepoStatus",
           "Requirements", "RevertReport", "ServerFacts", "ServerSpec", "Spec", "StackFacts", "Status", "StopReport",
           "Timeouts", "decode", "encode"]


class Mode(str, Enum):
    ATTEMPT = "attempt"
    APPLY_REVERT = "apply-revert"  # a dry run of the patches: apply, compile, revert
    STATUS = "status"
    RECOVER = "recover"
    GC = "gc"  # `harness gc`: the work dir's old attempt folders
    HISTORY = "history"  # `harness bisect`: the commits from good to bad, and the tree's state


# Argv elements the agent fills in on the host: the port chosen there (`port: auto`), a bench run's prompt seed.
# A dict can never come out of a YAML string, so it cannot be forged by one.
PORT_SLOT, SEED_SLOT = {"slot": "port"}, {"slot": "seed"}
ArgvItem = Union[str, Dict[str, str]]


# ============================================================================ the spec


@dataclass
class ServerSpec(Message):
    argv: list[ArgvItem]
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: Union[int, str] = 30000  # or "auto": the agent picks a free port


@dataclass
class BenchCase(Message):
    name: str
    argv: list[ArgvItem]
    repeats: int = 1
    # The discarded run before the measured repeats: the case's own arguments with one wave of prompts (every
    # prompt of a "hit" case, which it primes); None: no warm-up. Only --num-prompts differs from `argv`.
    warmup_argv: Optional[list[ArgvItem]] = None
    seeds: Optional[list[int]] = None  # what fills SEED_SLOT: the measured repeats' seeds in order; the warm-up's
    warmup_seed: Optional[int] = None
    prefix_cache: Optional[str] = None  # "cold" | "hit" (the YAML's `prefix_cache`), kept in the case's facts

    def argv_for(self, warmup: bool) -> list[ArgvItem]:
        """The arguments of one run: the warm-up's, or the case's."""
        return self.warmup_argv if warmup and self.warmup_argv is not None else self.argv


@dataclass
class Cooldown(Message):
    """A wait before every benchmark run but the attempt's first: `seconds`, or with `until_settled` until the
    GPUs' SM clock and temperature settle (the last `window` samples, `interval_s` apart, within the
    tolerances), never longer than `max_s`."""

    seconds: float = 0.0
    until_settled: bool = False
    max_s: float = 60.0
    interval_s: float = 1.0
    window: int = 5
    sm_tolerance_mhz: float = 15.0
    temp_tolerance_c: float = 1.0


@dataclass
class ProfileSpec(Message):
    steps: int
    activities: list[str]
    timeout: float  # the whole profile stage
    case: str
    argv: list[ArgvItem]
    with_stack: bool = False
    record_shapes: bool = False


@dataclass
class AnswersSpec(Message):
    """The answer check: a batched greedy POST /generate of these prompts before the bench cases (`passes` times),
    its output ids and top logprobs written to answers.json (`settings` is copied there: what the request was)."""

    input_ids: list[list[int]]
    output_len: int
    top_logprobs: int
    settings: dict[str, Any] = field(default_factory=dict)  # the YAML's `answers:` block, as given
    passes: int = 1  # 2: the same request again, each prefill then a prefix-cache hit (the paged prefill path)


@dataclass
class Requirements(Message):
    backend: Optional[str] = None
    attention_backend: Optional[str] = None
    archs: Optional[list[str]] = None
    arch: Optional[str] = None
    gpus: int = 0
    flashinfer_min: Optional[dict[str, str]] = None  # arch (or "*") → lowest FlashInfer version that works


@dataclass
class PatchEntry(Message):
    set: str
    name: str
    text: str
    applies_to: Optional[list[str]] = None  # set only for a set with per-version variants


@dataclass
class FileEntry(Message):
    set: str
    path: str
    mode: int
    content_b64: str
    applies_to: Optional[list[str]] = None


@dataclass
class Timeouts(Message):
    ready: float = 1200.0
    no_progress: float = 600.0
    bench: float = 1800.0
    stop_grace: float = 30.0
    fatal_grace: float = 1.0
    gpu_release: float = 30.0


@dataclass
class Spec(Message):
    """Everything the agent needs for one attempt (or a status/recover/apply-revert service call)."""

    NESTED: ClassVar[Nested] = {
        "server": (ServerSpec, False), "bench": (BenchCase, True), "profile": (ProfileSpec, False),
        "requirements": (Requirements, False), "patches": (PatchEntry, True), "files": (FileEntry, True),
        "timeouts": (Timeouts, False), "answers": (AnswersSpec, False), "gc": (GcRequest, False),
        "cooldown": (Cooldown, False), "history": (HistoryRequest, False)}

    run_id: str
    attempt_id: str
    repo: str
    server: ServerSpec
    protocol: int = PROTOCOL
    mode: str = Mode.ATTEMPT.value
    harness_version: Optional[str] = None
    experiment: Optional[str] = None
    host_name: Optional[str] = None
    workdir: Optional[str] = None
    allow_dirty: list[str] = field(default_factory=list)
    base_ref: Optional[str] = None
    patches: list[PatchEntry] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)
    bench: list[BenchCase] = field(default_factory=list)
    timeouts: Timeouts = field(default_factory=Timeouts)
    fatal_patterns: list[str] = field(default_factory=list)
    ready_pattern: str = r"The server is fired up and ready to roll!"
    line_prefix_pattern: Optional[str] = None
    # A server log line that says what a prefill took from the prefix cache: groups "new" and "cached" (tokens)
    prefill_pattern: Optional[str] = None
    heartbeat_timeout_s: Optional[float] = 20.0
    alive_interval_s: float = 2.0
    lock_wait_s: float = 0.0
    deadline_s: Optional[float] = None
    expect: str = "ok"
    profile: Optional[ProfileSpec] = None
    answers: Optional[AnswersSpec] = None
    # Run every bench case's client in one process of the target's Python (agent/bench_driver.py) instead
    # of a process per run: the client's imports are paid once.
    bench_one_process: bool = True
    requirements: Requirements = field(default_factory=Requirements)
    gc: Optional[GcRequest] = None  # mode gc: the retention rule
    cooldown: Optional[Cooldown] = None  # None: runs follow each other at once
    checkout: Optional[str] = None  # bisect: this commit first (clean tree only); the revert puts HEAD back
    history: Optional[HistoryRequest] = None  # mode history: which commits

    @classmethod
    def decode(cls, data: Any) -> Spec:
        """The spec as the agent receives it: the version is checked before anything else."""
        if isinstance(data, dict) and data.get("protocol") != PROTOCOL:
            raise ProtocolError("the controller speaks protocol %s, this agent %d: the controller ships its own "
                                "agent, so this is a stale or foreign agent file" % (data.get("protocol"), PROTOCOL))
        return cls.from_dict(data)


# ============================================================================ events


@dataclass
class Event(Message):
    KIND: ClassVar[str] = ""
    t: float = field(default_factory=time.time)


@dataclass
class Hello(Event):
    KIND: ClassVar[str] = "hello"
    protocol: int = PROTOCOL
    pid: int = 0
    host_time: float = 0.0
    python: str = ""
    hostname: str = ""
    restart: Optional[int] = None  # in a Slurm job: how often it was requeued (SLURM_RESTART_COUNT)


@dataclass
class Alive(Event):
    KIND: ClassVar[str] = "alive"


@dataclass
class Pong(Event):
    KIND: ClassVar[str] = "pong"
    echo: Any = None
    host_time: float = 0.0


@dataclass
class StageChanged(Event):
    KIND: ClassVar[str] = "stage"
    stage: str = ""


@dataclass
class Recovering(Event):
    KIND: ClassVar[str] = "recovering"
    NESTED: ClassVar[Nested] = {"journal": (Journal, False)}
    journal: Journal = field(default_factory=Journal)


@dataclass
class PreflightWarning(Event):
    KIND: ClassVar[str] = "warning"
    problems: list[str] = field(default_factory=list)


@dataclass
class Launched(Event):
    KIND: ClassVar[str] = "launched"
    pid: int = 0
    log: str = ""


@dataclass
class Ready(Event):
    KIND: ClassVar[str] = "ready"
    ready_s: float = 0.0


@dataclass
class Crashed(Event):
    KIND: ClassVar[str] = "crash"
    exit_code: Optional[int] = None
    died_at: Optional[float] = None  # host clock
    since_death_s: Optional[float] = None
    fatal_line: Optional[str] = None
    log_tail: str = ""
    stage: str = ""


@dataclass
class Hung(Event):
    KIND: ClassVar[str] = "hung"
    reason: str = ""
    log_tail: str = ""


@dataclass
class BenchStarted(Event):
    KIND: ClassVar[str] = "bench-start"
    case: str = ""
    repeat: int = 0


@dataclass
class BenchResult(Event):
    KIND: ClassVar[str] = "bench-result"
    case: str = ""
    repeat: int = 0
    result: dict[str, Any] = field(default_factory=dict)


@dataclass
class Final(Event):
    """The agent's last word: how the attempt ended and everything it learned on the way, stage by stage."""

    KIND: ClassVar[str] = "final"
    NESTED: ClassVar[Nested] = {
        "status": (Status, False), "preflight": (PreflightFacts, False), "patch": (PatchFacts, False),
        "server": (ServerFacts, False), "bench": (BenchFacts, False), "revert": (RevertReport, False),
        "recovered": (RecoveryReport, False), "repo_status": (RepoStatus, False), "gc": (GcReport, False),
        "history": (HistoryReport, False)}
    status: Status = Status.OK
    error: Optional[str] = None
    message: Optional[str] = None
    timings: dict[str, float] = field(default_factory=dict)
    attempt_dir: Optional[str] = None
    abort_reason: Optional[str] = None
    budget_exceeded: Optional[bool] = None
    gpu_dirty: Optional[dict[str, int]] = None  # pid → MiB a stopped server (this one, or a recovered one) still held
    preflight: PreflightFacts = field(default_factory=PreflightFacts)
    patch: PatchFacts = field(default_factory=PatchFacts)
    server: ServerFacts = field(default_factory=ServerFacts)
    bench: BenchFacts = field(default_factory=BenchFacts)
    revert: Optional[RevertReport] = None  # this attempt's own revert
    recovered: Optional[RecoveryReport] = None  # an interrupted attempt's leftovers, cleaned up first
    repo_status: Optional[RepoStatus] = None  # status mode: what is going on in the target repo
    gc: Optional[GcReport] = None  # gc mode: the attempt folders, and which went
    history: Optional[HistoryReport] = None  # history mode: the commits from good to bad
    # sha256 of every file in the attempt's folder on the host: the controller checks what it fetched
    artifacts: Optional[Dict[str, str]] = None


@dataclass
class JobState(Event):
    """Not the agent's: what the controller's Slurm reader saw in the queue (a job's state, its reason while
    PENDING, its node once RUNNING), in the same stream as the agent's events."""

    KIND: ClassVar[str] = "job"
    job_id: str = ""
    state: str = ""
    reason: Optional[str] = None
    node: Optional[str] = None
    note: Optional[str] = None  # the reader's own trouble (the login node unreachable, and back)
    login_lost_s: Optional[float] = None  # seconds the login node could not be reached, so far


EVENTS: dict[str, type[Event]] = {c.KIND: c for c in (Hello, Alive, Pong, StageChanged, Recovering,
                                                      PreflightWarning, Launched, Ready, Crashed, Hung,
                                                      BenchStarted, BenchResult, Final, JobState)}


def encode(event: Event) -> dict[str, Any]:
    """The JSON object of an event: its fields plus `event` (the kind)."""
    out = event.to_dict()
    out["event"] = event.KIND
    return out


def decode(data: Any) -> Event:
    """An event from a JSON object; an unknown kind or key is a ProtocolError."""
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        raise ProtocolError("not an agent event: %r" % (data,))
    body = dict(data)
    kind = body.pop("event")
    cls = EVENTS.get(kind)
    if cls is None:
        raise ProtocolError("unknown agent event %r (protocol %d knows: %s)" % (kind, PROTOCOL, ", ".join(EVENTS)))
    return cls.from_dict(body)
