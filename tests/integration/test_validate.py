"""`harness validate`: schema checks of experiments, sweeps and hosts, and a dry patch check against a
local copy of the target source — a broken patch is caught before any host is touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import PATCHES, tree_snapshot

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def validate(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "harness", "validate", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_shipped_sim_files_validate_against_a_simulated_checkout(sim_target):
    before = tree_snapshot(sim_target.repo)
    files = sorted(str(p) for p in (ROOT / "experiments" / "sim").glob("*.yaml"))
    p = validate(*files, "--against", str(sim_target.repo))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "patch set sim_fp8_kv_into_mla_plan applies" in p.stdout
    assert tree_snapshot(sim_target.repo) == before  # --against never writes


def test_stale_patch_named_with_file_and_hunk(tmp_path, sim_target):
    (tmp_path / "patches" / "stale").mkdir(parents=True)
    text = next((PATCHES / "sim_fp8_kv_into_mla_plan").glob("*.patch")).read_text()
    (tmp_path / "patches" / "stale" / "0001-stale.patch").write_text(
        text.replace("        k_buffer = self.token_to_kv_pool", "        k_buffer = self.old_pool", 1))
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"name": "e", "patches": ["stale"], "model": {"path": "/m"}}))
    p = validate(str(f), "--against", str(sim_target.repo), "--patches-dir", str(tmp_path / "patches"))
    assert p.returncode == 2
    assert "0001-stale.patch does not apply" in p.stdout and "flashinfer_mla_backend.py" in p.stdout


def test_schema_errors_fail_with_file_and_line(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("model: {path: /m}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {path: /m}\nrepeats: many\n")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  a: {address: local, repo: /r, gpus: -1}\n")
    p = validate(str(good), str(bad), str(hosts))
    assert p.returncode == 2
    assert f"{bad}:2:" in p.stdout and f"{hosts}:2:" in p.stdout and "ok" in p.stdout


def test_patch_set_writing_into_git_is_refused(tmp_path):
    (tmp_path / "patches" / "evil" / "files" / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "patches" / "evil" / "files" / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    (tmp_path / "patches" / "sneaky").mkdir(parents=True)
    (tmp_path / "patches" / "sneaky" / "0001.patch").write_text(
        "--- a/../outside.txt\n+++ b/../outside.txt\n@@ -0,0 +1 @@\n+x\n")
    for name, msg in (("evil", "inside .git/"), ("sneaky", "outside the target repo")):
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump({"name": name, "patches": [name], "model": {"path": "/m"}}))
        p = validate(str(f), "--patches-dir", str(tmp_path / "patches"))
        assert p.returncode == 2 and msg in p.stdout, p.stdout
