"""The attempt channel, without a host: typed words in, typed events out, on both implementations — the agent's
process speaking JSON lines (SSH, local) and the Slurm job read through its login node."""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from harness.common import protocol
from harness.common.protocol import PROTOCOL, BenchResult, Final, Hello, JobState, ServerSpec, Spec, Status, encode
from harness.errors import AgentProtocolError, HostUnreachable
from harness.experiments.config import ClusterConfig, ClusterHost
from harness.hosts.jsonlines import JsonLinesChannel
from harness.hosts.slurmjob import LOOK, MKDIR, TAIL, SlurmAttempt, SlurmTransport
from harness.hosts.transport import CommandResult, RemoteProcess, Transport


def line(event: protocol.Event) -> bytes:
    return (json.dumps(encode(event)) + "\n").encode()


def spec() -> Spec:
    return Spec(run_id="r", attempt_id="a", repo="/shared/sglang", server=ServerSpec(argv=["python"]))


# ============================================================================ JSON lines over a process


class Pipe(RemoteProcess):
    """The agent's pipes: what it will say (a line, or an exception readline raises), and what it was told."""

    def __init__(self, said: list[bytes | Exception], exit_code: int | None = 0, stderr: str = "") -> None:
        self.said = list(said)
        self.written: list[bytes] = []
        self.read_timeout: float | None = None
        self.stdin_closed = False
        self.killed = threading.Event()
        self.exit_code = exit_code
        self._stderr = [stderr]

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close_stdin(self) -> None:
        self.stdin_closed = True

    def readline(self) -> bytes:
        if not self.said:
            return b""
        item = self.said.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def set_read_timeout(self, seconds: float | None) -> None:
        self.read_timeout = seconds

    def wait(self, timeout: float | None = None) -> int | None:
        return self.exit_code

    def kill(self) -> None:
        self.killed.set()


def test_the_agent_gets_its_spec_and_commands_as_the_json_lines_it_reads():
    pipe = Pipe([])
    channel = JsonLinesChannel(pipe, "box")
    channel.send_spec(spec())
    channel.ping()
    channel.ping(echo=1)
    channel.abort()
    assert all(w.endswith(b"\n") and w.count(b"\n") == 1 for w in pipe.written), pipe.written
    sent = [json.loads(w) for w in pipe.written]
    assert Spec.decode(sent[0]) == spec() and sent[0]["protocol"] == PROTOCOL
    assert sent[1:] == [{"cmd": "ping"}, {"cmd": "ping", "echo": 1}, {"cmd": "abort"}]


def test_events_arrive_typed_and_a_login_banner_before_them_is_passed_over():
    pipe = Pipe([b"Welcome to box (last login: yesterday)\n", line(Hello(hostname="box")), b"\n",
                 line(Final(status=Status.OK))])
    channel = JsonLinesChannel(pipe, "box")
    first, last = channel.receive(), channel.receive()
    assert isinstance(first, Hello) and first.hostname == "box"
    assert isinstance(last, Final) and last.status == Status.OK
    assert channel.receive() is None  # end of stream
    assert not pipe.killed.is_set()


def test_a_json_line_that_is_no_event_of_this_protocol_kills_the_agent_and_says_so():
    pipe = Pipe([b'{"event": "telepathy", "t": 0}\n'])
    channel = JsonLinesChannel(pipe, "box")
    with pytest.raises(AgentProtocolError, match="another protocol.*telepathy"):
        channel.receive()
    assert pipe.killed.is_set()


def test_silence_past_the_limit_is_the_host_unreachable_and_the_agent_is_dropped():
    pipe = Pipe([TimeoutError("no data from the host")])
    channel = JsonLinesChannel(pipe, "box", silence_s=9.0)
    assert pipe.read_timeout == 9.0
    with pytest.raises(HostUnreachable, match="no word from the agent for 9 s") as caught:
        channel.receive()
    assert caught.value.host == "box"
    assert pipe.killed.is_set()


def test_close_ends_the_agents_stdin_and_exit_tells_its_code_and_stderr():
    pipe = Pipe([], exit_code=3, stderr="Traceback: boom\n")
    channel = JsonLinesChannel(pipe, "box")
    channel.close()
    assert pipe.stdin_closed
    ended = channel.exit(timeout=5)
    assert (ended.code, ended.stderr_tail) == (3, "Traceback: boom\n")


# ============================================================================ the Slurm job


class LoginNode(Transport):
    """Slurm's commands as the login node answers them: sbatch's reply, then one scripted answer per look
    (the event file's new bytes and the queue's line for the job)."""

    def __init__(self, sbatch: CommandResult, looks: list[tuple[str, bytes]]) -> None:
        super().__init__("c1 (login)", ClusterConfig(kind="slurm", workdir="/w", repo="/r").login_host)
        self.sbatch = sbatch
        self.looks = list(looks)
        self.files: dict[str, str] = {}
        self.scancels: list[list[str]] = []

    def _run(self, argv: list[str], timeout: float) -> CommandResult:
        if argv[0] == "sbatch":
            return replace(self.sbatch, argv=argv)
        if argv[0] == "scancel":
            self.scancels.append(argv[1:])
            return CommandResult(argv, 0, "", "")
        if argv[2] == MKDIR:
            return CommandResult(argv, 0, "", "")
        if argv[2] == TAIL:  # the job's output file
            return CommandResult(argv, 0, "slurmstepd: error: the agent was killed\n", "")
        assert argv[2] == LOOK, argv
        state, data = self.looks.pop(0) if self.looks else ("COMPLETED", b"")
        answer = {"data": base64.b64encode(data).decode(), "squeue": [0, f"{argv[5]}|{state}|None|node1\n", ""],
                  "sacct": None}
        return CommandResult(argv, 0, json.dumps(answer) + "\n", "")

    def start(self, argv: list[str]) -> RemoteProcess:
        raise AssertionError("a batch job starts no process on the login node")

    def put(self, local: Path, remote: str) -> None:
        self.files[remote] = local.read_text()

    def get(self, remote: str, local: Path) -> None:
        raise AssertionError("nothing to fetch here")


def job(login: LoginNode) -> SlurmAttempt:
    cluster = ClusterConfig(kind="slurm", workdir="/w", repo="/r", poll=0.01, storage_lag=0)
    transport = SlurmTransport("c1", ClusterHost.of("c1", cluster))
    transport.login = login
    return transport.attempt(python="python3", agent="/w/agent.pyz")


def all_events(channel: SlurmAttempt) -> list[protocol.Event]:
    events = []
    while (ev := channel.receive()) is not None:
        events.append(ev)
    return events


SUBMITTED = CommandResult([], 0, "4242\n", "")


def test_the_spec_becomes_the_jobs_file_without_the_heartbeat_and_the_queue_speaks_in_typed_job_states():
    login = LoginNode(SUBMITTED, [("RUNNING", line(Hello()) + line(Final(status=Status.OK)))])
    channel = job(login)
    mine = spec()
    channel.send_spec(mine)
    on_file = Spec.decode(json.loads(login.files["/w/jobs/r/a/spec.json"]))
    assert on_file == replace(mine, heartbeat_timeout_s=None), "a job has no controller link to watch"
    assert mine.heartbeat_timeout_s == 20.0, "the caller's spec is left as it was"
    events = all_events(channel)
    assert [type(e) for e in events] == [JobState, JobState, Hello, JobState, Final]
    assert [e.state for e in events if isinstance(e, JobState)] == ["PENDING", "RUNNING", "COMPLETED"]
    assert events[1].job_id == "4242" and events[1].node == "node1"
    assert channel.exit(timeout=5).code == 0


def test_a_job_slurm_refuses_ends_at_once_with_a_typed_preflight_failure():
    login = LoginNode(CommandResult([], 1, "", "sbatch: error: Batch job submission failed: Invalid partition"), [])
    channel = job(login)
    channel.send_spec(spec())
    final, = all_events(channel)
    assert isinstance(final, Final) and final.status == Status.PREFLIGHT_FAILED
    assert "Invalid partition" in (final.error or "") and final.preflight.cannot_run
    assert login.looks == [] and login.scancels == []


def test_a_requeued_jobs_first_report_is_dropped_and_only_the_last_run_ends_the_attempt():
    first_run = line(Hello(pid=1)) + line(BenchResult(case="b", result={"x": 1.0})) + line(Final(status=Status.ABORTED))
    second_run = b"srun: some word of Slurm's\n" + line(Hello(pid=2)) + line(Final(status=Status.OK))
    login = LoginNode(SUBMITTED, [("RUNNING", first_run), ("PENDING", b""), ("RUNNING", second_run)])
    channel = job(login)
    channel.send_spec(spec())
    events = [e for e in all_events(channel) if not isinstance(e, JobState)]
    assert [type(e) for e in events] == [Hello, BenchResult, Hello, Final]
    assert [e.pid for e in events if isinstance(e, Hello)] == [1, 2]
    assert isinstance(events[-1], Final) and events[-1].status == Status.OK


def test_an_abort_of_a_running_job_signals_the_agent_through_scancel():
    login = LoginNode(SUBMITTED, [("RUNNING", line(Hello())), ("RUNNING", line(Final(status=Status.ABORTED)))])
    channel = job(login)
    channel.send_spec(spec())
    assert [type(channel.receive()) for _ in range(3)] == [JobState, JobState, Hello]
    channel.ping(echo=1)  # nothing to answer on a job: no Pong ever comes
    channel.abort()
    events = all_events(channel)
    assert login.scancels == [["--batch", "--signal=USR2", "4242"]]
    assert isinstance(events[-1], Final) and events[-1].status == "aborted"
    assert not any(isinstance(e, protocol.Pong) for e in events)


def test_a_line_of_another_protocol_in_the_event_file_comes_after_the_ones_before_it_then_cancels_the_job():
    login = LoginNode(SUBMITTED, [("RUNNING", line(Hello()) + b'{"event": "telepathy", "t": 0}\n')])
    channel = job(login)
    channel.send_spec(spec())
    assert [type(channel.receive()) for _ in range(3)] == [JobState, JobState, Hello]
    with pytest.raises(AgentProtocolError, match="telepathy"):
        channel.receive()
    assert login.scancels == [["4242"]]


def test_a_requeued_job_whose_second_run_dies_without_a_report_ends_with_one_made_from_its_state():
    first_run = line(Hello(pid=1)) + line(Final(status=Status.OK))
    login = LoginNode(SUBMITTED, [("RUNNING", first_run), ("PENDING", b""), ("RUNNING", line(Hello(pid=2))),
                                  ("FAILED", b""), ("FAILED", b"")])  # ended; no late lines either
    channel = job(login)
    channel.send_spec(spec())
    final = all_events(channel)[-1]
    assert isinstance(final, Final) and final.status == "infra-error", final
    assert "FAILED without the agent's final report" in (final.error or "")
    assert "the agent was killed" in (final.error or "")
