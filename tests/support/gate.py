"""A gate for programs the code under test starts: they wait at it until the test opens it, on an event the
test awaits — not after a sleep. The gate is a FIFO: opening one for reading blocks until some process holds it
open for writing, and the test holds it (O_RDWR, which never blocks on Linux) from `open()` to `close()`."""

from __future__ import annotations

import os
import shlex
from pathlib import Path


class Gate:
    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._fd: int | None = None

    def wrap(self, program: Path, when: str = "*") -> Path:
        """A program beside `program` (same folder: what the harness finds beside a host's Python, it still
        finds) that execs `program` with its arguments (same pid, same exit) — first waiting at the gate when its
        first argument matches `when`, a sh pattern (`*.pyz`: the harness's agent, whose pipe has no read
        timeout on a local host, and not the quick checks before it, which run under one)."""
        wrapper = program.with_name(program.name + "-gated")
        wrapper.write_text(f'#!/bin/sh\ncase "$1" in {when}) : <{shlex.quote(str(self.path))} ;; esac\n'
                           f'exec {shlex.quote(str(program))} "$@"\n')
        wrapper.chmod(0o755)
        return wrapper

    def open(self) -> None:
        """Let every waiting program through, and every later one at once, until `close()`."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
