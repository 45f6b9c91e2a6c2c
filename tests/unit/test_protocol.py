"""The controller–agent protocol: one typed, versioned module; anything else on the link is an error."""

from __future__ import annotations

import json
import threading
from dataclasses import fields

import pytest

from harness.common import protocol
from harness.common.protocol import EVENTS, PROTOCOL, Final, ProtocolError, Spec, decode, encode
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
    assert follow.final is not None and follow.final["status"] == "ok"
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
