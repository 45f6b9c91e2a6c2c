"""How a stage ends an attempt early: `StageFailed` (with a status) or `Aborted` (the link said stop)."""

from __future__ import annotations

from typing import Any


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
