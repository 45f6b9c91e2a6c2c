"""How a stage ends an attempt early: `StageFailed` (with a status) or `Aborted` (the link said stop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..common.protocol import Final, LockHolder, Status

# The link's reasons for stopping (`abort_reason` in the record), in words; the status already says "aborted".
ABORT_REASONS = {
    "controller-abort": "stopped by the controller (Ctrl-C, SIGTERM or SIGHUP there, or a cancelled attempt)",
    "controller-gone": "the controller went away (its connection closed); the dead man's switch stopped it",
    "controller-silent": "no word from the controller within heartbeat_timeout (controller-silent); "
                         "the dead man's switch stopped it",
    "slurm-time-limit": "the Slurm job's time limit was near (SIGUSR1 from Slurm, --signal=B:USR1@120): the "
                        "attempt's budget is spent",
    "slurm-cancel": "the Slurm job was cancelled (SIGUSR2 from the controller's scancel)",
}


class Aborted(Exception):
    """The controller asked to stop, went silent or went away, or the attempt's budget is spent."""


@dataclass
class FailureFacts:
    """What a failing stage learned that the final report carries besides its message."""

    dirty: Optional[list[str]] = None  # dirty paths no allow-list covers
    locked_by: Optional[LockHolder] = None
    port_in_use: Optional[int] = None
    cannot_run: Optional[list[str]] = None  # why the experiment does not fit the host
    gpu_dirty: Optional[dict[str, int]] = None  # pid → MiB still held
    compile_errors: Optional[list[str]] = None
    foreign_port: Optional[bool] = None  # another process answers on the server's port

    def record_in(self, final: Final) -> None:
        """Each fact that was given, in its part of the final report."""
        pre = final.preflight
        pre.dirty = self.dirty if self.dirty is not None else pre.dirty
        pre.locked_by = self.locked_by if self.locked_by is not None else pre.locked_by
        pre.port_in_use = self.port_in_use if self.port_in_use is not None else pre.port_in_use
        pre.cannot_run = self.cannot_run if self.cannot_run is not None else pre.cannot_run
        final.gpu_dirty = self.gpu_dirty if self.gpu_dirty is not None else final.gpu_dirty
        if self.compile_errors is not None:
            final.patch.compile_errors = self.compile_errors
        if self.foreign_port is not None:
            final.server.foreign_port = self.foreign_port


class StageFailed(Exception):
    """Ends the attempt with `status`; `message` says why in words a user can act on; `facts` go into the
    final report."""

    def __init__(self, status: Status, message: str, facts: Optional[FailureFacts] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.facts = facts or FailureFacts()


def abort_message(reason: str) -> str:
    """The record's `error` for an aborted attempt: the reason in words, without repeating "aborted"."""
    if reason.startswith("signal "):
        return "the agent received %s and stopped" % reason
    return ABORT_REASONS.get(reason, reason)
