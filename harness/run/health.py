"""Which hosts a sweep still uses (pure: the caller passes the clock, and holds the scheduler's lock).

A host that fails `down_after` times in a row (unreachable, link lost, agent gone) is DOWN: no more work goes
to it. A down host is probed `reprobe_after` seconds later, then twice that after each failed probe, up to
REPROBE_MAX; an answer brings it back, and after `reprobe_tries` failed probes in a row it is given up: down
for the rest of the sweep. So a dead host costs a sweep at most its probes' backoff (30 + 60 + 120 s by
default), never the budget."""

from __future__ import annotations

import time
from dataclasses import dataclass

DOWN_AFTER = 2  # infrastructure failures in a row after which a host is down for the rest of the sweep
# (failures on a host that is then down are the host's: they do not count against the attempt's tries)
REPROBE_AFTER = 30.0  # seconds from a host going down to its first re-probe; each failed probe doubles it...
REPROBE_MAX = 600.0  # ...up to this
REPROBE_TRIES = 3  # failed re-probes in a row after which a down host is down for the rest of the sweep


@dataclass(frozen=True)
class DownHost:
    """A host this sweep stopped using: why, and since when (wall clock)."""

    reason: str
    since: float

    def describe(self, name: str) -> str:
        return f"{name} down since {time.strftime('%H:%M', time.localtime(self.since))}: {self.reason}"


def reprobe_delay(first: float, failed_probes: int) -> float:
    """Seconds to the next probe of a down host: `first` after it went down, doubled by each failed probe."""
    return min(first * 2.0 ** failed_probes, REPROBE_MAX)


def first_line(text: str, default: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else default


class HostHealth:
    """Failures in a row per host, the hosts down and why, and when each down host is probed next."""

    def __init__(self, down: dict[str, DownHost], *, down_after: int = DOWN_AFTER,
                 reprobe_after: float = REPROBE_AFTER, reprobe_tries: int = REPROBE_TRIES) -> None:
        self.down = down  # host → why and since when (the sweep's outcome holds this same dict)
        self.changes = 0  # hosts gone down or come back so far: what caches of the live hosts are stamped with
        self.down_after = max(1, down_after)
        self.reprobe_after = reprobe_after
        self.reprobe_tries = max(1, reprobe_tries)
        self._fails_in_row: dict[str, int] = {}  # host → infrastructure failures since its last good attempt
        self._probe_due: dict[str, float] = {}  # down host → when (monotonic) it is probed next
        self._probe_fails: dict[str, int] = {}  # down host → re-probes failed in a row
        self._given_up: set[str] = set()  # down hosts no longer probed: down for the rest of the sweep

    def has_failures_in_row(self, host: str) -> bool:
        return bool(self._fails_in_row.get(host))

    def succeeded(self, host: str) -> None:
        self._fails_in_row[host] = 0

    def failed(self, host: str, reason: str, *, now: float, wall: float) -> DownHost | None:
        """One more infrastructure failure in a row (`now`: monotonic, `wall`: the wall clock); the host's
        DownHost when this failure took it down."""
        fails = self._fails_in_row[host] = self._fails_in_row.get(host, 0) + 1
        if fails < self.down_after or host in self.down:
            return None
        down = DownHost(f"{first_line(reason, 'infra-error')} ({fails} failures in a row)", wall)
        self.down[host] = down
        self.changes += 1
        self._probe_due[host] = now + reprobe_delay(self.reprobe_after, 0)
        self._probe_fails[host] = 0
        return down

    def given_up(self, host: str) -> bool:
        return host in self._given_up

    def probe_wait(self, host: str, now: float) -> float:
        """Seconds until a down host's next probe is due (<= 0: due now)."""
        return self._probe_due[host] - now

    def probe_answered(self, host: str, answer: int | str, *, now: float) -> bool:
        """A probe's answer (a GPU count, or why the host could not say); True when the host is back."""
        if isinstance(answer, int):
            del self.down[host]
            self.changes += 1
            self._fails_in_row[host] = 0
            self._probe_fails.pop(host, None)
            return True
        fails = self._probe_fails[host] = self._probe_fails.get(host, 0) + 1
        if fails >= self.reprobe_tries:
            self._given_up.add(host)
            d = self.down[host]
            self.down[host] = DownHost(f"{d.reason}; {fails} re-probes failed, the last: "
                                       f"{first_line(answer, 'no answer')}", d.since)
        else:
            self._probe_due[host] = now + reprobe_delay(self.reprobe_after, fails)
        return False
