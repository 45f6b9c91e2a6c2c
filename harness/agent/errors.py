"""How a stage ends an attempt early: `StageFailed` (with a status) or `Aborted` (the link said stop)."""

from __future__ import annotations

from typing import Any

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


class StageFailed(Exception):
    """Ends the attempt with `status`; `message` says why in words a user can act on; `details` go into
    the final report as they are (their keys are fields of `protocol.Final`)."""

    def __init__(self, status: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details


def abort_message(reason: str) -> str:
    """The record's `error` for an aborted attempt: the reason in words, without repeating "aborted"."""
    if reason.startswith("signal "):
        return "the agent received %s and stopped" % reason
    return ABORT_REASONS.get(reason, reason)
