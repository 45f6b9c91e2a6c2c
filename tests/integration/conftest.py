"""The one `harness demo` of a test run (about a minute of CPU on two cores), shared by the tests of the README's
quick start (tests/integration/test_fresh_clone.py) and of the demo's records, table and page (test_cli.py).

When this checkout has no uncommitted change, the demo those tests read is the newcomer's own: the README's
commands run in a fresh clone of HEAD, which is then the same code as the working tree. With uncommitted
changes, the demo runs from the working tree instead (a clone of HEAD would test the last commit, not the
change), and the quick start runs its own demo. Tests that use either carry `xdist_group("demo")`, so a
parallel run (scripts/test) gives them one worker and runs the demo once.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fresh_clone import ROOT, FreshClone, missing_tools, readme_quickstart


@dataclass(frozen=True)
class DemoRun:
    folder: Path  # the demo's results are under folder / "results"
    proc: subprocess.CompletedProcess


def _working_tree_is_head() -> bool:
    p = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=normal"],
                       capture_output=True, text=True)
    return p.returncode == 0 and not p.stdout.strip()


@pytest.fixture(scope="session")
def fresh_quickstart(tmp_path_factory) -> FreshClone:
    """The README's quick-start commands, run in a fresh clone of HEAD with nothing beside it."""
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    fresh = FreshClone(tmp_path_factory.mktemp("fresh"), pip_args=["--no-deps", "--no-build-isolation"])
    fresh.prepare()
    reason = fresh.cannot_build()
    if reason:
        pytest.skip(reason)
    for command in readme_quickstart():
        step = fresh.run(command)
        if step.proc.returncode != 0:
            break  # the test of the quick start reports which command failed, and why
    return fresh


@pytest.fixture(scope="session")
def demo_run(request, tmp_path_factory) -> DemoRun:
    if _working_tree_is_head() and missing_tools() is None:
        fresh: FreshClone = request.getfixturevalue("fresh_quickstart")
        last = fresh.steps[-1]
        assert last.command == "harness demo" and last.proc.returncode == 0, (
            f"the quick start failed at `{last.command}`: see test_readme_quickstart_from_a_fresh_clone")
        return DemoRun(fresh.clone, last.proc)
    folder = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([sys.executable, "-m", "harness", "demo", "--results-dir", str(folder / "results")],
                          cwd=folder, capture_output=True, text=True, timeout=240)
    return DemoRun(folder, proc)
