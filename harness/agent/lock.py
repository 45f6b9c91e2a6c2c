"""One attempt per target repo at a time: an flock on `.git/harness/lock`, its holder in `lock.json`."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable
from typing import Optional

from ..common.protocol import LockHolder, LockState, Status
from .errors import FailureFacts, StageFailed
from .hostio import read_json, write_json_atomic

# The holder name of a watchdog cleaning up after its dead agent (watchdog.py): its work is bounded (stop the
# server, revert), so an attempt that finds it holding the lock waits for it rather than calling the host busy.
WATCHDOG = "watchdog"


class RepoLock:
    def __init__(self, harness_dir: str) -> None:
        self.path = os.path.join(harness_dir, "lock")
        self.holder_path = self.path + ".json"
        self._fd: Optional[int] = None

    def acquire(self, repo: str, holder: LockHolder, wait_s: float, tick: Callable[[], None],
                cleanup_wait_s: float = 0.0) -> None:
        """Take the lock, waiting up to `wait_s` — or `cleanup_wait_s` while a watchdog holds it — (calling
        `tick` between tries); else say who holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        start = time.monotonic()
        deadline = start + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise
            if time.monotonic() >= deadline and self.holder().attempt_id == WATCHDOG:
                deadline = max(deadline, start + cleanup_wait_s)  # a cleanup in progress: bounded, wait for it
            if time.monotonic() >= deadline:
                os.close(fd)
                other = self.holder()
                raise StageFailed(
                    Status.INFRA_ERROR,
                    "target repo %s is locked by run %s attempt %s (agent pid %s on this host) since %s"
                    % (repo, _or_unknown(other.run_id), _or_unknown(other.attempt_id), _or_unknown(other.pid),
                       _or_unknown(other.since)),
                    facts=FailureFacts(locked_by=other))
            tick()
        self._fd = fd
        mine = LockHolder(run_id=holder.run_id, attempt_id=holder.attempt_id, pid=os.getpid(),
                          since=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        write_json_atomic(self.holder_path, mine.to_dict())

    def holder(self) -> LockHolder:
        """Who holds it, as its `lock.json` says (any harness version's: read leniently)."""
        try:
            data = read_json(self.holder_path)
            return LockHolder.from_disk(data) if isinstance(data, dict) else LockHolder()
        except (OSError, ValueError):
            return LockHolder()

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.remove(self.holder_path)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def probe(self) -> LockState:
        """For `harness status`: is it held, and by whom (without taking it)?"""
        if not os.path.exists(self.path):
            return LockState(held=False)
        state = LockState(held=False)
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            other = self.holder()
            state = LockState(held=True, run_id=other.run_id, attempt_id=other.attempt_id, pid=other.pid,
                              since=other.since)
        finally:
            os.close(fd)
        return state


def _or_unknown(value: object) -> str:
    return "?" if value is None else str(value)
