"""A newcomer's first minutes, replayed: clone the repo with nothing beside it, make a venv, and run the
README's quick-start commands from the clone. Shared by tests/integration/test_fresh_clone.py and
benchmarks/fresh_clone.py."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = re.compile(r"```bash\n(.*?)```", re.S)


def readme_quickstart(readme: Path = ROOT / "README.md") -> list[str]:
    """The README's quick-start commands: the first bash block that runs `harness demo`, one command per
    `&&` or line (the README is the spec: a test of anything else would not be the newcomer's path)."""
    for block in QUICKSTART.findall(readme.read_text()):
        if "harness demo" in block:
            lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
            return [cmd.strip() for ln in lines for cmd in ln.split("&&") if cmd.strip()]
    raise AssertionError(f"{readme}: no ```bash block runs `harness demo`")


def missing_tools() -> str | None:
    """Why a fresh clone cannot be replayed here, or None."""
    if shutil.which("git") is None:
        return "git is not installed"
    try:
        import venv  # noqa: F401
    except ImportError:
        return "this Python has no venv module"
    if not (ROOT / ".git").exists():
        return f"{ROOT} is not a git checkout: nothing to clone"
    return None


@dataclass
class Step:
    command: str
    seconds: float
    proc: subprocess.CompletedProcess


@dataclass
class FreshClone:
    """A clone of this repo's HEAD under `base` (alone there), a venv beside it, and a clean environment:
    HOME and the XDG data folder inside `base`, no PYTHONPATH entry pointing back at this checkout."""

    base: Path
    pip_args: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    prepare_s: float = 0.0  # what prepare() took

    @property
    def clone(self) -> Path:
        return self.base / "harness"

    @property
    def venv(self) -> Path:
        return self.base / "venv"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "VIRTUAL_ENV", "PYTHONHOME"))}
        kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not _inside(Path(p), ROOT)]
        env["PYTHONPATH"] = os.pathsep.join(kept)
        env.update(HOME=str(self.base / "home"), XDG_DATA_HOME=str(self.base / "home" / ".local" / "share"),
                   VIRTUAL_ENV=str(self.venv), PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
        return env

    def prepare(self) -> float:
        """Clone and make the venv (system site-packages: the dependencies are not downloaded); seconds."""
        t0 = time.monotonic()
        (self.base / "home").mkdir(parents=True, exist_ok=True)
        _check(["git", "clone", "--quiet", str(ROOT), str(self.clone)], self.base, self.env())
        # --without-pip: Debian's Python has no ensurepip unless python3-venv is installed; the venv's
        # `python -m pip` is this Python's pip, seen through the system site-packages, installing into the venv.
        _check([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(self.venv)], self.base,
               self.env())
        self.prepare_s = time.monotonic() - t0
        return self.prepare_s

    def cannot_build(self) -> str | None:
        """Why `pip install --no-build-isolation` cannot build the package in the venv, or None."""
        if "--no-build-isolation" not in self.pip_args:
            return None
        # hatchling builds the wheel; an editable one (`pip install -e`) also needs `editables`.
        p = subprocess.run([str(self.venv / "bin" / "python"), "-c", "import hatchling, editables"],
                           env=self.env(), capture_output=True, text=True)
        return None if p.returncode == 0 else ("the build backend (hatchling, and editables for `pip install -e`) "
                                               "is not importable in the venv: install both, or put them on "
                                               "PYTHONPATH, to run this")

    def run(self, command: str, timeout: float = 600) -> Step:
        """One README command, run from the clone: `pip` with this run's pip args, `harness` from the venv."""
        argv = shlex.split(command)
        if argv[0] == "pip":
            argv = [str(self.venv / "bin" / "python"), "-m", "pip", *argv[1:], *self.pip_args]
        elif argv[0] == "harness":
            argv = [str(self.venv / "bin" / "harness"), *argv[1:]]
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=self.clone, env=self.env(), capture_output=True, text=True, timeout=timeout)
        step = Step(command, time.monotonic() - t0, proc)
        self.steps.append(step)
        return step


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except OSError:
        return False


def _check(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
