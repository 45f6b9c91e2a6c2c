"""Command line: the typer app and its entry point. The commands live in the other modules of harness/cli/,
one job each; together with this module they are the only place that prints and exits.

Exit codes: harness.errors.ExitCode, the one table (README "Exit codes" lists the same).
"""

from __future__ import annotations

import signal
import sys

import typer

from .. import __version__
from ..errors import ExitCode
from .bisect import bisect
from .common import out, set_debug
from .compare import compare, report
from .diagnose import profile_summary, triage
from .exits import exit_code, signal_as_interrupt
from .export import export
from .gc import gc
from .hosts import recover, status
from .patch import patch_check, patch_new, validate
from .run import run, sweep
from .sim import demo, sim_init

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Declarative, fast-to-fail, safe experiments on SGLang servers over SSH.")
sim_app = typer.Typer(no_args_is_help=True, help="The simulated SGLang target (no GPU needed).")
app.add_typer(sim_app, name="sim")
patch_app = typer.Typer(no_args_is_help=True, help="Make a patch set from your SGLang checkout; check one against it.")
app.add_typer(patch_app, name="patch")


def _print_version(value: bool) -> None:
    # Eager: runs while parsing, before click asks for a command (else `harness --version` is "Missing command").
    if value:
        out.print(f"harness {__version__}", highlight=False)
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
          version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    set_debug(debug)


# The commands, in the order `harness --help` lists them.
app.command()(run)
app.command()(triage)
app.command()(status)
app.command()(recover)
app.command()(gc)
app.command("profile-summary")(profile_summary)
sim_app.command("init")(sim_init)
app.command()(demo)
app.command()(sweep)
app.command()(bisect)
app.command()(compare)
app.command()(report)
app.command()(export)
app.command()(validate)
patch_app.command("new")(patch_new)
patch_app.command("check")(patch_check)


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal_as_interrupt)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(exit_code(ExitCode.INTERRUPTED))
    except SystemExit as exc:
        sys.exit(exit_code(exc.code))


if __name__ == "__main__":
    main()
