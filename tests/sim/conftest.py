"""Fixtures for the tests of the simulated SGLang target (harness.sim)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.sim import SimTarget, init_target
from tests.sim.simproc import Proc, launch_proc


@pytest.fixture(scope="session")
def sim_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sim")


@pytest.fixture(scope="session")
def shared_target(sim_root) -> SimTarget:
    """A pristine sm90 target shared by the tests that do not change its tree."""
    return init_target(sim_root / "shared-sm90", arch="sm90", gpus=8)


@pytest.fixture
def fresh_target(tmp_path) -> SimTarget:
    return init_target(tmp_path / "target", arch="sm90", gpus=8)


@pytest.fixture
def launch():
    """Start processes in their own sessions; kill every process group at teardown."""
    procs: list[Proc] = []

    def _launch(
        target: SimTarget, *args: str, env: dict[str, str] | None = None, module="sglang.launch_server"
    ):
        proc = launch_proc(target, *args, env=env, module=module)
        procs.append(proc)
        return proc

    yield _launch
    for proc in procs:
        proc.kill_group()
