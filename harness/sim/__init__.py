"""A simulated SGLang target: a fake ``sglang`` checkout that behaves like the real one.

``init_target(dest)`` lays out a git repository that looks like an SGLang checkout
(``python/sglang/...``), commits it on ``main`` and installs it "editable" into a
fresh virtual environment at ``dest/.venv`` (a ``.pth`` file pointing at
``dest/python``). The venv also gets a fake ``nvidia-smi`` and a description of the
simulated GPUs. Everything under ``template/`` is standard library only and runs
under Python >= 3.8. See ``README.md`` next to this file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import venv
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from .history import Layout, write_history

__all__ = ["ARCHES", "DEFAULT_FLASHINFER_VERSION", "GPU_SPECS", "TEMPLATE_DIR", "Layout", "SimTarget", "init_target"]

ARCHES = ("sm90", "sm100", "sm120")

# arch -> (name, memory.total in MiB, compute capability); mirrors sglang/_sim/gpus.py
GPU_SPECS = {
    "sm90": ("NVIDIA H200", 143771, "9.0"),
    "sm100": ("NVIDIA B200", 183359, "10.0"),
    "sm120": ("NVIDIA RTX PRO 6000 Blackwell", 97887, "12.0"),
}

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"
SGLANG_VERSION = "0.5.23"
STATE_DIR_NAME = "sglang-sim"  # inside the venv
# The simulated FlashInfer's version: what SGLang 0.5.23 ships with. Its MLA behaviour with an FP8 KV
# cache depends on it (see README.md); mirrors sglang/_sim/flashinfer/jit.py.
DEFAULT_FLASHINFER_VERSION = "0.7.2"
# The rest of the simulated installation, as `importlib.metadata` reports it (what the harness agent's
# environment fingerprint reads): the stack SGLang 0.5.23 runs on, plausible rather than measured.
STACK_DISTS = {"torch": ("2.9.1+cu128", "torch"), "triton": ("3.5.1", "triton"),
               "sglang-kernel": ("0.4.1", "sgl_kernel"), "nvidia-cuda-runtime-cu12": ("12.8.90", "nvidia")}
TORCH_CUDA = "12.8"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?$")

_GIT_IDENTITY = ("-c", "user.name=sglang-sim", "-c", "user.email=sglang-sim@example.invalid")
_GIT_DATE = "2025-06-01T00:00:00+00:00"  # fixed, so the initial commit id is reproducible

_NVIDIA_SMI = """#!/bin/sh
# Fake nvidia-smi of the simulated SGLang target.
exec "$(dirname "$0")/python" -m sglang._sim.nvidia_smi "$@"
"""


@dataclass(frozen=True)
class SimTarget:
    repo: Path  # the git checkout
    python: Path  # interpreter to put in hosts.yaml: repo/.venv/bin/python
    commits: tuple[str, ...] = ()  # main's commit ids, oldest first: the checkout's own, then its history's


def init_target(
    dest: Path, arch: str = "sm90", gpus: int = 8, flashinfer_version: str = DEFAULT_FLASHINFER_VERSION,
    history: Layout = Layout(),
) -> SimTarget:
    """Create a simulated SGLang checkout at ``dest`` (which must not exist or be empty), with `history`'s commits
    on top of its first (history.py)."""
    dest = Path(dest).absolute()
    history.check()
    if arch not in ARCHES:
        raise ValueError(f"unknown simulated GPU arch {arch!r}; choose one of {', '.join(ARCHES)}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 64:
        raise ValueError(f"gpus must be an integer between 1 and 64, got {gpus!r}")
    if not isinstance(flashinfer_version, str) or not _VERSION_RE.match(flashinfer_version):
        raise ValueError(
            f"flashinfer_version must be a release number such as 0.6.13, 0.6.18rc7 or 0.7.2, "
            f"got {flashinfer_version!r}"
        )
    if dest.exists():
        if not dest.is_dir():
            raise ValueError(f"cannot create a simulated target at {dest}: it exists and is not a directory")
        if any(dest.iterdir()):
            raise ValueError(f"cannot create a simulated target at {dest}: the directory is not empty")
    dest.mkdir(parents=True, exist_ok=True)

    _copy_template(dest)
    _git(dest, "init", "-q")
    _git(dest, "symbolic-ref", "HEAD", "refs/heads/main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "--no-verify", "-m", f"Simulated SGLang v{SGLANG_VERSION} checkout")
    commits = [_git(dest, "rev-parse", "HEAD").strip()]

    def commit(subject: str, k: int) -> str:
        _git(dest, "add", "-A")
        _git(dest, "commit", "-q", "--no-verify", "-m", subject, date=_commit_date(k))
        return _git(dest, "rev-parse", "HEAD").strip()

    commits += write_history(dest, history, commit)
    python = _make_venv(dest, flashinfer_version)
    _write_gpu_facts(dest / ".venv" / STATE_DIR_NAME, arch, gpus, flashinfer_version)
    return SimTarget(repo=dest, python=python, commits=tuple(commits))


def _commit_date(k: int) -> str:
    """The k-th history commit's date: an hour after the one before it (fixed: the same layout, the same ids)."""
    return (datetime.fromisoformat(_GIT_DATE) + timedelta(hours=k)).isoformat()


def _copy_template(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for entry in TEMPLATE_DIR.iterdir():
        if entry.name in ("__pycache__",):
            continue
        target = dest / (".gitignore" if entry.name == "_gitignore" else entry.name)
        if entry.is_dir():
            shutil.copytree(entry, target, ignore=ignore)
        else:
            shutil.copy2(entry, target)


def _git(repo: Path, *args: str, date: str = _GIT_DATE) -> str:
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_DATE=date,
        GIT_COMMITTER_DATE=date,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
    )
    cmd = ["git", *_GIT_IDENTITY, "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", *args]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(cmd)}` failed in {repo} with exit code {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()}"
        )
    return proc.stdout


def _make_venv(dest: Path, flashinfer_version: str = DEFAULT_FLASHINFER_VERSION) -> Path:
    env_dir = dest / ".venv"
    venv.create(env_dir, with_pip=False, system_site_packages=False, symlinks=(os.name != "nt"))
    site_packages = sorted(env_dir.glob("lib/python*/site-packages")) or sorted(
        env_dir.glob("Lib/site-packages")
    )
    if not site_packages:
        raise RuntimeError(f"no site-packages directory in the new venv {env_dir}")
    # The "editable install": the checkout's python/ directory goes on sys.path.
    pth = site_packages[0] / f"__editable__.sglang-{SGLANG_VERSION}.pth"
    pth.write_text(str(dest / "python") + "\n")
    _write_flashinfer_dist_info(site_packages[0], flashinfer_version)
    _write_stack(site_packages[0], dest)
    smi = env_dir / "bin" / "nvidia-smi"
    smi.write_text(_NVIDIA_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return env_dir / "bin" / "python"


def _write_dist_info(site_packages: Path, name: str, version: str, top_level: str, summary: str) -> Path:
    """What `pip install <name>==<version>` leaves for importlib.metadata to find (its metadata only)."""
    folder = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    info = site_packages / folder
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\nRequires-Python: >=3.8\n"
    )
    (info / "INSTALLER").write_text("sglang-sim\n")
    (info / "top_level.txt").write_text(top_level + "\n")
    (info / "RECORD").write_text(
        "".join(f"{folder}/{f},,\n" for f in ("METADATA", "INSTALLER", "top_level.txt", "RECORD"))
    )
    return info


def _write_flashinfer_dist_info(site_packages: Path, version: str) -> None:
    """The harness agent reads the server's FlashInfer version with importlib.metadata."""
    _write_dist_info(site_packages, "flashinfer-python", version, "flashinfer",
                     "FlashInfer: Kernel Library for LLM Serving (simulated by the harness; the kernels live in "
                     "sglang._sim.flashinfer)")


def _write_stack(site_packages: Path, dest: Path) -> None:
    """The rest of the installation's metadata: torch, Triton, sgl-kernel, the CUDA runtime, and SGLang itself
    (an editable install), plus torch/version.py as torch's build writes it (what torch.version.cuda reads).
    The `torch` package refuses to be imported: the simulation's tensors are sglang._sim.torch."""
    for name, (version, top) in STACK_DISTS.items():
        _write_dist_info(site_packages, name, version, top, "simulated by the harness (metadata only)")
    info = _write_dist_info(site_packages, "sglang", SGLANG_VERSION, "sglang", "SGLang (the simulated checkout)")
    (info / "direct_url.json").write_text(json.dumps({"url": (dest / "python").as_uri(),
                                                      "dir_info": {"editable": True}}) + "\n")
    torch = site_packages / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text(
        'raise ImportError("the simulated SGLang target has no torch: its tensors are sglang._sim.torch")\n')
    (torch / "version.py").write_text(
        "from typing import Optional\n\n"
        "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
        f"__version__ = '{STACK_DISTS['torch'][0]}'\n"
        "debug = False\n"
        f"cuda: Optional[str] = '{TORCH_CUDA}'\n"
        "git_version = '0000000000000000000000000000000000000000'\n"
        "hip: Optional[str] = None\n"
        "xpu: Optional[str] = None\n")


def _write_gpu_facts(state_dir: Path, arch: str, gpus: int,
                     flashinfer_version: str = DEFAULT_FLASHINFER_VERSION) -> None:
    name, memory_mib, compute_cap = GPU_SPECS[arch]
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "procs").mkdir(exist_ok=True)
    facts = {
        "arch": arch,
        "count": gpus,
        "name": name,
        "memory_total_mib": memory_mib,
        "compute_cap": compute_cap,
        "driver_version": "570.133.20",
        "cuda_version": "12.8",
        "flashinfer_version": flashinfer_version,
    }
    (state_dir / "gpus.json").write_text(json.dumps(facts, indent=2) + "\n")
