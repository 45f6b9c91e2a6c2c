"""A newcomer's first hour, through the CLI as users run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import write_experiment
from tests.support.sshd import free_port

pytestmark = pytest.mark.integration


def harness(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_compare_from_another_folder_finds_the_run_a_command_wrote(tmp_path, sim_target):
    """The record lands in the default results folder, not in the folder the command ran from; `harness
    compare RUN` run from elsewhere finds it."""
    here, elsewhere, store = tmp_path / "here", tmp_path / "elsewhere", tmp_path / "store"
    here.mkdir()
    elsewhere.mkdir()
    f = write_experiment(here, "stock", free_port(), backend="flashinfer-mla",
                         bench=[{"name": "bs1", "num_prompts": 4, "input_len": 16, "output_len": 8,
                                 "max_concurrency": 1}])
    (here / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": {
        "address": "local", "repo": str(sim_target.repo), "python": str(sim_target.python),
        "workdir": str(tmp_path / "work")}}}))
    env = {**os.environ, "HARNESS_RESULTS_DIR": str(store), "PYTHONPATH": str(Path(__file__).parents[2])}
    p = harness("run", str(f), cwd=here, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"results: {store}" in p.stdout  # it says where records go
    assert not (here / "results").exists()
    (run_dir,) = [d for d in store.iterdir() if d.is_dir()]
    p = harness("compare", run_dir.name, "--format", "csv", cwd=elsewhere, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stock" in p.stdout and "ok" in p.stdout
