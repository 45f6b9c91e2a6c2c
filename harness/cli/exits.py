"""How the CLI ends: a HarnessError becomes one clear message and its exit code (a traceback only with
--debug); SIGTERM and SIGHUP become interrupts, and the exit code then says which signal it was."""

from __future__ import annotations

import traceback
from types import TracebackType
from typing import Literal

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ExitCode, HarnessError


class errors_to_exit_codes:
    """Turn HarnessErrors into one clear message and the right exit code (traceback only with --debug)."""

    def __init__(self, err: Console, debug: bool) -> None:
        self.err = err
        self.debug = debug

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if exc is None or isinstance(exc, (typer.Exit, SystemExit)):
            return False
        if isinstance(exc, KeyboardInterrupt):
            self.err.print("interrupted", style="yellow")
            raise typer.Exit(ExitCode.INTERRUPTED)
        if isinstance(exc, HarnessError):
            if self.debug:
                traceback.print_exception(exc_type, exc, tb)
            self.err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(exc.exit_code)
        return False


# SIGTERM (a CI timeout, `timeout`, systemd) and SIGHUP (a closed terminal) end a run the way Ctrl-C does:
# the server is stopped, the tree reverted and an `aborted` record written with every metric measured so
# far; the exit code then says which signal it was (128 + its number).
_signalled: int | None = None


def signal_as_interrupt(signum: int, frame: object) -> None:
    global _signalled
    _signalled = signum
    raise KeyboardInterrupt


def exit_code(code: str | int | None) -> str | int | None:
    if _signalled is not None and code == ExitCode.INTERRUPTED:
        return 128 + _signalled
    return code
