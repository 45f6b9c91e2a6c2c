"""The local transport: the host is this machine — same agent, same behaviour, no SSH, never a shell."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import HostError
from .transport import CommandResult, RemoteProcess, Transport, not_executable


class _LocalProcess(RemoteProcess):
    def __init__(self, argv: list[str]) -> None:
        # Own session: a Ctrl-C on the terminal reaches the controller, which then aborts the agent
        # cleanly, instead of killing the agent mid-revert.
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        assert self.p.stdin and self.p.stdout and self.p.stderr  # all three are pipes
        self.stdin, self.stdout = self.p.stdin, self.p.stdout
        self._drain_stderr(self.p.stderr)

    def write(self, data: bytes) -> None:
        try:
            self.stdin.write(data)
            self.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def close_stdin(self) -> None:
        try:
            self.stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    def readline(self) -> bytes:
        return self.stdout.readline()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        self.close_stdin()


class LocalTransport(Transport):
    """The host is this machine: same agent, same behaviour, no SSH."""

    def _run(self, argv: list[str], timeout: float) -> CommandResult:
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout)
        except FileNotFoundError as exc:
            return CommandResult(argv, 127, "", str(exc))
        except OSError as exc:  # a folder or a file without the execute bit: the shell's "cannot execute"
            return CommandResult(argv, 126, "", f"{argv[0]}: {not_executable(argv[0]) or exc.strerror}")
        except subprocess.TimeoutExpired:
            return CommandResult(argv, 124, "", f"timed out after {timeout}s")
        return CommandResult(argv, p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))

    def start(self, argv: list[str]) -> RemoteProcess:
        try:
            return _LocalProcess(argv)
        except OSError as exc:
            raise HostError(self.name, f"cannot start {argv[0]}: {exc}") from None

    def put(self, local: Path, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        tmp = remote + ".part"
        shutil.copyfile(local, tmp)
        os.replace(tmp, remote)

    def get(self, remote: str, local: Path) -> None:
        shutil.copyfile(remote, local)
