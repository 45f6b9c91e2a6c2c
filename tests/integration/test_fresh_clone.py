"""The README's quick start, from a clean clone with nothing beside it: install, `harness demo`, a table.

The venv takes the dependencies from this Python (`--system-site-packages`) and pip builds without
isolation (`--no-deps --no-build-isolation`), so nothing is downloaded; without git, venv or the build
backend the test is skipped, saying which. The time is printed, not judged: benchmarks/fresh_clone.py
measures it against the target (under 3 minutes)."""

from __future__ import annotations

import pytest

from tests.support.fresh_clone import FreshClone, missing_tools, readme_quickstart

pytestmark = pytest.mark.integration


def test_the_readme_quickstart_extracts_install_then_demo():
    commands = readme_quickstart()
    assert commands[-1] == "harness demo" and any(c.startswith("pip install") for c in commands), commands


def test_readme_quickstart_from_a_fresh_clone(tmp_path):
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    fresh = FreshClone(tmp_path, pip_args=["--no-deps", "--no-build-isolation"])
    prepare_s = fresh.prepare()
    reason = fresh.cannot_build()
    if reason:
        pytest.skip(reason)
    for command in readme_quickstart():
        step = fresh.run(command)
        assert step.proc.returncode == 0, f"`{command}` exited {step.proc.returncode}:\n" + (
            step.proc.stdout[-3000:] + step.proc.stderr[-3000:])
    demo = fresh.steps[-1].proc.stdout
    assert "vs base" in demo and "sim-flashinfer-mla" in demo  # the comparison table
    assert f"results: {fresh.clone / 'results'}" in demo  # the clone's own results folder, from the clone
    assert not [p for p in tmp_path.iterdir() if p.name not in ("harness", "venv", "home")]
    timings = ", ".join(f"{s.command}: {s.seconds:.1f} s" for s in fresh.steps)
    print(f"\nfresh clone: clone + venv {prepare_s:.1f} s, {timings}; "
          f"install + demo {sum(s.seconds for s in fresh.steps):.1f} s")
