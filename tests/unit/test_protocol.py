"""The controller–agent protocol: one typed, versioned module; anything else on the link is an error."""

from __future__ import annotations

import json
import threading
from dataclasses import fields

import pytest

from harness.common import protocol
from harness.common.protocol import (
    EVENTS,
    PROTOCOL,
    BenchFacts,
    ChangedPaths,
    Final,
    GpuInfo,
    Journal,
    JournalServer,
    LockHolder,
    LockState,
    PatchFacts,
    PreflightFacts,
    ProtocolError,
    RecoveryReport,
    RepoStatus,
    RevertReport,
    ServerFacts,
    Spec,
    Status,
    StopReport,
    decode,
    encode,
)
from harness.errors import AgentProtocolError
from harness.hosts.jsonlines import JsonLinesChannel
from harness.hosts.transport import RemoteProcess
from harness.run.recording import AgentReport
from harness.run.runner import SilentReporter, _follow_agent


def minimal_spec(**over) -> dict:
    body = {"protocol": PROTOCOL, "run_id": "r", "attempt_id": "a", "repo": "/srv/sglang",
            "server": {"argv": ["python", "-m", "sglang.launch_server", {"slot": "port"}], "env": {"X": "1"},
                       "port": "auto"},
            "patches": [{"set": "s", "name": "0001.patch", "text": "--- a/x\n+++ b/x\n"}],
            "bench": [{"name": "b", "argv": ["python"], "repeats": 2}],
            "timeouts": {"ready": 5, "no_progress": 5, "bench": 5, "stop_grace": 1, "fatal_grace": 1,
                         "gpu_release": 1}}
    body.update(over)
    return body


def test_spec_survives_the_json_round_trip_typed():
    spec = Spec.decode(json.loads(json.dumps(minimal_spec())))
    assert spec.server.argv[-1] == {"slot": "port"} and spec.server.port == "auto"
    assert spec.patches[0].name == "0001.patch" and spec.bench[0].repeats == 2
    assert spec.timeouts.ready == 5
    assert Spec.decode(json.loads(json.dumps(spec.to_dict()))) == spec


def test_a_spec_of_another_protocol_version_is_refused_naming_both():
    with pytest.raises(ProtocolError, match=rf"protocol 1, this agent {PROTOCOL}"):
        Spec.decode(minimal_spec(protocol=1))


@pytest.mark.parametrize("where", ["top", "server", "bench"])
def test_an_unknown_key_anywhere_in_the_spec_is_an_error_naming_it(where):
    body = minimal_spec()
    target = {"top": body, "server": body["server"], "bench": body["bench"][0]}[where]
    target["surprise"] = 1
    with pytest.raises(ProtocolError, match="surprise"):
        Spec.decode(body)


def test_a_missing_required_key_is_an_error_naming_it():
    body = minimal_spec()
    del body["repo"]
    with pytest.raises(ProtocolError, match="repo"):
        Spec.decode(body)


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_every_event_kind_round_trips(kind):
    event = EVENTS[kind]()
    back = decode(json.loads(json.dumps(encode(event))))
    assert type(back) is EVENTS[kind] and back == event


def test_an_unknown_event_kind_or_key_is_an_error():
    with pytest.raises(ProtocolError, match="unknown agent event 'telepathy'"):
        decode({"event": "telepathy", "t": 0})
    with pytest.raises(ProtocolError, match="mood"):
        decode({"event": "stage", "t": 0, "stage": "wait", "mood": "fine"})
    with pytest.raises(ProtocolError):
        decode(["not", "an", "object"])


def test_final_declares_every_status_value_records_use():
    assert {s.value for s in protocol.Status} == {"ok", "crashed", "hung", "apply-failed", "preflight-failed",
                                                  "bench-failed", "infra-error", "aborted"}
    assert "status" in {f.name for f in fields(Final)}


def every_part_filled() -> Final:
    journal = Journal(run_id="r", attempt_id="a", marker="r/a", agent_pid=7, repo="/srv", base_commit="c" * 40,
                      tree_before="d" * 64, restore=["x.py"], delete=["new.py"], created_dirs=["pkg"],
                      server=JournalServer(pid=10, pgid=10, start=99), state="running", backup="/b", ignored_before=[])
    return Final(
        status=Status.CRASHED, error="server exited with code 1", timings={"wait_s": 1.5}, attempt_dir="/w",
        abort_reason=None, budget_exceeded=False, gpu_dirty={"10": 512},
        preflight=PreflightFacts(base_commit="c" * 40, gpus=[GpuInfo(index="0", name="H200", compute_cap="9.0")],
                                 patch_variants={"s": "sglang==0.5.16"}, port=30001,
                                 locked_by=LockHolder(run_id="r0", attempt_id="a0", pid=3, since="t")),
        patch=PatchFacts(changed_paths=ChangedPaths(restore=["x.py"], delete=["new.py"]), compiled=["x.py"]),
        server=ServerFacts(log="/w/server.log", pid=10, exit_code=1,
                           stop=StopReport(signal="TERM", stragglers=[], left=[], stop_s=0.5)),
        bench=BenchFacts(files={"b": "/w/bench-b.jsonl"}, profile_error="no profile"),
        revert=RevertReport(verified=True, tree_before="d" * 64, tree_after="d" * 64, diff=[]),
        recovered=RecoveryReport(journal=journal, stop=StopReport(state="stopped"),
                                 revert=RevertReport(verified=False, diff=["x.py"]), by="recover"),
        repo_status=RepoStatus(repo="/srv", exists=True, git=True, lock=LockState(held=True, run_id="r0"),
                               journal=journal, gpus=[], gpu_apps={"10": 512}, head=None, dirty=[]),
        artifacts={"/w/server.log": "e" * 64})


def test_the_final_report_crosses_the_link_typed_part_by_part():
    final = every_part_filled()
    wire = json.loads(json.dumps(encode(final)))
    assert wire["status"] == "crashed" and wire["recovered"]["journal"]["server"]["pid"] == 10  # plain JSON
    back = decode(wire)
    assert back == final
    assert isinstance(back, Final) and type(back.status) is Status and back.status is Status.CRASHED
    assert isinstance(back.recovered, RecoveryReport) and isinstance(back.recovered.journal.server, JournalServer)
    assert isinstance(back.preflight.gpus[0], GpuInfo) and isinstance(back.repo_status.lock, LockState)


@pytest.mark.parametrize("status", list(Status))
def test_every_status_round_trips_as_the_enum(status):
    back = decode(json.loads(json.dumps(encode(Final(status=status)))))
    assert type(back.status) is Status and back.status is status


def test_a_status_the_enum_does_not_know_or_an_unknown_key_in_a_part_is_an_error():
    with pytest.raises(ProtocolError, match="exploded"):
        decode({"event": "final", "t": 0, "status": "exploded"})
    body = encode(every_part_filled())
    body["server"]["stop"]["mood"] = "calm"
    with pytest.raises(ProtocolError, match=r"Final\.server\.stop: unknown key\(s\) mood"):
        decode(json.loads(json.dumps(body)))


def test_records_and_the_final_report_share_the_one_status_type():
    from harness.results.schemas import Record

    assert Record.model_fields["status"].annotation is Status
    assert {f.name: f.type for f in fields(Final)}["status"] == "Status"


def test_every_typed_part_is_declared_nested_so_it_is_built_on_decode():
    """A field typed with a message or an enum but missing from its class's NESTED would arrive as a plain dict
    or string: the drift this test catches."""
    import re
    from enum import Enum

    typed = {name: obj for name, obj in vars(protocol).items()
             if isinstance(obj, type) and (issubclass(obj, protocol.Message) or issubclass(obj, Enum))
             and obj not in (protocol.Message, protocol.Event)}
    missing = []
    for cls in typed.values():
        if not issubclass(cls, protocol.Message):
            continue
        for f in fields(cls):
            named = set(re.findall(r"\w+", str(f.type))) & set(typed) - {"Mode"}  # Spec.mode stays a str
            if named and f.name not in cls.NESTED:
                missing.append(f"{cls.__name__}.{f.name}")
    assert missing == []


PREVIOUS_AGENTS_JOURNAL = {  # exactly what the agent of protocol 4 wrote (.git/harness/journal.json)
    "run_id": "r1", "attempt_id": "a1", "marker": "r1/a1", "version": 3, "agent_pid": 4242, "repo": "/srv/sglang",
    "base_commit": "c" * 40, "tree_before": "d" * 64, "dirty_before": ["notes.txt"], "restore": ["pkg/x.py"],
    "delete": ["pkg/new.py"], "created_dirs": ["pkg/new"], "server": {"pid": 11, "pgid": 11, "start": 123},
    "state": "running", "created": "2026-01-01T00:00:00+0000", "backup": "/srv/sglang/.git/harness/backup",
    "ignored_before": ["build/x.o"]}


def test_a_journal_written_by_the_previous_agent_reads_whole_and_writes_back_the_same():
    journal = Journal.read(json.loads(json.dumps(PREVIOUS_AGENTS_JOURNAL)))
    assert journal.server == JournalServer(pid=11, pgid=11, start=123) and journal.restore == ["pkg/x.py"]
    # The on-disk format is unchanged but for `checkout`, which only a bisect step's journal fills (version 4).
    assert journal.to_dict() == {**PREVIOUS_AGENTS_JOURNAL, "checkout": None}


def test_an_older_journal_reads_leniently_and_keeps_its_version():
    old = {k: v for k, v in PREVIOUS_AGENTS_JOURNAL.items() if k not in ("version", "backup", "ignored_before")}
    old.update(delete=None, some_older_key=1)
    journal = Journal.read(old)
    assert journal.version == 2  # no version: an agent before version 3 (its manifest is tracked+untracked only)
    assert journal.delete == [] and journal.backup is None and journal.ignored_before is None
    with pytest.raises(ProtocolError):  # on the link it is strict: both ends are of one version
        Journal.from_dict(old)


class ScriptedAgent(RemoteProcess):
    """An agent that says the given lines, then ends: for the controller's side of the link."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = list(lines)
        self.written: list[bytes] = []
        self._stderr: list[str] = []
        self.killed = threading.Event()

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close_stdin(self) -> None:
        pass

    def readline(self) -> bytes:
        return self.lines.pop(0) if self.lines else b""

    def wait(self, timeout: float | None = None) -> int | None:
        return 0

    def kill(self) -> None:
        self.killed.set()


def spec_obj() -> Spec:
    return Spec.decode(minimal_spec())


def line(event: protocol.Event) -> bytes:
    return (json.dumps(encode(event)) + "\n").encode()


def test_controller_follows_a_well_formed_agent_to_its_final_report():
    agent = ScriptedAgent([line(protocol.Hello()), line(protocol.StageChanged(stage="bench")),
                           line(protocol.BenchResult(case="b", repeat=0, result={"output_throughput": 1.0})),
                           line(Final(status="ok"))])
    follow = AgentReport()
    _follow_agent(JsonLinesChannel(agent, "box"), spec_obj(), follow, SilentReporter(), "x", is_local=True)
    assert follow.final is not None and follow.final.status == Status.OK
    assert follow.bench_rows == {"b": [{"output_throughput": 1.0}]}
    sent = json.loads(agent.written[0])
    assert sent["protocol"] == PROTOCOL and Spec.decode(sent) == spec_obj()


def test_controller_refuses_an_agent_that_sends_an_unknown_event():
    agent = ScriptedAgent([line(protocol.Hello()), b'{"event": "telepathy", "t": 0}\n', line(Final())])
    with pytest.raises(AgentProtocolError, match="telepathy"):
        _follow_agent(JsonLinesChannel(agent, "box"), spec_obj(), AgentReport(), SilentReporter(), "x", is_local=True)
    assert agent.killed.is_set()


def test_controller_says_so_when_the_agent_ends_without_a_final_report():
    agent = ScriptedAgent([line(protocol.Hello())])
    with pytest.raises(AgentProtocolError, match="without a final report"):
        _follow_agent(JsonLinesChannel(agent, "box"), spec_obj(), AgentReport(), SilentReporter(), "x", is_local=True)
