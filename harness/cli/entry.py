"""The `harness` script and `python -m harness`: the CLI's imports (a second or more on a cold disk) run
with Ctrl-C meaning what it means once the CLI runs — one line and exit 130 — not a traceback."""

from __future__ import annotations

import sys

from ..errors import ExitCode  # the standard library's enum and pathlib only: imported in no time


def main() -> None:
    try:
        from .app import main as run_cli
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")  # nothing is set up yet (no console): a plain line
        sys.exit(ExitCode.INTERRUPTED)
    run_cli()
