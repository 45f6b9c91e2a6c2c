"""What every command shares: the two consoles, --debug and the errors' exit codes, the results store, the
host inventory and picking a host from it."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ..errors import ConfigError
from ..experiments.config import HostConfig
from ..experiments.files import InventoryFile, read_inventory_file
from ..experiments.project import default_results_dir, missing_inventory_hint
from ..hosts.transport import not_executable
from ..results.store import ResultsStore
from ..safetext import display_lines
from .exits import errors_to_exit_codes

# soft_wrap: never break a line inside a path or a command a user may copy.
# On a pipe rich assumes 80 columns: tables (plans, comparisons) would be folded into unreadable cells, so 180
# unless COLUMNS says otherwise (e.g. COLUMNS=80 for a mail or a narrow log viewer).
_PIPE_WIDTH = None if sys.stdout.isatty() else (int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit()
                                                else 180)


class SafeConsole(Console):
    """A console that shows a host's control characters escaped in whatever string it prints (messages,
    table cells): rich passes ESC through, so an OSC 52 in a fatal line would set the clipboard. The markup
    is read after, so escaped text (rich.markup.escape) stays escaped."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(display_lines(text), **kwargs)


def _flags_show_no_value_type() -> None:
    """typer's --help puts each option's value type after it, a flag's too (`--dry-run <bool>`), which reads
    as if the flag wanted a value: every flag of every command shows none. (Older typers show none anyway.)"""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    setattr(TyperOption, "display_type_rich", display_type_rich)  # noqa: B010 (mypy: not an assignment to a method)


_flags_show_no_value_type()
out = SafeConsole(soft_wrap=True, width=_PIPE_WIDTH)
err = SafeConsole(stderr=True, soft_wrap=True)
_debug = False
RESULTS_HELP = ("Where records go (default: $HARNESS_RESULTS_DIR, else results/ of the checkout harness runs from, "
                "else ~/.local/share/harness/results; never the current folder).")


THIRD_PARTY_LOGGERS = ("paramiko", "fabric", "invoke")


def set_debug(debug: bool) -> None:
    """--debug (the root command's option): errors show their traceback, and the libraries' own logs show
    (paramiko logs a failed handshake with a traceback of its own). Without it they stay silent: every error
    they stand for reaches the terminal as the harness's one sentence."""
    global _debug
    _debug = debug
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
        return
    for name in THIRD_PARTY_LOGGERS:
        lib = logging.getLogger(name)
        lib.addHandler(logging.NullHandler())  # a handler of its own: Python's last-resort stderr one is not used
        lib.propagate = False


def exit_on_errors() -> errors_to_exit_codes:
    """What a command's body runs under: a HarnessError becomes one message and its exit code."""
    return errors_to_exit_codes(err, _debug)


def read_inventory(path: Path, given: bool = False) -> InventoryFile:
    """The host inventory; `given`: the user named it (--hosts-file), so a missing one is their path to check,
    not the default's absence."""
    if given and not path.is_file():
        why = "is a folder, not a file" if path.is_dir() else "does not exist"
        inside = path / "hosts.yaml"
        raise ConfigError(f"the host inventory given with --hosts-file {why}", file=path.absolute(),
                          hint=f"check the path: pass the file, --hosts-file {inside}" if inside.is_file()
                          else missing_inventory_hint(given=True))
    # No hosts.yaml ships (no host works everywhere): say how to make one rather than "file not found".
    if not path.is_file():
        raise ConfigError("no host inventory here", file=path.absolute(), hint=missing_inventory_hint())
    return read_inventory_file(path)


def open_store(results_dir: Path | None, announce: bool, writable: bool = False) -> ResultsStore:
    """The results store: --results-dir, else the default that does not depend on the current folder;
    `writable`: checked now, for a command that will write records."""
    store = ResultsStore((results_dir or default_results_dir()).absolute())
    if writable:
        store.check_writable()
    if announce:
        out.print(f"results: {store.root}", highlight=False)
    return store


def results_dir_arg(results_dir: Path | None) -> str:
    # A later `harness compare` finds the default by itself; only a chosen folder needs repeating.
    return f" --results-dir {results_dir.absolute()}" if results_dir is not None else ""


def check_local_python(hosts: dict[str, HostConfig], inventory: InventoryFile) -> None:
    """A local host's `python:` that is a folder or not executable: a configuration error naming the file, the
    line and the host, before anything runs (a remote one's is the host's to say, at connect)."""
    for name, host in hosts.items():
        why = not_executable(host.python) if host.is_local else None
        if why:
            line = inventory.doc.line_of(("hosts", name, "python"))
            raise ConfigError(f"host {name!r}: `python: {host.python}` {why}", file=inventory.path.absolute(),
                              line=line,
                              hint="set `python:` to the path of the Python 3 that runs the target (e.g. its "
                                   ".venv/bin/python)")


def pick_host(hosts: dict[str, HostConfig], name: str | None, hosts_path: Path) -> tuple[str, HostConfig]:
    if name is None:
        if len(hosts) == 1:
            return next(iter(hosts.items()))
        raise ConfigError(f"the inventory has {len(hosts)} hosts; say which with --host", file=hosts_path,
                          hint="hosts: " + ", ".join(hosts))
    if name not in hosts:
        import difflib

        close = difflib.get_close_matches(name, list(hosts), n=1)
        raise ConfigError(f"unknown host {name!r}", file=hosts_path,
                          hint=(f"did you mean {close[0]!r}? " if close else "") + "hosts: " + ", ".join(hosts))
    return name, hosts[name]
