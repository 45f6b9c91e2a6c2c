"""A plain clone is the whole project: no tracked text sends a reader (or a test) to the developers' folder
beside the project root. Where a fact came from is said in words (a release's source, a dated measurement),
or with the in-repo copy's path; only docs/reference/ may quote other trees' paths verbatim."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Built from pieces so this file does not match itself: the sibling folder, by relative path or by name.
OUTSIDE = re.compile(r"\.\./" + "shared" + r"\b|(?<![\w./-])" + "shared" + "/")
ALLOWED = ("docs/reference/",)


def tracked_text_files() -> list[Path]:
    p = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    if p.returncode != 0:
        pytest.skip("not a git checkout: " + p.stderr.decode(errors="replace").strip())
    files = []
    for rel in p.stdout.decode().split("\0"):
        path = ROOT / rel
        if rel and not rel.startswith(ALLOWED) and path.is_file() and b"\0" not in path.read_bytes()[:8192]:
            files.append(path)
    return files


def test_no_tracked_text_points_outside_the_repo():
    found = []
    for path in tracked_text_files():
        text = path.read_text(errors="replace")
        for m in OUTSIDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {text.splitlines()[line - 1].strip()[:120]}")
    assert not found, "texts that point outside the repo:\n" + "\n".join(found)


@pytest.mark.parametrize("text, hit", [  # `@` stands for the folder's name: this file is tracked text too
    ("Design notes: `../@/DESIGN.md`", True),
    ("copied from `@/real-logs/`", True),
    ("(@/seed/x.txt)", True),
    ("make_batch(@_prefix=2)", False),
    ("tests/fixtures/real-logs-live/x.log", False),
    ("/usr/lib/@/libx.so", False),
    ("the @ data folder", False),
])
def test_the_pattern(text, hit):
    assert bool(OUTSIDE.search(text.replace("@", "shared"))) is hit
