"""What a sweep runs on, new or resumed (pure). A resume runs the run's own attempts, keyed as they were
planned: its run.json keeps what the keys were made from (the first call's host signature and GPU archs), so
a resume may run on other hosts — a subset, or others of the inventory — and finished work keeps its keys.
Without `--hosts` a resume takes the run's hosts (and inventory, and patch sets) from run.json."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ..errors import ConfigError
from ..experiments.config import HostConfig
from ..experiments.plan import key_basis


class RunHosts(Protocol):
    """What of a run's run.json (`schemas.RunInfo`) choosing its hosts needs."""

    @property
    def run_id(self) -> str: ...

    @property
    def hosts(self) -> list[str]: ...


class KeyedRun(RunHosts, Protocol):
    """What of a run.json says what its keys were made from."""

    @property
    def key_signature(self) -> str | None: ...

    @property
    def key_archs(self) -> list[str] | None: ...


def parse_host_list(value: str | None) -> list[str] | None:
    """`--hosts a,b` → ["a", "b"]; None when the option was not given (or names nothing)."""
    names = [h.strip() for h in value.split(",") if h.strip()] if value else []
    return names or None


def sweep_host_names(requested: list[str] | None, sweep_hosts: Sequence[str], inventory: Mapping[str, HostConfig],
                     hosts_file: Path, run: RunHosts | None = None) -> list[str]:
    """The hosts a sweep runs on: `--hosts` (for a resume too: any hosts of the inventory), else a resumed
    run's own (from run.json), else the sweep file's `hosts:`, else every host of the inventory."""
    if run is not None and run.hosts and requested is None:
        return _run_hosts(run, inventory, hosts_file)
    names = requested or list(sweep_hosts)
    unknown = [n for n in names if n not in inventory]
    if unknown:
        raise ConfigError(f"host(s) not in the inventory: {', '.join(unknown)}", file=hosts_file,
                          hint="hosts: " + ", ".join(inventory))
    return names or list(inventory)


def _run_hosts(run: RunHosts, inventory: Mapping[str, HostConfig], hosts_file: Path) -> list[str]:
    missing = [n for n in run.hosts if n not in inventory]
    if missing:
        raise ConfigError(
            f"run {run.run_id} ran on host(s) {', '.join(run.hosts)}; not in this inventory: {', '.join(missing)}",
            file=hosts_file, hint="name the hosts to resume on with --hosts (a resume may use other hosts), put "
                                  "them back in the hosts file, or pass the inventory the run used with --hosts-file")
    return list(run.hosts)


def run_key_basis(run: KeyedRun, inventory: Mapping[str, HostConfig],
                  hosts_file: Path) -> tuple[str, tuple[str, ...]]:
    """What a resumed run's keys were made from: as its run.json recorded it, or — for a run.json from before
    that was recorded — made again from the run's own hosts, which must then still be in the inventory."""
    if run.key_signature is not None:
        return run.key_signature, tuple(run.key_archs or ())
    missing = [n for n in run.hosts if n not in inventory]
    if missing:
        raise ConfigError(
            f"run {run.run_id} was planned on host(s) {', '.join(run.hosts)} by an older harness, which did not "
            f"record what its keys were made from; not in this inventory: {', '.join(missing)}", file=hosts_file,
            hint="put them back in the hosts file (they need not be reachable, nor named in --hosts), or pass the "
                 "inventory the run used with --hosts-file")
    return key_basis({n: inventory[n] for n in run.hosts})


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


def resume_command(sweep_file: Path, run_id: str, results_dir: Path | None, command: str = "sweep") -> str:
    """A command that resumes the run, to copy and paste (the rest comes from its run.json, or a bisect's
    bisect.json). The results folder is named only when it was given: the default does not depend on the
    current folder."""
    argv = ["harness", command, str(sweep_file), "--resume", run_id]
    if results_dir is not None:
        argv += ["--results-dir", str(results_dir.absolute())]
    return shlex.join(argv)
