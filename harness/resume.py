"""What a sweep runs on, new or resumed (pure). A resume must plan the run's own attempts again: the hosts
are part of every attempt's key, so resuming over other hosts would redo finished work under new keys
and replace the run's plan — hence a resume takes its hosts (and inventory, and patch sets) from run.json."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from .config import HostConfig
from .errors import ConfigError


class RunHosts(Protocol):
    """What of a run's run.json (`schemas.RunInfo`) choosing its hosts needs."""

    @property
    def run_id(self) -> str: ...

    @property
    def hosts(self) -> list[str]: ...


def parse_host_list(value: str | None) -> list[str] | None:
    """`--hosts a,b` → ["a", "b"]; None when the option was not given (or names nothing)."""
    names = [h.strip() for h in value.split(",") if h.strip()] if value else []
    return names or None


def sweep_host_names(requested: list[str] | None, sweep_hosts: Sequence[str], inventory: Mapping[str, HostConfig],
                     hosts_file: Path, run: RunHosts | None = None) -> list[str]:
    """The hosts a sweep runs on: a resumed run's own (from run.json; `--hosts` may only repeat them),
    else `--hosts`, else the sweep file's `hosts:`, else every host of the inventory."""
    if run is not None and run.hosts:
        return _run_hosts(run, requested, inventory, hosts_file)
    names = requested or list(sweep_hosts)
    unknown = [n for n in names if n not in inventory]
    if unknown:
        raise ConfigError(f"host(s) not in the inventory: {', '.join(unknown)}", file=hosts_file,
                          hint="hosts: " + ", ".join(inventory))
    return names or list(inventory)


def _run_hosts(run: RunHosts, requested: list[str] | None, inventory: Mapping[str, HostConfig],
               hosts_file: Path) -> list[str]:
    used = ", ".join(run.hosts)
    if requested is not None and set(requested) != set(run.hosts):
        raise ConfigError(
            f"run {run.run_id} ran on host(s) {used}, not {', '.join(requested)}",
            hint="resume it without --hosts (it uses the run's own hosts); other hosts change every attempt's "
                 "key, so finished attempts would run again — for other hosts start a new run (no --resume)")
    missing = [n for n in run.hosts if n not in inventory]
    if missing:
        raise ConfigError(
            f"run {run.run_id} ran on host(s) {used}; not in this inventory: {', '.join(missing)}", file=hosts_file,
            hint="put them back in the hosts file, or pass the inventory the run used with --hosts-file "
                 "(a resume needs the run's own hosts: others would redo its finished attempts)")
    return list(run.hosts)


def recorded_path(given: Path | None, recorded: str | None, what: str, run_id: str) -> Path | None:
    """An option's value on resume: as given, else as the run recorded it (None: neither; use the default)."""
    if given is not None or recorded is None:
        return given
    path = Path(recorded)
    if not path.exists():
        raise ConfigError(f"run {run_id} used the {what} {path}, which no longer exists",
                          hint=f"pass the {what} to use with {_OPTION[what]}")
    return path


_OPTION = {"host inventory": "--hosts-file", "patch sets": "--patches-dir"}


def resume_command(sweep_file: Path, run_id: str, results_dir: Path | None) -> str:
    """A command that resumes the run, to copy and paste (the rest comes from its run.json). The results
    folder is named only when it was given: the default does not depend on the current folder."""
    argv = ["harness", "sweep", str(sweep_file), "--resume", run_id]
    if results_dir is not None:
        argv += ["--results-dir", str(results_dir.absolute())]
    return shlex.join(argv)
