"""A Slurm cluster as a target: the agent runs as a batch job, and its event file, read through the login
node, gives the attempt's events.

`SlurmTransport` does what a host's transport does (run, start, put, get) on the login node — local when the
cluster has no `login:` — and `attempt` gives a `SlurmAttempt`, the attempt channel of a batch job: the spec
sent to it is submitted as the job; `receive` gives the agent's events as they reach the shared storage, with
`JobState` events for what the queue says (PENDING and why, RUNNING where). The agent's final report is the
truth, passed on only once the job has ended for good: a requeued job's earlier run ends with a report too,
and that one is dropped when the job starts again. A job that ends without any report gets one made from
its state (`slurm.final_without_report`). An abort becomes scancel.
"""

from __future__ import annotations

import base64
import json
import tempfile
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

from ..common.protocol import Event, Final, Hello, JobState, ProtocolError, Spec
from ..errors import AgentProtocolError, HostError, HostUnreachable
from ..experiments.config import ClusterHost
from .channel import AgentExit, AttemptChannel
from .direct import connect
from .jsonlines import decode_event_line, spec_json
from .slurm import (
    SQUEUE_FORMAT,
    JobInfo,
    batch_script,
    final_without_report,
    job_name,
    parse_job_id,
    parse_sacct,
    parse_squeue,
    refused_by_slurm,
    sbatch_argv,
    time_limit_minutes,
)
from .transport import CommandResult, RemoteProcess, Transport

# One round trip per look: the new bytes of the event file and the queue's word on the job, as JSON.
LOOK = (
    "import base64,json,subprocess,sys\n"
    "p,off,job=sys.argv[1],int(sys.argv[2]),sys.argv[3]\n"
    "try:\n"
    "    f=open(p,'rb');f.seek(off);data=f.read(1<<22);f.close()\n"
    "except FileNotFoundError:\n"
    "    data=b''\n"
    "def run(a):\n"
    "    try:\n"
    "        r=subprocess.run(a,stdout=subprocess.PIPE,stderr=subprocess.PIPE,universal_newlines=True,timeout=60)\n"
    "        return [r.returncode,r.stdout,r.stderr[-500:]]\n"
    "    except (OSError,subprocess.SubprocessError) as e:\n"
    "        return [127,'',str(e)]\n"
    "q=run(['squeue','-h','--states=all','-j',job,'-o',sys.argv[4]])\n"
    "a=run(['sacct','-X','-n','-P','-j',job,'-o','JobID,State,NodeList']) if q[0] or not q[1].strip() else None\n"
    "print(json.dumps({'data':base64.b64encode(data).decode(),'squeue':q,'sacct':a}))\n"
)
# The job's folder holds its spec (the server's environment, maybe secrets): the user's eyes only.
MKDIR = "import os,sys\nos.makedirs(sys.argv[1],exist_ok=True)\nos.chmod(sys.argv[1],0o700)\n"
TAIL = "import sys\ntry:\n    f=open(sys.argv[1],'rb');f.seek(0,2);f.seek(max(0,f.tell()-4000));" \
       "sys.stdout.write(f.read().decode('utf-8','replace'))\nexcept OSError:\n    pass\n"
SUBMISSION_REFUSED = "Batch job submission failed"  # sbatch's words when slurmctld rejects the job itself


class SlurmTransport(Transport):
    def __init__(self, name: str, host: ClusterHost) -> None:
        super().__init__(name, host)
        self.cluster = host.cluster
        self.login: Transport = connect(f"{name} (login)", host.cluster.login_host)

    @property
    def login_python(self) -> str:
        return self.login.host.python

    def _run(self, argv: list[str], timeout: float) -> CommandResult:
        return self.login._run(argv, timeout)

    def put(self, local: Path, remote: str) -> None:
        self.login.put(local, remote)

    def get(self, remote: str, local: Path) -> None:
        self.login.get(remote, local)

    def start(self, argv: list[str]) -> RemoteProcess:
        return self.login.start(argv)

    def attempt(self, *, python: str, agent: str) -> SlurmAttempt:
        """An attempt's channel: the agent at `agent` run by `python` as a batch job, once it gets its spec."""
        return SlurmAttempt(self, python=python, agent=agent)

    def close(self) -> None:
        self.login.close()


class SlurmAttempt(AttemptChannel):
    """One attempt as a batch job: the spec becomes the job's file, the queue's word and the job's event file
    its events. One thread talks to the login node: the one that calls `receive`."""

    def __init__(self, t: SlurmTransport, *, python: str, agent: str) -> None:
        self.t = t
        self.python, self.agent = python, agent
        self._stderr: deque[str] = deque(maxlen=200)
        # In order; a line of the event file that breaks the protocol is raised when `receive` reaches it.
        self._events: deque[Event | ProtocolError] = deque()
        self._partial = b""
        self._wake = threading.Event()
        self._cancel = threading.Event()
        self.job_id: str | None = None
        self.job_dir: str | None = None
        self.info: JobInfo | None = None
        self._offset = 0
        self._started = False  # the agent said hello
        self._ran = False  # the queue showed it on a node
        self._held_final: Final | None = None
        self._ended_at: float | None = None
        self._cancelled = False
        self._finished = False
        self._unreachable_since: float | None = None
        self._lost_s = 0.0  # the login node unreachable, in all

    # ------------------------------------------------------------------ what the runner calls

    def send_spec(self, spec: Spec) -> None:
        if self._finished:
            return
        # The heartbeat is the controller's link to a process; a job runs on whether or not anyone listens.
        self._submit(replace(spec, heartbeat_timeout_s=None))

    def receive(self) -> Event | None:
        while not self._events:
            if self._finished:
                return None
            self._look()
            if not self._events and not self._finished:
                self._wake.wait(self.t.cluster.poll)
                self._wake.clear()
        item = self._events.popleft()
        if isinstance(item, ProtocolError):
            self.kill()
            raise AgentProtocolError(f"the agent on the host speaks another protocol: {item}")
        return item

    def ping(self, echo: int | None = None) -> None:
        pass  # nothing to answer: the job runs on whether or not anyone listens, and shares no link to time

    def abort(self) -> None:
        if not self._finished:  # acted on by the reader (one thread talks to the login node)
            self._cancel.set()
            self._wake.set()

    def close(self) -> None:
        pass  # the job took its spec as a file and reads nothing more; an abort is a signal, not a word

    def kill(self) -> None:
        """Second Ctrl-C or a broken stream: scancel now (the agent still stops and reverts on TERM)."""
        if self.job_id is not None and not self._finished:
            self._scancel([])
        self._finished = True

    def exit(self, timeout: float) -> AgentExit:
        return AgentExit(0 if self._finished else None, "".join(self._stderr))

    # ------------------------------------------------------------------ internals

    def _submit(self, spec: Spec) -> None:
        workdir = self.agent.rsplit("/", 1)[0]
        self.job_dir = f"{workdir}/jobs/{spec.run_id}/{spec.attempt_id}"
        self.t.login.run([self.t.login_python, "-c", MKDIR, self.job_dir])
        with tempfile.TemporaryDirectory(prefix="harness-job-") as tmp:
            spec_file, script = Path(tmp) / "spec.json", Path(tmp) / "job.sh"
            spec_file.write_text(spec_json(spec))
            script.write_text(batch_script(self.python, self.agent, self.job_dir))
            self.t.login.put(spec_file, f"{self.job_dir}/spec.json")
            self.t.login.put(script, f"{self.job_dir}/job.sh")
        host = self.t.host
        assert isinstance(host, ClusterHost)
        gpus = int(spec.requirements.gpus or 0)
        argv = sbatch_argv(self.t.cluster, name=job_name(host.repo), job_dir=self.job_dir,
                           script=f"{self.job_dir}/job.sh", gpus=gpus, minutes=time_limit_minutes(spec, self.t.cluster))
        r = self.t.login.run(argv, check=False, timeout=120)
        said = (r.stderr or r.stdout).strip()[-800:]
        if r.exit_code != 0 and SUBMISSION_REFUSED in said:  # Slurm's no to this job: asking again changes nothing
            self._give_final(refused_by_slurm(said))
            return
        if r.exit_code != 0:
            raise HostError(self.t.name, f"sbatch failed (exit {r.exit_code}): {said}",
                            hint="is Slurm's controller up? `sinfo` on the login node says")
        try:
            self.job_id = parse_job_id(r.stdout)
        except ValueError as exc:
            raise HostError(self.t.name, str(exc)) from None
        self.info = JobInfo(self.job_id, "PENDING", None, None)
        self._emit_state()

    def _look(self) -> None:
        if self._cancel.is_set() and not self._cancelled:
            self._cancelled = True
            running = self.info is not None and self.info.state == "RUNNING" and self._started
            self._scancel(["--batch", "--signal=USR2"] if running else [])
        try:
            r = self.t.login.run([self.t.login_python, "-c", LOOK, f"{self.job_dir}/events.jsonl", str(self._offset),
                                  str(self.job_id), SQUEUE_FORMAT], check=False, timeout=120)
            answer = json.loads(r.stdout.strip().splitlines()[-1]) if r.exit_code == 0 else None
        except (HostError, ValueError, IndexError):
            answer = None
        if answer is None:
            self._login_trouble()
            return
        if self._unreachable_since is not None:
            lost = time.monotonic() - self._unreachable_since
            self._lost_s += lost
            self._unreachable_since = None
            self._emit_state(note=f"the login node answers again after {lost:.1f} s")
        q_rc, q_out, _ = answer["squeue"]
        info = parse_squeue(q_out, str(self.job_id)) if q_rc == 0 else None
        if info is None and answer.get("sacct") and answer["sacct"][0] == 0:
            info = parse_sacct(answer["sacct"][1], str(self.job_id))
        data = base64.b64decode(answer["data"])
        if info is None:  # gone from the queue, and no accounting to ask: it has ended
            info = JobInfo(str(self.job_id), "UNKNOWN", None, self.info.node if self.info else None)
            ended = True
        else:
            ended = info.ended
        self._ran = self._ran or info.state in ("CONFIGURING", "RUNNING", "COMPLETING") or info.node is not None
        if (info.state, info.reason, info.node) != ((self.info.state, self.info.reason, self.info.node)
                                                     if self.info else None):
            self.info = info
            self._emit_state()  # before the events read in the same look: they happened after it started
        self._offset += len(data)
        self._take_events(data)
        if not ended:
            self._ended_at = None
            return
        if self._held_final is not None:
            self._events.append(self._held_final)
            self._finished = True
            return
        now = time.monotonic()
        # Ended while queued (never seen running, no node): nothing can still be on its way.
        never_ran = not self._started and not self._ran and self.info is not None and self.info.node is None
        if self._ended_at is None and not never_ran:
            self._ended_at = now  # its last lines may still be on their way through the shared storage
        elif never_ran or (self._ended_at is not None and now - self._ended_at > self.t.cluster.storage_lag):
            self._give_final(final_without_report(self.info, started=self._started, cancelled=self._cancelled,
                                                  output_tail=self._output_tail()))

    def _take_events(self, data: bytes) -> None:
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                event = decode_event_line(line)
            except ProtocolError as exc:
                self._events.append(exc)
                continue
            if isinstance(event, Hello):
                self._started = True
                self._held_final = None  # a requeued job started again: its earlier run's report is not the end
            if isinstance(event, Final):
                self._held_final = event
            elif event is not None:
                self._events.append(event)

    def _emit_state(self, note: str | None = None) -> None:
        assert self.info is not None
        self._events.append(JobState(job_id=self.info.job_id, state=self.info.state, reason=self.info.reason,
                                     node=self.info.node, note=note,
                                     login_lost_s=round(self._lost_s, 3) if self._lost_s else None))

    def _give_final(self, final: Final) -> None:
        self._events.append(final)
        self._finished = True

    def _login_trouble(self) -> None:
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            self._emit_state(note=f"cannot reach the login node; trying again for up to "
                                  f"{self.t.cluster.login_timeout:.0f} s (the job runs on)")
        elif now - self._unreachable_since > self.t.cluster.login_timeout:
            self._finished = True
            raise HostUnreachable(self.t.name, f"the login node stayed unreachable for "
                                               f"{self.t.cluster.login_timeout:.0f} s; job {self.job_id} runs on "
                                               f"(its result is in {self.job_dir})")
        try:  # a fresh connection for the next look
            self.t.login.close()
            self.t.login = connect(self.t.login.name, self.t.login.host)
        except HostError:
            pass

    def _scancel(self, options: list[str]) -> None:
        try:
            self.t.login.run(["scancel", *options, str(self.job_id)], check=False, timeout=60)
        except HostError as exc:
            self._stderr.append(f"scancel {self.job_id} failed: {exc}\n")

    def _output_tail(self) -> str:
        try:
            r = self.t.login.run([self.t.login_python, "-c", TAIL, f"{self.job_dir}/slurm-{self.job_id}.out"],
                                 check=False, timeout=60)
            return r.stdout
        except HostError:
            return ""


def queued_jobs(name: str, host: ClusterHost) -> list[JobInfo]:
    """This harness's jobs on the cluster's repo, as the queue shows them now."""
    with connect(f"{name} (login)", host.cluster.login_host) as login:
        r = login.run(["squeue", "-h", "-n", job_name(host.repo), "-o", SQUEUE_FORMAT], check=False, timeout=60)
    if r.exit_code != 0:
        raise HostError(name, f"squeue failed (exit {r.exit_code}): {(r.stderr or r.stdout).strip()[-500:]}")
    jobs = [parse_squeue(line, line.split("|", 1)[0]) for line in r.stdout.splitlines() if line.strip()]
    return [j for j in jobs if j]
