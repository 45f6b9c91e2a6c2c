"""The attempt channel: how the controller talks to one attempt's agent, whatever carries the words.

Typed both ways — a `Spec` in, `Event`s out, pings and an abort request — so the runner never sees bytes.
Two implementations: `jsonlines.JsonLinesChannel` (the agent as a process whose stdin/stdout carry JSON lines,
over SSH or on this machine) and `slurmjob.SlurmAttempt` (the agent as a batch job, its events read from the
shared storage); `targets.open_attempt` picks one for a host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..common.protocol import Event, Spec


@dataclass(frozen=True)
class AgentExit:
    """How the agent ended, for the error message when it ended without its final report."""

    code: int | None  # None: not (yet) known to have exited
    stderr_tail: str  # the last lines it (or the channel's own machinery) wrote to stderr


class AttemptChannel(ABC):
    """One attempt's agent. `send_spec` first; `receive` until it returns None or a `Final`; `close` at the end.
    `ping` and `abort` may be called from other threads while `receive` waits."""

    @abstractmethod
    def send_spec(self, spec: Spec) -> None:
        """Start the attempt: the agent gets its spec."""

    @abstractmethod
    def receive(self) -> Event | None:
        """The next event; None when the agent's stream ended.

        Raises `HostUnreachable` when the link went silent, `AgentProtocolError` when the agent speaks another
        protocol (the channel is killed first in both cases)."""

    @abstractmethod
    def ping(self, echo: int | None = None) -> None:
        """Keep the agent's heartbeat fresh; with `echo`, the agent answers with a `Pong` (its clock)."""

    @abstractmethod
    def abort(self) -> None:
        """Ask the agent to stop the server, revert and send its final report."""

    @abstractmethod
    def close(self) -> None:
        """No more words to the agent (its events may still be read)."""

    @abstractmethod
    def kill(self) -> None:
        """Drop the agent now; its dead man's switch (or Slurm's signal) stops the server and reverts."""

    @abstractmethod
    def exit(self, timeout: float) -> AgentExit:
        """How the agent ended, waiting up to `timeout` seconds for it to exit."""
