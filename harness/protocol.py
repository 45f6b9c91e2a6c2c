"""The controller–agent protocol: one versioned module that both sides import.

Standard library only (it ships inside the agent's zipapp and runs under the host's Python >= 3.8).
The controller writes one `Spec` as a JSON line on the agent's stdin, then `Command`s (ping, abort);
the agent answers with JSON-lines events on stdout and ends with exactly one `Final`. Both sides check
`PROTOCOL`: an agent and a controller of different versions refuse each other with a clear message.
"""

from __future__ import annotations

from enum import Enum

PROTOCOL = 2


class Status(str, Enum):
    """How an attempt ended. The string values are what records on disk say."""

    OK = "ok"
    CRASHED = "crashed"
    HUNG = "hung"
    APPLY_FAILED = "apply-failed"
    PREFLIGHT_FAILED = "preflight-failed"
    BENCH_FAILED = "bench-failed"
    INFRA_ERROR = "infra-error"
    ABORTED = "aborted"

    def __str__(self) -> str:
        return self.value
