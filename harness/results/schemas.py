"""What record.json, run.json and bisect.json hold, as pydantic models: `Record` (one attempt, schema `SCHEMA`) and
its parts, `RunInfo` (a sweep's plan, schema `RUN_SCHEMA`), `BisectInfo` (a bisect's range, `BISECT_SCHEMA`). Every
key is declared: an unknown one is an error, on write and on read. harness.results.store writes and reads them;
docs/experiments.md "Records" lists the fields."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer

from ..common.outcome import (
    CaseFacts,
    ChangedPaths,
    CommitInfo,
    LockHolder,
    RecoveryReport,
    RevertReport,
    StackFacts,
    Status,
    StopReport,
)
from ..common.wire import plain
from ..safetext import DisplayLine, DisplayText, shown_safe  # a host's words in a display field, shown escaped
from ..triage.verdict import Verdict
from .attemptdir import ANSWERS
from .metrics import CaseSummary

SCHEMA = 1  # record.json
RUN_SCHEMA = 1  # run.json
BISECT_SCHEMA = 1  # bisect.json

# The statuses that are a result. An attempt whose latest records are all something else (the host could
# not be used, the attempt was interrupted) runs again on resume — see `Record.is_final`.
NOT_FINAL_STATUSES: frozenset[Status] = frozenset({Status.INFRA_ERROR, Status.ABORTED})
FINAL_STATUSES: frozenset[Status] = frozenset(Status) - NOT_FINAL_STATUSES


class _Strict(BaseModel):
    """Every key declared: an unknown one is an error, on write and on read."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ============================================================================ record parts


# The agent's report's parts, kept as they are (common/outcome.py's dataclasses: one definition, no copy here):
# pydantic checks them on read (an unknown key is an error, as everywhere in a record) and every string in them,
# a host's word, is made safe to show. `Given` writes the facts that apply (a None is left out), `Whole` every one.
def _given(part: object, omit: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: v for k, v in plain(part).items() if v is not None and k not in omit}


def _case_given(part: object) -> dict[str, Any]:
    # the case's name is its key in `bench_cases`; its warm-up's file stays on the host's side (fetched beside it)
    return _given(part, omit=("name", "warmup_file"))


P = TypeVar("P")
Given = Annotated[P, AfterValidator(shown_safe), PlainSerializer(_given)]
Whole = Annotated[P, AfterValidator(shown_safe), PlainSerializer(plain)]
# How a bench case was run (CaseFacts): its warm-up pass, kept apart from `metrics`; the cool-downs before its
# runs; the GPUs at its start and end (absent: no nvidia-smi); what each run asked of the prefix cache
# (`prefix_cache`, the prompts' seeds) and what the server's log says it got (`prefill`).
CaseRun = Annotated[CaseFacts, AfterValidator(shown_safe), PlainSerializer(_case_given)]


class ServerInfo(_Strict):
    argv: list[str | dict[str, str]]  # a dict is a slot the agent filled in on the host ({"slot": "port"})
    env: dict[str, str] = {}  # secrets redacted
    port: int | str | None = None
    exit_code: int | None = None
    stop: Given[StopReport] | None = None


class Recovered(_Strict):
    """An interrupted attempt's leftovers that this attempt cleaned up first (the agent's `RecoveryReport`, with
    its journal kept as the agent found it: a journal of any agent version)."""

    journal: dict[str, Any]
    stop: Given[StopReport]
    revert: Given[RevertReport]
    by: str | None = None  # "watchdog": the dead agent's own watchdog did it, before any harness command
    took_s: float | None = None  # watchdog: from the agent's death to the tree restored

    @classmethod
    def of(cls, report: RecoveryReport) -> Recovered:
        return cls(journal=plain(report.journal), stop=report.stop, revert=report.revert,
                   **{k: v for k, v in (("by", report.by), ("took_s", report.took_s)) if v is not None})


class KernelTime(_Strict):
    name: str
    gpu_us: float


class ProfileOp(_Strict):
    name: str
    gpu_us: float
    share: float
    calls: int
    kernels: list[KernelTime] = []


class ProfileSummary(_Strict):
    """The top operations by GPU time in the rank-0 trace (harness.triage.profile's summary)."""

    total_gpu_us: float
    steps: int
    top: list[ProfileOp]
    kernels: int
    per_step_us: float | None = None
    trace: str | None = None  # relative to the attempt folder
    files: list[str] = []


class AnswersStats(_Strict):
    """The answer check's own facts (answers.json beside the record); its verdict needs a reference, so it is
    computed by `harness compare`, never stored."""

    file: str = ANSWERS  # relative to the attempt folder
    prompts: int | None = None
    positions: int | None = None
    mean_logprob: float | None = None  # of the chosen (greedy) tokens
    min_logprob: float | None = None
    # its prefix-hit pass against its cold pass, the per-step spread (analysis/answers.py): as the reference, the
    # noise its rows are measured in
    yardstick: float | None = None
    error: DisplayText | None = None  # answers.json came but cannot be read


class Provenance(_Strict):
    base_commit: str | None = None
    patch_sets: dict[str, str] = {}  # name → sha256 of its contents
    harness_version: str | None = None
    server_version: str | None = None
    flashinfer_version: str | None = None  # as the server's Python sees it
    patch_variants: dict[str, str] | None = None  # set → the variant applied ('sglang==0.5.16')
    gpu: list[dict[str, Any]] | None = None  # nvidia-smi's GPUs (name, compute_cap, …): the fields its agent read
    arch: str | None = None
    agent_python: str | None = None
    hostname: str | None = None
    stack: Whole[StackFacts] | None = None  # torch, CUDA, driver, clocks, … (analysis/stack.py compares them)


class SweepAttempt(_Strict):
    """Where an attempt sits in a sweep: what the scheduler adds to its record."""

    key: str
    round: int
    sweep: str
    try_: int = Field(alias="try")


# ============================================================================ the record

# Written in every record, with their defaults when not given; every other field is written when it was
# given (as it was before the record had a declared field for it).
CORE_FIELDS = ("schema_", "run_id", "experiment", "attempt", "host", "backend", "status", "error", "verdict",
               "timings", "detect_latency_s", "metrics", "provenance", "revert")


class SlurmJob(_Strict):
    """Where a cluster's attempt ran: its batch job."""

    job_id: str
    state: str | None = None  # the last state seen (COMPLETED, CANCELLED, TIMEOUT, ...)
    node: str | None = None
    reason: DisplayLine | None = None  # the last PENDING reason seen
    queued_s: float | None = None  # submission → RUNNING (as the queue was polled)
    agent_start_s: float | None = None  # submission → the agent's hello (the node's clock against ours)
    requeued: int = 0
    login_lost_s: float | None = None  # how long the login node could not be reached while the job ran


class Record(_Strict):
    """One attempt's `record.json` (schema `SCHEMA`; docs/experiments.md "Records" lists the fields)."""

    schema_: int = Field(SCHEMA, alias="schema")
    run_id: str
    experiment: str
    attempt: str
    host: str
    backend: str | None = None
    status: Status
    error: DisplayText | None = None
    verdict: Verdict | None = None  # why a crashed or hung server ended
    timings: dict[str, float] = {}
    detect_latency_s: float | None = None
    metrics: dict[str, CaseSummary] = {}  # per bench case: medians, `repeats`, and every repeat in `samples`
    bench_cases: dict[str, CaseRun] | None = None  # per bench case: warm-up, cool-down, GPU state
    provenance: Provenance = Provenance()
    revert: Given[RevertReport] | None = None
    # what the experiment expected, and what the server was
    expect: str | None = None  # ok | crash | hang
    expectation_met: bool | None = None
    experiment_file: str | None = None
    server: ServerInfo | None = None
    changed_paths: Whole[ChangedPaths] | None = None
    recovered: Recovered | None = None
    abort_reason: DisplayLine | None = None
    profile: ProfileSummary | None = None
    answers: AnswersStats | None = None  # with `answers:`: the answer check's own facts
    # in sweeps
    key: str | None = None
    round: int | None = None
    sweep: str | None = None
    try_: int | None = Field(None, alias="try")
    # facts the agent reported, present only when they apply
    dirty: list[str] | None = None
    locked_by: Given[LockHolder] | None = None  # the lock holder's own note
    fetch_missing: list[str] | None = None
    port_in_use: int | None = None
    cannot_run: list[DisplayText] | None = None
    preflight_warnings: list[DisplayText] | None = None
    arch: str | None = None
    budget_exceeded: bool | None = None
    gpu_dirty: dict[str, int] | None = None
    profile_error: DisplayText | None = None
    slurm: SlurmJob | None = None  # attempts on a Slurm cluster
    checkout: str | None = None  # a bisect step: the commit checked out for it (provenance.base_commit once it was)
    # written while the attempt ran (`record.partial.json`): the controller ended before the final report
    provisional: bool | None = None

    def is_final(self) -> bool:
        """A result: the attempt does not run again on resume. An aborted (or infra-error) attempt is not,
        unless it was stopped for running past its budget."""
        return self.status in FINAL_STATUSES or bool(self.budget_exceeded)

    def to_json(self) -> str:
        given = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        out: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            key = info.alias or name
            if key in given:
                out[key] = given[key]
            elif name in CORE_FIELDS:
                value = getattr(self, name)
                out[key] = (value.model_dump(mode="json", by_alias=True, exclude_unset=True)
                            if isinstance(value, BaseModel) else value)
        return json.dumps(out, indent=2) + "\n"


# ============================================================================ bisect.json


class BisectInfo(_Strict):
    """A bisect run's `bisect.json` (schema `BISECT_SCHEMA`): what it bisects, written once before its first
    attempt; its steps are the run's ordinary records (`checkout` names each one's commit), so a resume goes on."""

    schema_: int = Field(BISECT_SCHEMA, alias="schema")
    run_id: str
    experiment: str  # the experiment's name (each step's records are under <name>.<commit>)
    experiment_file: str  # absolute
    host: str
    hosts_file: str | None = None  # the inventory the host was read from (absolute)
    patches_dir: str | None = None
    good_ref: str  # the ends as given (--good, --bad), and the first-parent line between them (good first)
    bad_ref: str
    commits: list[Whole[CommitInfo]]  # each one's subject line is the host's words: shown escaped
    case: str  # the bench case and metric judged: --metric CASE:METRIC
    metric: str
    max_attempts: int  # per commit, when its verdict cannot be told from fewer
    head: str  # where the target repo's HEAD was (what each step's revert puts back, verified)
    branch: str | None = None  # the ref HEAD was on; None: detached
    created: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1) + "\n"


# ============================================================================ run.json


class PlannedEntry(_Strict):
    key: str
    experiment: str
    round: int
    order: int
    backend: str | None = None
    arch: str | None = None


class RunInfo(_Strict):
    """A sweep run's `run.json`: its plan, so a resume runs what has no final record."""

    schema_: int = Field(RUN_SCHEMA, alias="schema")
    run_id: str
    sweep: str
    sweep_file: str
    created: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    baseline: str | None = None
    hosts: list[str] = []
    # What a resume needs besides the hosts (absent in run.json files from before they were recorded):
    hosts_file: str | None = None  # the inventory the hosts were read from (absolute)
    patches_dir: str | None = None  # the patch sets the keys were made from (absolute)
    host_gpus: dict[str, int] = {}  # GPUs asked of hosts without `gpus:` (for the record; keys do not use them)
    # What the keys were made from (the first call's hosts), so a resume over other hosts keeps them:
    key_signature: str | None = None
    key_archs: list[str] | None = None
    attempts: list[PlannedEntry] = []

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1) + "\n"

    def plan_keys(self) -> set[str]:
        return {a.key for a in self.attempts}
