"""The agent's wire format on the controller side, and the attempt channel over a process that speaks it.

The agent reads one JSON line of `Spec`, then `{"cmd": "ping"}` / `{"cmd": "abort"}` lines, and writes one
JSON line per event (`protocol.encode`). This module is the only place in the controller that turns these
into bytes or back: `JsonLinesChannel` for an agent on stdin/stdout (SSH or local), and the two helpers below
for the Slurm job, which hands the agent its spec as a file and reads its events from one.
"""

from __future__ import annotations

import json
from typing import Any

from ..common.protocol import Event, ProtocolError, Spec, decode
from ..errors import AgentProtocolError, HostUnreachable
from .channel import AgentExit, AttemptChannel
from .transport import RemoteProcess


def spec_json(spec: Spec) -> str:
    """The spec as the agent reads it (one line, no newline)."""
    return json.dumps(spec.to_dict())


def decode_event_line(line: bytes) -> Event | None:
    """One line the agent wrote, as its event; None for a line that is not JSON at all (a login banner, a
    stray print: the agent writes JSON lines only). A JSON line that is no event of this protocol is a
    `ProtocolError`."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return decode(data)


def _command_line(cmd: str, **fields: Any) -> bytes:
    return (json.dumps({"cmd": cmd, **fields}) + "\n").encode()


class JsonLinesChannel(AttemptChannel):
    """The agent as a process: the spec and commands go to its stdin, its events come from its stdout.
    After `silence_s` without a line the link counts as lost (the agent says "alive" every 2 s)."""

    def __init__(self, proc: RemoteProcess, host_name: str, silence_s: float = 15.0) -> None:
        self.proc = proc
        self.host_name = host_name
        self.silence_s = silence_s
        proc.set_read_timeout(silence_s)

    def send_spec(self, spec: Spec) -> None:
        self.proc.write((spec_json(spec) + "\n").encode())

    def receive(self) -> Event | None:
        while True:
            try:
                line = self.proc.readline()
            except TimeoutError:
                self.proc.kill()
                raise HostUnreachable(self.host_name,
                                      f"connection lost: no word from the agent for {self.silence_s:.0f} s (it stops "
                                      f"the server and reverts by itself when the link or heartbeat is gone)") from None
            if not line:
                return None
            try:
                event = decode_event_line(line)
            except ProtocolError as exc:
                self.proc.kill()
                raise AgentProtocolError(f"the agent on the host speaks another protocol: {exc}") from None
            if event is not None:
                return event

    def ping(self, echo: int | None = None) -> None:
        self.proc.write(_command_line("ping") if echo is None else _command_line("ping", echo=echo))

    def abort(self) -> None:
        self.proc.write(_command_line("abort"))

    def close(self) -> None:
        self.proc.close_stdin()

    def kill(self) -> None:
        self.proc.kill()

    def exit(self, timeout: float) -> AgentExit:
        code = self.proc.wait(timeout=timeout)
        return AgentExit(code, self.proc.stderr_tail())
