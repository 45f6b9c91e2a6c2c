"""Where things are: the project root of an experiment file, the bundled examples, default files."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def bundled_dir(name: str) -> Path:
    """`experiments/` or `patches/`: the repo's copy when running from a checkout, else the wheel's."""
    repo_copy = PACKAGE_DIR.parent / name
    if repo_copy.is_dir():
        return repo_copy
    return PACKAGE_DIR / "_bundled" / name


def project_root_of(file: Path) -> Path:
    """Nearest folder above `file` that holds `patches/` or `hosts.yaml`; else the current folder."""
    for parent in file.resolve().parents:
        if (parent / "patches").is_dir() or (parent / "hosts.yaml").is_file():
            return parent
    return Path.cwd()


def default_hosts_file(experiment_file: Path) -> Path:
    local = Path.cwd() / "hosts.yaml"
    return local if local.is_file() else project_root_of(experiment_file) / "hosts.yaml"


def default_patches_dir(experiment_file: Path) -> Path:
    return project_root_of(experiment_file) / "patches"


def default_patches_dir_here() -> Path:
    """For commands given no file: the patches of the project the current folder is in."""
    return project_root_of(Path.cwd() / "_") / "patches"
