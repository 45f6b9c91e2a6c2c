"""Transport: one interface to a host — run a command, start a process with pipes, copy a file either way.

Two implementations: `ssh.SSHTransport` (Fabric/Paramiko) and `local.LocalTransport`; `direct.connect` picks
one for a host. Everything runs from an argv list: the SSH side encodes it so that any login shell passes it
unchanged (`ssh.remote_command`), the local side never uses a shell, so no string from a YAML file is ever
interpreted by a shell. Third-party errors are mapped to the harness's own tree at the edge, in each
implementation (`HostUnreachable`, `HostAuthError`, `HostKeyError`).
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import RemoteCommandError
from ..experiments.config import HostConfig


def not_executable(program: str) -> str | None:
    """Why a local program path cannot be run (a folder, no execute bit), or None; a bare name is looked up
    on PATH by whoever runs it."""
    if os.sep not in program:
        return None
    path = os.path.expanduser(program)
    if os.path.isdir(path):
        return "is a folder, not an executable"
    if os.path.exists(path) and not os.access(path, os.X_OK):
        return "is not executable"
    if not os.path.exists(path):
        return "does not exist"
    return None


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""  # byte-exact, for file transfers


class RemoteProcess(ABC):
    """A process on the host with pipes: what the agent runs as."""

    @abstractmethod
    def write(self, data: bytes) -> None: ...

    @abstractmethod
    def close_stdin(self) -> None: ...

    @abstractmethod
    def readline(self) -> bytes:
        """Next line of stdout; b'' at end of stream."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int | None: ...

    @abstractmethod
    def kill(self) -> None:
        """Drop the process: for SSH, close the channel (the agent's dead man's switch does the rest)."""

    def stderr_tail(self) -> str:
        return "".join(self._stderr)

    def set_read_timeout(self, seconds: float | None) -> None:  # noqa: B027 - a no-op unless overridden
        """After this long without a line, readline raises TimeoutError (a link that went silent).
        Local pipes cannot go silent that way: the default does nothing."""

    def _drain_stderr(self, stream: IO[bytes]) -> None:
        self._stderr: deque[str] = deque(maxlen=200)

        def run() -> None:
            for line in iter(stream.readline, b""):
                self._stderr.append(line.decode(errors="replace"))

        threading.Thread(target=run, name="stderr", daemon=True).start()


class Transport(ABC):
    def __init__(self, name: str, host: HostConfig):
        self.name = name
        self.host = host

    def run(self, argv: list[str], *, timeout: float = 60, check: bool = True) -> CommandResult:
        result = self._run(argv, timeout)
        if check and result.exit_code != 0:
            raise RemoteCommandError(self.name, argv, result.exit_code, result.stdout + result.stderr)
        return result

    @abstractmethod
    def _run(self, argv: list[str], timeout: float) -> CommandResult: ...

    @abstractmethod
    def start(self, argv: list[str]) -> RemoteProcess: ...

    @abstractmethod
    def put(self, local: Path, remote: str) -> None: ...

    @abstractmethod
    def get(self, remote: str, local: Path) -> None: ...

    def close(self) -> None:  # noqa: B027 - most transports hold nothing to close
        pass

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
