"""Where things are: the project root of an experiment file, the bundled examples, default files."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # harness/
RESULTS_ENV = "HARNESS_RESULTS_DIR"


def bundled_dir(name: str) -> Path:
    """`experiments/` or `patches/`: the repo's copy when running from a checkout, else the wheel's."""
    repo_copy = PACKAGE_DIR.parent / name
    if repo_copy.is_dir():
        return repo_copy
    return PACKAGE_DIR / "_bundled" / name


def project_above(file: Path) -> Path | None:
    """Nearest folder above `file` that holds `patches/` or `hosts.yaml` (its project), or None."""
    for parent in file.resolve().parents:
        if (parent / "patches").is_dir() or (parent / "hosts.yaml").is_file():
            return parent
    return None


def default_hosts_file(experiment_file: Path) -> Path:
    local = Path.cwd() / "hosts.yaml"
    return local if local.is_file() else (project_above(experiment_file) or Path.cwd()) / "hosts.yaml"


def example_inventory(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The shipped example inventory, when running from a checkout (a wheel does not carry it)."""
    checkout = checkout_root(package_dir)
    example = checkout / "hosts.example.yaml" if checkout else None
    return example if example is not None and example.is_file() else None


def missing_inventory_hint(package_dir: Path = PACKAGE_DIR, given: bool = False) -> str:
    """What to do when there is no hosts.yaml: none is shipped, since no host works on every machine.
    `given`: the user named a file with --hosts-file that is not there."""
    example = example_inventory(package_dir)
    if given:
        make = f"copy {example} there and edit it" if example else "write it as the README's `hosts.yaml` section shows"
        return (f"check the path (a relative one starts in the current folder); to make that inventory, {make}; "
                "without --hosts-file, ./hosts.yaml is read")
    start = (f"copy {example} to hosts.yaml and edit it" if example
             else "write one as the README's `hosts.yaml` section shows")
    return (f"{start}, or pass --hosts-file FILE; to practise without a GPU, `harness sim init /tmp/harness-sim` "
            "prints a host entry to paste; `harness demo` needs no inventory at all")


def default_patches_dir(experiment_file: Path) -> Path:
    """`<project>/patches` of the experiment's project; for a file in no project, the patch sets the harness
    ships (those its backends name). Never the current folder's: one file means one set of patches, from
    wherever the command runs."""
    project = project_above(experiment_file)
    own = project / "patches" if project is not None else None
    return own if own is not None and own.is_dir() else bundled_dir("patches")


def default_patches_dir_here() -> Path:
    """For commands given no file: the patches of the project the current folder is in."""
    return (project_above(Path.cwd() / "_") or Path.cwd()) / "patches"


def checkout_root(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The source checkout this package runs from (editable install, or `python -m harness` in it); None for
    an installed wheel."""
    root = package_dir.parent
    return root if (root / "pyproject.toml").is_file() and (root / "experiments").is_dir() else None


def default_results_dir(environ: Mapping[str, str] | None = None, package_dir: Path = PACKAGE_DIR) -> Path:
    """Where records go when no --results-dir is given — never the current folder, so `harness compare RUN`
    run from anywhere finds what a sweep wrote: $HARNESS_RESULTS_DIR, else the checkout's `results/`, else
    the XDG data folder (`$XDG_DATA_HOME/harness/results`, default ~/.local/share/harness/results)."""
    env = os.environ if environ is None else environ
    if env.get(RESULTS_ENV):
        return Path(env[RESULTS_ENV]).expanduser().absolute()
    checkout = checkout_root(package_dir)
    if checkout is not None:
        return checkout / "results"
    data_home = Path(env.get("XDG_DATA_HOME") or "").expanduser()
    if not data_home.is_absolute():  # unset, or relative (which the XDG spec says to ignore)
        data_home = _home(env) / ".local" / "share"
    return data_home / "harness" / "results"


def _home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()
