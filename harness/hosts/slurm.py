"""Slurm, as the harness uses it (pure): the batch job for an attempt, Slurm's answers read, and what each
job state means for the attempt.

One attempt is one batch job. Its script only `exec`s the agent (`--job JOBDIR`), so Slurm's signals reach
the agent itself; every sbatch option is an argv word (nothing from a YAML file meets a shell). One job
name per target repo with `--dependency=singleton` keeps one attempt per repo running at a time, whatever
else is queued.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from dataclasses import dataclass

from ..common.protocol import Final, PreflightFacts, Spec, Status
from ..experiments.config import ClusterConfig

SIGNAL_LEAD_S = 120  # sbatch --signal=B:USR1@120: the agent's warning before the time limit
STOP_ALLOWANCE_S = 180  # beyond the budget: stop, revert, the final report (within SIGNAL_LEAD_S of the limit)
SQUEUE_FORMAT = "%i|%T|%r|%N"

# A job in one of these has ended for good (a requeued job goes back to PENDING instead).
TERMINAL = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                      "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})
# What each state means for the attempt (shown in the live view, docs/slurm.md explains them).
MEANING = {
    "PENDING": "queued: not started; nothing on the node yet",
    "CONFIGURING": "allocated, the node is being set up",
    "RUNNING": "the agent runs the attempt on the node",
    "COMPLETING": "the agent has ended; Slurm is cleaning up the node",
    "COMPLETED": "the agent ended; its final report is the attempt's result",
    "CANCELLED": "cancelled (by the harness on Ctrl-C, or by someone's scancel)",
    "TIMEOUT": "the time limit was reached (the attempt's budget)",
    "NODE_FAIL": "the node failed; with --requeue the job runs again from the start",
    "PREEMPTED": "preempted; with --requeue the job runs again from the start",
    "FAILED": "the batch script failed (the agent could not start, or died)",
    "OUT_OF_MEMORY": "the job ran out of host memory",
    "BOOT_FAIL": "the node failed to boot",
    "DEADLINE": "the job's deadline passed",
    "REQUEUED": "requeued: it runs again from the start (the killed run's tree is recovered first)",
    "SUSPENDED": "suspended by Slurm",
}


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str
    reason: str | None = None
    node: str | None = None

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL


def job_name(repo: str) -> str:
    """The same for every attempt on one target repo (the singleton dependency's key)."""
    return "harness-" + hashlib.sha256(repo.encode()).hexdigest()[:12]


def time_limit_minutes(spec: Spec, cluster: ClusterConfig) -> int:
    """sbatch --time: the attempt's budget when it has one, else the cluster's `time`, else the most the
    experiment's own timeouts allow; plus the time to stop and revert after the warning signal."""
    if spec.deadline_s:
        seconds = float(spec.deadline_s)
    elif cluster.time:
        return parse_time_minutes(cluster.time)
    else:
        t = spec.timeouts
        cases = sum(int(c.repeats) for c in spec.bench) or 1
        seconds = t.ready + t.bench * cases + (spec.profile.timeout if spec.profile else 0)
    return math.ceil((seconds + STOP_ALLOWANCE_S + SIGNAL_LEAD_S) / 60)


def parse_time_minutes(value: str) -> int:
    """Slurm's time formats (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) → whole minutes, rounded up."""
    days, _, rest = value.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        h, m, s = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = 0, parts[0], 0
    return (int(days or 0) * 24 + h) * 60 + m + math.ceil(s / 60)


def batch_script(python: str, agent: str, job_dir: str) -> str:
    """The job's script: the agent in the script's place (exec), so the job's signals are the agent's."""
    return "#!/bin/sh\nexec %s %s --job %s\n" % (shlex.quote(python), shlex.quote(agent), shlex.quote(job_dir))


def sbatch_argv(cluster: ClusterConfig, *, name: str, job_dir: str, script: str, gpus: int, minutes: int) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name={name}", "--dependency=singleton", f"--time={minutes}",
            f"--signal=B:USR1@{SIGNAL_LEAD_S}", "--requeue", "--nodes=1", f"--chdir={job_dir}",
            f"--output={job_dir}/slurm-%j.out", "--open-mode=append"]
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    if cluster.exclusive:
        argv.append("--exclusive")
    if cluster.partition:
        argv.append(f"--partition={cluster.partition}")
    if cluster.account:
        argv.append(f"--account={cluster.account}")
    return argv + list(cluster.sbatch_extra) + [script]


def parse_job_id(sbatch_stdout: str) -> str:
    """`sbatch --parsable` prints `ID` or `ID;CLUSTER`."""
    text = sbatch_stdout.strip().splitlines()[-1] if sbatch_stdout.strip() else ""
    job_id = text.split(";")[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch did not print a job id: {sbatch_stdout.strip()[-300:]!r}")
    return job_id


def parse_squeue(stdout: str, job_id: str) -> JobInfo | None:
    """The job's line of `squeue -h --states=all -j ID -o SQUEUE_FORMAT`; None when squeue no longer knows it."""
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0] == job_id:
            reason = parts[2] if parts[2] not in ("", "None", "(null)") else None
            node = parts[3] if parts[3] not in ("", "(null)") else None
            return JobInfo(job_id, parts[1], reason, node)
    return None


def parse_sacct(stdout: str, job_id: str) -> JobInfo | None:
    """`sacct -X -n -P -j ID -o JobID,State,NodeList` (where accounting exists): the allocation's line."""
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0] == job_id:
            state = parts[1].split()[0] if parts[1] else "UNKNOWN"  # "CANCELLED by 0"
            return JobInfo(job_id, state, None, parts[2] or None)
    return None


def describe(info: JobInfo) -> str:
    """One line for the live view: `PENDING (Dependency)`, `RUNNING on node07`."""
    text = info.state
    if info.state == "PENDING" and info.reason:
        text += f" ({info.reason})"
    elif info.node and info.state in ("RUNNING", "CONFIGURING", "COMPLETING"):
        text += f" on {info.node}"
    return text


def final_without_report(info: JobInfo | None, *, started: bool, cancelled: bool, output_tail: str) -> Final:
    """The attempt's final report when the job ended and the agent's own never arrived."""
    state = info.state if info else "gone from the queue"
    tail = f"; the job's output ends:\n{output_tail.strip()[-1500:]}" if output_tail.strip() else ""
    if not started:
        if cancelled:
            return Final(status=Status.ABORTED, abort_reason="slurm-cancel",
                         error=f"cancelled while queued ({state}); nothing ran")
        return Final(status=Status.INFRA_ERROR,
                     error=f"the job ended {state} before the agent started ({MEANING.get(state, 'see sacct')}){tail}")
    if info is not None and info.state == "TIMEOUT":
        return Final(status=Status.ABORTED, budget_exceeded=True, abort_reason="slurm-time-limit",
                     error="the job reached its time limit before the agent's final report; the next job on this "
                           f"repo recovers the tree first{tail}")
    return Final(status=Status.INFRA_ERROR,
                 error=f"the job ended {state} without the agent's final report (the agent was killed); the next "
                       f"job on this repo recovers the tree first{tail}")


def refused_by_slurm(said: str) -> Final:
    """The attempt's final report when Slurm refused to take the job (asking again changes nothing)."""
    return Final(status=Status.PREFLIGHT_FAILED, preflight=PreflightFacts(cannot_run=[said]),
                 error=f"Slurm refused the job: {said} (check the cluster's partition, account, gpus_per_node and "
                       "sbatch_extra in hosts.yaml)")
