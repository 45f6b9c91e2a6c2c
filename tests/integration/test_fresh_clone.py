"""The README's quick start, from a clean clone with nothing beside it: install, `harness demo`, a table.

The venv takes the dependencies from this Python (`--system-site-packages`) and pip builds without
isolation (`--no-deps --no-build-isolation`), so nothing is downloaded; without git, venv or the build
backend the test is skipped, saying which. The time is printed, not judged: benchmarks/fresh_clone.py
measures it against the target (under 3 minutes). The commands run once per test run (the
`fresh_quickstart` fixture, tests/integration/conftest.py); the demo's records, table and page are checked
in test_cli.py."""

from __future__ import annotations

import pytest

from tests.support.fresh_clone import readme_quickstart

pytestmark = pytest.mark.integration


def test_the_readme_quickstart_extracts_install_then_demo():
    commands = readme_quickstart()
    assert commands[-1] == "harness demo" and any(c.startswith("pip install") for c in commands), commands


@pytest.mark.xdist_group("demo")
def test_readme_quickstart_from_a_fresh_clone(fresh_quickstart):
    fresh = fresh_quickstart
    assert [s.command for s in fresh.steps] == readme_quickstart(), "every README command ran"
    for step in fresh.steps:
        assert step.proc.returncode == 0, f"`{step.command}` exited {step.proc.returncode}:\n" + (
            step.proc.stdout[-3000:] + step.proc.stderr[-3000:])
    demo = fresh.steps[-1].proc.stdout
    assert "vs base" in demo and "sim-flashinfer-mla" in demo  # the comparison table
    assert f"results: {fresh.clone / 'results'}" in demo  # the clone's own results folder, from the clone
    assert not [p for p in fresh.base.iterdir() if p.name not in ("harness", "venv", "home")]
    timings = ", ".join(f"{s.command}: {s.seconds:.1f} s" for s in fresh.steps)
    print(f"\nfresh clone: clone + venv {fresh.prepare_s:.1f} s, {timings}; "
          f"install + demo {sum(s.seconds for s in fresh.steps):.1f} s")
