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
    ├── ResultsError                  the results store could not be written (disk full, exists already)
    └── Interrupted                   the user pressed Ctrl-C; cleanup already happened            → exit 130

Third-party exceptions (paramiko, socket, pydantic, yaml) are mapped to these at the edges
(transport.py, config.py) so nothing above them needs to know which library failed.
"""

from __future__ import annotations

from pathlib import Path

EXIT_CONFIG = 2
EXIT_HOST = 3
EXIT_INTERRUPTED = 130


class HarnessError(Exception):
    """Base of every error the harness reports; `exit_code` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f"\n  hint: {self.hint}" if self.hint else "")


class ConfigError(HarnessError):
    """Bad configuration: names the file and line, and how to fix it."""

    exit_code = EXIT_CONFIG

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

    exit_code = EXIT_HOST

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
    exit_code = EXIT_HOST


class ResultsError(HarnessError):
    pass


class Interrupted(HarnessError):
    exit_code = EXIT_INTERRUPTED
