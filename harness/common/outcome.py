"""How an attempt ended, in typed parts: the status, and what the agent learned at each stage — the pieces
the final report (`protocol.Final`) is made of, and the journal and reports the agent keeps on the host (and
what the service modes gc and history are asked, with their answers).

Standard library only: it ships inside the agent's zipapp (Python >= 3.8 on the host).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, Optional

from .wire import Message, Nested

JOURNAL_VERSION = 4  # 2: tree_before covered tracked and untracked files only; 3: no `checkout` (bisect)


class Status(str, Enum):
    """How an attempt ended. The string values are what records on disk say."""

    OK = "ok"
    CRASHED = "crashed"
    HUNG = "hung"
    APPLY_FAILED = "apply-failed"
    PREFLIGHT_FAILED = "preflight-failed"
    BENCH_FAILED = "bench-failed"
    INFRA_ERROR = "infra-error"
    ABORTED = "aborted"

    def __str__(self) -> str:
        return self.value


# ============================================================================ the host's own notes


@dataclass
class GpuInfo(Message):
    """One GPU as nvidia-smi shows it (its words, unparsed)."""

    index: str = ""
    uuid: str = ""
    name: str = ""
    compute_cap: str = ""
    memory_total_mib: str = ""
    memory_used_mib: str = ""


@dataclass
class LockHolder(Message):
    """Who holds a target repo's lock (`lock.json` beside it), as that agent wrote it."""

    run_id: Optional[str] = None
    attempt_id: Optional[str] = None
    pid: Optional[int] = None
    since: Optional[str] = None


@dataclass
class LockState(LockHolder):
    """`harness status`'s look at the lock: held or not, and by whom."""

    held: bool = False


@dataclass
class JournalServer(Message):
    """The server an attempt launched, as its journal names it: enough to stop that process and no other."""

    pid: int
    pgid: int
    start: Optional[int] = None  # its start time (/proc/<pid>/stat): a reused pid is another process


@dataclass
class JournalCheckout(Message):
    """An attempt at another commit (a bisect step): the commit it checked out, and where HEAD was before — the
    revert puts HEAD (and its branch) back after the patches' paths."""

    commit: str
    head: str  # HEAD's commit as found
    branch: Optional[str] = None  # the ref HEAD was on (refs/heads/main); None: detached


@dataclass
class Journal(Message):
    """What an attempt changes in the target tree, on disk (`.git/harness/journal.json`) before the first byte
    changes: what to restore, what to delete, which server to stop. Another agent reads it — a later one,
    maybe of another version — so `from_disk` reads it leniently; a journal without `version` is version 2."""

    NESTED: ClassVar[Nested] = {"server": (JournalServer, False), "checkout": (JournalCheckout, False)}

    run_id: Optional[str] = None
    attempt_id: Optional[str] = None
    marker: str = ""
    version: int = JOURNAL_VERSION
    agent_pid: Optional[int] = None
    repo: str = ""
    base_commit: str = ""
    tree_before: Optional[str] = None  # digest of the tree as found (see Tree.full_manifest)
    dirty_before: list[str] = field(default_factory=list)
    restore: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    created_dirs: list[str] = field(default_factory=list)
    server: Optional[JournalServer] = None
    state: str = "applying"  # checkout | applying | applied | running | revert-unverified
    created: str = ""
    backup: Optional[str] = None
    ignored_before: Optional[list[str]] = None
    checkout: Optional[JournalCheckout] = None  # a bisect step: the commit checked out first, HEAD as found

    @classmethod
    def read(cls, data: object) -> Journal:
        """A journal file's contents (any agent version's)."""
        if isinstance(data, dict) and not data.get("version"):
            data = dict(data, version=2)
        return cls.from_disk(data)


@dataclass
class StopReport(Message):
    """How a server was stopped (or, on recovery, how a leftover one was)."""

    state: Optional[str] = None  # recovery: stopped | already-gone | never-launched | killed-marked
    signal: Optional[str] = None  # TERM | KILL | None (already gone)
    stragglers: Optional[list[int]] = None
    left: Optional[list[int]] = None
    pids: Optional[list[int]] = None
    stop_s: Optional[float] = None
    gpu_dirty: Optional[dict[str, int]] = None  # pid → MiB still held after the processes were gone


@dataclass
class RevertReport(Message):
    """The tree put back from a journal, and whether it is byte for byte what it was."""

    verified: bool
    tree_before: Optional[str] = None
    tree_after: Optional[str] = None
    diff: list[str] = field(default_factory=list)  # paths that differ when not verified
    stray_ignored: Optional[list[str]] = None  # new paths under .gitignore'd folders (not part of the check)


@dataclass
class RecoveryReport(Message):
    """An interrupted attempt's leftovers cleaned up: by its watchdog, a preflight or `harness recover`
    (kept on the host in `.git/harness/watchdog.json`)."""

    NESTED: ClassVar[Nested] = {"journal": (Journal, False), "stop": (StopReport, False),
                                "revert": (RevertReport, False)}

    journal: Journal
    stop: StopReport
    revert: RevertReport
    by: Optional[str] = None  # watchdog | recover
    took_s: Optional[float] = None  # watchdog: from the agent's death to the tree restored


# ============================================================================ the final report's parts


@dataclass
class ChangedPaths(Message):
    restore: list[str] = field(default_factory=list)  # tracked files the attempt changed
    delete: list[str] = field(default_factory=list)  # files the attempt created


@dataclass
class GpuClocks(Message):
    """One GPU's clocks (MHz) and power limit (W) as nvidia-smi shows them; None: not shown ([N/A]) or unknown.
    The current clocks are an idle GPU's (read at preflight): kept, never compared."""

    index: str = ""
    sm_mhz: Optional[int] = None
    mem_mhz: Optional[int] = None
    sm_max_mhz: Optional[int] = None
    mem_max_mhz: Optional[int] = None
    app_sm_mhz: Optional[int] = None  # application clocks (`nvidia-smi -ac`) ...
    app_mem_mhz: Optional[int] = None
    default_app_sm_mhz: Optional[int] = None  # ... and the GPU's defaults: set clocks differ from these
    default_app_mem_mhz: Optional[int] = None
    power_limit_w: Optional[float] = None  # enforced
    default_power_limit_w: Optional[float] = None
    persistence_mode: Optional[bool] = None


@dataclass
class StackFacts(Message):
    """The software and settings the server ran on (agent/stack.py): the target Python's packages (by their
    metadata, nothing imported) and nvidia-smi's driver, clocks and power limit. Each fact not found is None."""

    NESTED: ClassVar[Nested] = {"gpus": (GpuClocks, True)}

    torch: Optional[str] = None
    cuda_runtime: Optional[str] = None  # torch.version.cuda, read from torch/version.py
    sgl_kernel: Optional[str] = None  # sgl-kernel, or sglang-kernel as it is named from 0.4
    triton: Optional[str] = None
    flashinfer: Optional[str] = None
    sglang: Optional[str] = None  # the installed distribution's (the checkout's own: `server_version`)
    packages: Optional[int] = None  # how many distributions the server's Python sees
    packages_sha256: Optional[str] = None  # of their sorted "name==version" lines
    driver: Optional[str] = None
    cuda_driver: Optional[str] = None  # the newest CUDA the driver supports
    gpus: Optional[list[GpuClocks]] = None  # the GPUs the server sees (CUDA_VISIBLE_DEVICES)


@dataclass
class PreflightFacts(Message):
    """What the preflight learned of the host (and, when it refused, why)."""

    NESTED: ClassVar[Nested] = {"gpus": (GpuInfo, True), "locked_by": (LockHolder, False),
                                "stack": (StackFacts, False)}

    base_commit: Optional[str] = None
    server_version: Optional[str] = None
    flashinfer_version: Optional[str] = None
    patch_variants: Optional[dict[str, str]] = None  # set → the variant chosen for this host's target
    gpus: Optional[list[GpuInfo]] = None  # None: no nvidia-smi
    arch: Optional[str] = None
    attention_backend_choices: Optional[list[str]] = None
    port: Optional[int] = None  # the port picked for `port: auto`
    dirty: Optional[list[str]] = None  # refused: dirty paths no allow-list covers
    port_in_use: Optional[int] = None  # refused: the port is taken
    cannot_run: Optional[list[str]] = None  # refused: the experiment does not fit the host
    warnings: Optional[list[str]] = None  # `expect: crash`: what did not fit, run anyway
    locked_by: Optional[LockHolder] = None  # refused: another attempt holds the repo
    stack: Optional[StackFacts] = None  # the environment fingerprint


@dataclass
class PatchFacts(Message):
    NESTED: ClassVar[Nested] = {"changed_paths": (ChangedPaths, False)}

    changed_paths: Optional[ChangedPaths] = None
    compiled: Optional[list[str]] = None  # apply-revert: the .py files checked
    compile_errors: Optional[list[str]] = None


@dataclass
class ServerFacts(Message):
    NESTED: ClassVar[Nested] = {"stop": (StopReport, False)}

    log: Optional[str] = None  # its log on the host (what the controller fetches)
    pid: Optional[int] = None
    exit_code: Optional[int] = None
    died_at: Optional[float] = None  # host clock
    foreign_port: Optional[bool] = None  # ready, but another process answers on the port
    stack_dump: Optional[str] = None  # py-spy's dump of a hung server, on the host
    stop: Optional[StopReport] = None


@dataclass
class GpuState(Message):
    """One GPU as a bench case starts or ends (one nvidia-smi query); None: not shown ([N/A]) or unknown."""

    index: str = ""
    sm_mhz: Optional[int] = None
    mem_mhz: Optional[int] = None
    temperature_c: Optional[float] = None
    power_w: Optional[float] = None
    memory_used_mib: Optional[int] = None  # what the last case (or anything else) left on it


@dataclass
class PrefillTokens(Message):
    """What the server's prefills took from its prefix cache during one run of a case (its `Prefill batch`
    log lines while the run ran, bench_serving's own warm-up request included): tokens computed, tokens found
    cached, and the lines counted."""

    repeat: int = 0  # 0-based; -1: the case's warm-up
    new: int = 0
    cached: int = 0
    batches: int = 0

    @property
    def hit_share(self) -> Optional[float]:
        """Cached tokens over all prompt tokens the run's prefills saw (None: it saw none)."""
        total = self.new + self.cached
        return self.cached / total if total else None


@dataclass
class CaseFacts(Message):
    """What a bench case's measured repeats ran after and between: its warm-up pass (same shape, kept apart
    from the metrics), the cool-downs waited and the GPUs' state at its start and end (None: no nvidia-smi),
    what each run asked of the prefix cache and what the server's log says it got."""

    NESTED: ClassVar[Nested] = {"gpu_start": (GpuState, True), "gpu_end": (GpuState, True),
                                "prefill": (PrefillTokens, True)}

    name: str = ""
    prefix_cache: Optional[str] = None  # "cold": new prompts each repeat, cache flushed; "hit": primed, reused
    seeds: Optional[list[int]] = None  # the prompts' seed of each measured repeat
    warmup_seed: Optional[int] = None
    prefill: Optional[list[PrefillTokens]] = None  # per run (warm-up first), when the log shows prefills
    warmup: bool = False  # a warm-up pass ran (and ended) before the measured repeats
    warmup_s: Optional[float] = None  # its wall time
    warmup_median_ttft_ms: Optional[float] = None  # from its own result line (a compile shows here)
    warmup_file: Optional[str] = None  # its JSONL on the host (never summarised into the metrics)
    cooldown_s: Optional[float] = None  # seconds waited in cool-downs before this case's runs
    cooldown_settled: Optional[bool] = None  # until_settled: every wait settled (False: one hit max_s)
    gpu_start: Optional[list[GpuState]] = None
    gpu_end: Optional[list[GpuState]] = None


@dataclass
class BenchFacts(Message):
    NESTED: ClassVar[Nested] = {"cases": (CaseFacts, True)}

    cases: Optional[list[CaseFacts]] = None  # per case, in order: warm-up, cool-down, GPU state
    files: Optional[dict[str, str]] = None  # case → its results file on the host (fetched even when it failed)
    profile_files: Optional[list[str]] = None
    profile_error: Optional[str] = None  # the profile stage never fails the attempt: this says what went wrong
    answers_file: Optional[str] = None  # the answer check's answers.json on the host, once written


@dataclass
class RepoStatus(Message):
    """`harness status`: what is going on in a target repo, changing nothing."""

    NESTED: ClassVar[Nested] = {"lock": (LockState, False), "journal": (Journal, False), "gpus": (GpuInfo, True)}

    repo: str = ""
    exists: bool = False
    git: bool = False  # a git checkout: only then is the rest looked at
    lock: Optional[LockState] = None
    journal: Optional[Journal] = None
    gpus: Optional[list[GpuInfo]] = None  # None: no nvidia-smi
    gpu_apps: Optional[dict[str, int]] = None  # pid → MiB of compute processes on the GPUs
    head: Optional[str] = None  # None: a repo without commits
    dirty: Optional[list[str]] = None


@dataclass
class GcEntry(Message):
    """`harness gc`: one attempt folder under the work dir, and what the retention rule does with it."""

    run_id: str = ""
    attempt_id: str = ""
    size_bytes: int = 0
    age_s: float = 0.0  # since anything in it was last written
    remove: bool = False  # the rule's decision (a dry run only says it)
    why: str = ""
    removed: bool = False  # it is gone
    error: Optional[str] = None  # why removing it failed


@dataclass
class GcReport(Message):
    """`harness gc`: the work dir's attempt folders, oldest first, each with the rule's decision."""

    NESTED: ClassVar[Nested] = {"entries": (GcEntry, True)}

    workdir: str = ""
    dry_run: bool = True
    entries: list[GcEntry] = field(default_factory=list)



@dataclass
class GcRequest(Message):
    """`harness gc`'s retention rule: attempt folders last written to more than `older_than_days` ago go, then
    the oldest until the rest fit in `max_bytes`; never one in use. `dry_run`: remove nothing, say what."""

    older_than_days: Optional[float] = None
    max_bytes: Optional[int] = None
    dry_run: bool = True


@dataclass
class HistoryRequest(Message):
    """`harness bisect`'s look at the target repo (mode history): the first-parent line from `good` to `bad`."""

    good: str = ""
    bad: str = "HEAD"


@dataclass
class CommitInfo(Message):
    sha: str
    subject: str = ""


@dataclass
class HistoryReport(Message):
    """`harness bisect`: the target repo's first-parent line from the good commit to the bad one, and its state."""

    NESTED: ClassVar[Nested] = {"commits": (CommitInfo, True)}

    head: str = ""
    branch: Optional[str] = None  # the ref HEAD is on; None: detached
    commits: list[CommitInfo] = field(default_factory=list)  # good first, bad last
    dirty: list[str] = field(default_factory=list)  # a bisect refuses a dirty tree: it checks out other commits
    journal: Optional[str] = None  # an interrupted attempt's journal is there (its attempt id): recover first
