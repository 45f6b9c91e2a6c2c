"""One attempt per target repo at a time: an flock on `.git/harness/lock`, its holder in `lock.json`."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable
from typing import Any, Optional

from .errors import StageFailed
from .hostio import read_json, write_json_atomic


class RepoLock:
    def __init__(self, harness_dir: str) -> None:
        self.path = os.path.join(harness_dir, "lock")
        self.holder_path = self.path + ".json"
        self._fd: Optional[int] = None

    def acquire(self, repo: str, holder: dict[str, Any], wait_s: float, tick: Callable[[], None]) -> None:
        """Take the lock, waiting up to `wait_s` (calling `tick` between tries); else say who holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise
            if time.monotonic() >= deadline:
                os.close(fd)
                other = self.holder()
                raise StageFailed(
                    "infra-error",
                    "target repo %s is locked by run %s attempt %s (agent pid %s on this host) since %s"
                    % (repo, other.get("run_id", "?"), other.get("attempt_id", "?"), other.get("pid", "?"),
                       other.get("since", "?")),
                    locked_by=other)
            tick()
        self._fd = fd
        write_json_atomic(self.holder_path, dict(holder, pid=os.getpid(), since=time.strftime("%Y-%m-%dT%H:%M:%S%z")))

    def holder(self) -> dict[str, Any]:
        try:
            data = read_json(self.holder_path)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.remove(self.holder_path)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def probe(self) -> dict[str, Any]:
        """For `harness status`: is it held, and by whom (without taking it)?"""
        state: dict[str, Any] = {"held": False}
        if not os.path.exists(self.path):
            return state
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            state["held"] = True
            state.update(self.holder())
        finally:
            os.close(fd)
        return state
