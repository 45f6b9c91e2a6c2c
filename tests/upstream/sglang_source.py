"""The real SGLang source for the upstream tests: the release wheel from PyPI, laid out as a checkout.

    wheel = fetch_wheel()                  # pip download sglang==0.5.23 --no-deps, cached
    repo = lay_out(wheel, dest)            # dest/python/sglang/... in a one-commit git repo
                                           # (real-target/make_target_repo.py: the GPU host's kit uses it too)

The wheel's `sglang/` package is what a checkout has under `python/sglang/`, so patch sets made with
`git diff` in an SGLang checkout apply to this tree as they would on the GPU box. The download is
cached under ~/.cache/harness-tests/ (or $HARNESS_TEST_CACHE), so only the first run needs the network.

Also a command, to make a local copy for `harness validate --against DIR`:

    python -m tests.upstream.sglang_source DEST [--version 0.5.23]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tests.support import kit

_target_repo = kit.load("make_target_repo")

SGLANG_VERSION = "0.5.23"
APPLIES_TO = f"sglang=={SGLANG_VERSION}"
SKIP_ENV = "HARNESS_SKIP_UPSTREAM"


class FetchError(RuntimeError):
    """SGLang's source could not be downloaded or read."""


def cache_dir() -> Path:
    return Path(os.environ.get("HARNESS_TEST_CACHE") or "~/.cache/harness-tests").expanduser()


def _usable(wheel: Path) -> bool:
    try:
        with zipfile.ZipFile(wheel) as z:
            return any(n.startswith("sglang/") for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def fetch_wheel(version: str = SGLANG_VERSION, cache: Path | None = None) -> Path:
    """The sglang==<version> wheel, downloaded once with pip and kept in the cache."""
    folder = (cache or cache_dir()) / f"sglang-{version}"
    for wheel in sorted(folder.glob(f"sglang-{version}-*.whl")):
        if _usable(wheel):
            return wheel
        wheel.unlink()  # a broken download from an interrupted run
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps",
               "--only-binary=:all:", "--disable-pip-version-check", "-d", tmp]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise FetchError(f"`{' '.join(cmd[2:])}` did not finish in 900 s") from None
        wheels = sorted(Path(tmp).glob(f"sglang-{version}-*.whl"))
        if p.returncode != 0 or not wheels:
            tail = (p.stderr or p.stdout).strip()[-1500:]
            raise FetchError(
                f"could not download SGLang {version} from PyPI (`python -m {' '.join(cmd[2:-2])}` "
                f"exited {p.returncode}):\n{tail}\nThe upstream tests need PyPI once (the wheel is then "
                f"cached in {folder}); set {SKIP_ENV}=1 to skip them explicitly."
            )
        if not _usable(wheels[0]):
            raise FetchError(f"{wheels[0].name} from PyPI has no sglang/ package inside")
        dest = folder / wheels[0].name
        os.replace(wheels[0], dest)  # atomic: a second run never sees half a file
    return dest


# `repo/python/sglang/...` from the wheel, committed once: one implementation, the kit's.
lay_out = _target_repo.lay_out


def copy_repo(template: Path, dest: Path) -> Path:
    """A byte-for-byte copy of a laid-out repo (modes and .git included) for a test that changes it."""
    if shutil.which("cp") and sys.platform.startswith("linux"):
        subprocess.run(["cp", "-a", str(template), str(dest)], check=True)
    else:  # pragma: no cover
        shutil.copytree(template, dest, symlinks=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Lay out SGLang's released source as a git checkout.")
    ap.add_argument("dest", type=Path, help="an empty or new folder")
    ap.add_argument("--version", default=SGLANG_VERSION)
    args = ap.parse_args(argv)
    try:
        repo = lay_out(fetch_wheel(args.version), args.dest, args.version)
    except (FetchError, _target_repo.LayOutError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(repo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
