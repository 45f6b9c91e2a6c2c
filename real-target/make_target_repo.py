#!/usr/bin/env python3
"""Lay an SGLang wheel out as a target repo the harness can patch.

    make_target_repo.py WHEEL DEST

writes the wheel's `sglang/` package to `DEST/python/sglang/` and commits it once in a fresh git repo
(DEST must be new or empty). That is the layout of an SGLang checkout, so patch sets made with `git diff`
in a checkout apply to it. No install is needed: the server imports it with
`PYTHONPATH=DEST/python:<site>` (the wheelhouse's install target as <site>; see docs/real-gpu.md).

Standard library only (the GPU host runs it with its own Python). The repo's upstream tests use `lay_out`
from here too (tests/upstream/sglang_source.py), for SGLang's PyPI wheel.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from pathlib import Path


class LayOutError(RuntimeError):
    """The wheel could not be laid out (unsafe member, git failed)."""


def wheel_version(wheel: Path) -> str:
    """The version field of a wheel's file name: sglang-0.5.16-cp312-….whl → 0.5.16."""
    parts = wheel.name.split("-")
    return parts[1] if len(parts) >= 5 else "unknown"


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> None:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                       env=None if env is None else {**os.environ, **env})
    if p.returncode != 0:
        raise LayOutError(f"git {' '.join(args)} failed in {repo}:\n{p.stderr.strip()[-1500:]}")


def wheel_date(wheel: Path) -> str:
    """The newest timestamp inside the wheel (ISO 8601, UTC as written): the same for every copy of it."""
    with zipfile.ZipFile(wheel) as z:
        newest = max((info.date_time for info in z.infolist()), default=(1980, 1, 1, 0, 0, 0))
    return "%04d-%02d-%02dT%02d:%02d:%02d+0000" % newest


def lay_out(wheel: Path, repo: Path, version: str | None = None, package: str = "sglang") -> Path:
    """`repo/python/<package>/...` from the wheel, committed once (no global git config is used or set)."""
    if repo.exists() and any(repo.iterdir()):
        raise FileExistsError(f"{repo} is not empty")
    version = version or wheel_version(wheel)
    target = repo / "python"
    target.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if not name.startswith(f"{package}/") or name.endswith("/"):
                continue
            parts = Path(name).parts
            if ".." in parts or Path(name).is_absolute():
                raise LayOutError(f"{wheel.name}: unsafe member {name!r}")
            z.extract(info, target)
    if not (target / package).is_dir():
        raise LayOutError(f"{wheel.name} has no {package}/ package inside")
    _git(repo, "init", "-q")
    # No background `git gc --auto` (it would repack while a test copies the repo); this is the
    # repo's own config, nothing global is read or written.
    _git(repo, "config", "gc.auto", "0")
    _git(repo, "add", "-A")
    # One wheel, one commit id: the repos laid out for each GPU of a box share their base commit, so the
    # comparison table does not call their results "not comparable" (seen on the first two-GPU sweep).
    stamp = wheel_date(wheel)
    _git(repo, "-c", "user.name=harness", "-c", "user.email=harness@localhost",
         "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", f"SGLang {version} (wheel)",
         env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    return repo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="an sglang-*.whl (e.g. from the wheelhouse)")
    ap.add_argument("dest", type=Path, help="a new or empty folder: the target repo")
    args = ap.parse_args(argv)
    try:
        repo = lay_out(args.wheel, args.dest)
    except (LayOutError, FileExistsError, OSError, zipfile.BadZipFile) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"target repo: {repo}  (server: PYTHONPATH={repo.resolve() / 'python'}:<site>)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
