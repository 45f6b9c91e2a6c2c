"""`harness gc` as users run it, on a host reached through the local transport and over real SSH: the old
attempt folders go, the one whose attempt holds the repo's lock and a recent one stay; `--dry-run` lists
the same and removes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.agent.lock import RepoLock
from harness.common.protocol import LockHolder

pytestmark = pytest.mark.integration
DAY_S = 86400


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})


@pytest.mark.parametrize("reach", ["local", "ssh"])
def test_gc_removes_old_attempt_folders_but_never_the_one_holding_the_lock(tmp_path, sim_target, request, reach):
    work = tmp_path / "work"
    now = time.time()
    for name, days in {"run-a/old-01": 30, "run-a/old-02": 20, "run-b/locked-01": 40, "run-c/new-01": 2}.items():
        d = work / "attempts" / name
        d.mkdir(parents=True)
        (d / "server.log").write_bytes(b"x" * 4096)
        for p in (d / "server.log", d):
            os.utime(p, (now - days * DAY_S, now - days * DAY_S))
    entry = {"repo": str(sim_target.repo), "python": str(sim_target.python), "workdir": str(work)}
    entry.update(request.getfixturevalue("sshd").host_entry() if reach == "ssh" else {"address": "local"})
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": entry}}))
    hdir = sim_target.repo / ".git" / "harness"
    hdir.mkdir(exist_ok=True)
    lock = RepoLock(str(hdir))  # an attempt of another harness runs on this repo now
    lock.acquire(str(sim_target.repo), LockHolder(run_id="run-b", attempt_id="locked-01"), wait_s=0, tick=lambda: None)
    try:
        dry = harness("gc", "--dry-run", "--older-than", "7", cwd=tmp_path)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert sorted(p.relative_to(work).as_posix() for p in work.glob("attempts/*/*")) == [
            "attempts/run-a/old-01", "attempts/run-a/old-02", "attempts/run-b/locked-01", "attempts/run-c/new-01"]
        shown = " ".join(dry.stdout.split())
        assert "would remove run-a/old-01" in shown and "would remove run-a/old-02" in shown
        assert "keep run-b/locked-01 4.0 KB, 40.0 days: in use: it holds the repo's lock" in shown
        assert "keep run-c/new-01" in shown and "newer than 7 days" in shown
        real = harness("gc", "--older-than", "7", "--json", cwd=tmp_path)
    finally:
        lock.release()
    assert real.returncode == 0, real.stdout + real.stderr
    report = json.loads(real.stdout)["box"]
    assert {f"{e['run_id']}/{e['attempt_id']}": e["removed"] for e in report["entries"]} == {
        "run-a/old-01": True, "run-a/old-02": True, "run-b/locked-01": False, "run-c/new-01": False}
    assert sorted(p.relative_to(work).as_posix() for p in work.glob("attempts/**/*")) == [
        "attempts/run-b", "attempts/run-b/locked-01", "attempts/run-b/locked-01/server.log",
        "attempts/run-c", "attempts/run-c/new-01", "attempts/run-c/new-01/server.log"]  # run-a's folder went too


def test_gc_names_an_unreachable_host_and_exits_3(tmp_path):
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"gone": {
        "address": "127.0.0.1", "port": 1, "repo": "/nonexistent", "connect_timeout": 2}}}))
    p = harness("gc", "--dry-run", cwd=tmp_path)
    assert p.returncode == 3 and "gone: not cleaned" in p.stdout and "Traceback" not in p.stderr, p.stdout + p.stderr
