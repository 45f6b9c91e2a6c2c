"""One exception tree for everything the harness reports to a user.

    HarnessError                      anything the CLI turns into a clear message (never a traceback)
    ├── ConfigError                   bad YAML, unknown key, missing patch set, unknown host  → exit 2
    │   └── (carries file, line, and a hint such as the closest valid key)
    ├── HostError                     a host could not be reached or used                      → exit 3
    │   ├── HostUnreachable           connection refused / timed out / DNS
    │   ├── HostAuthError             authentication failed
    │   ├── HostKeyError              unknown or changed SSH host key
    │   └── RemoteCommandError        a command on the host failed (carries argv, exit code, output tail)
    ├── AgentProtocolError            the remote agent spoke nonsense or went away without a final event
    ├── ResultsError                  the results store could not be read or written (disk full, exists, bad record)
    ├── TrackerError                  the experiment tracker (MLflow) could not be reached or refused a write
    └── Interrupted                   the user pressed Ctrl-C; cleanup already happened            → exit 130

Third-party exceptions (paramiko, socket, pydantic, yaml) are mapped to these at the edges
(transport.py, config.py) so nothing above them needs to know which library failed.

`ExitCode` is the one table of what the `harness` command's exit status means (README "Exit codes").
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """What every command's exit status means; README's "Exit codes" lists the same."""

    OK = 0  # done: for run and sweep, every attempt ended with a record, whatever its status
    FAILED = 1  # a failure with no code of its own (the results store); `demo`: an attempt ended unlike expected
    CONFIG = 2  # a configuration error, or a patch set that does not apply (`validate`, `patch check`)
    HOST = 3  # a host could not be reached or used; a sweep left work for a resume; `status`: a host not ready
    INTERRUPTED = 130  # Ctrl-C, after stopping and reverting (SIGTERM and SIGHUP: 128 + their number)


class HarnessError(Exception):
    """Base of every error the harness reports; `exit_code` is what the CLI exits with."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f"\n  hint: {self.hint}" if self.hint else "")


class ConfigError(HarnessError):
    """Bad configuration: names the file and line, and how to fix it."""

    exit_code = ExitCode.CONFIG

    def __init__(self, message: str, *, file: Path | str | None = None, line: int | None = None,
                 hint: str | None = None):
        self.file = Path(file) if file is not None else None
        self.line = line
        where = ""
        if self.file is not None:
            where = f"{self.file}:{line}: " if line else f"{self.file}: "
        super().__init__(where + message, hint=hint)


class HostError(HarnessError):
    """A host could not be reached or used."""

    exit_code = ExitCode.HOST

    def __init__(self, host: str, message: str, *, hint: str | None = None):
        self.host = host
        super().__init__(f"host {host!r}: {message}", hint=hint)


class HostUnreachable(HostError):
    pass


class HostAuthError(HostError):
    pass


class HostKeyError(HostError):
    pass


class RemoteCommandError(HostError):
    """A command on the host exited non-zero; carries what is needed to debug it."""

    def __init__(self, host: str, argv: list[str], exit_code: int, output_tail: str):
        self.argv = argv
        self.remote_exit_code = exit_code
        self.output_tail = output_tail
        tail = output_tail.strip()[-2000:]
        super().__init__(host, f"command {' '.join(argv)!r} exited {exit_code}" + (f":\n{tail}" if tail else ""))


class AgentProtocolError(HarnessError):
    exit_code = ExitCode.HOST


class ResultsError(HarnessError):
    pass


class TrackerError(HarnessError):
    """The experiment tracker (MLflow) could not be reached or refused a write; the records are safe."""


class Interrupted(HarnessError):
    exit_code = ExitCode.INTERRUPTED
