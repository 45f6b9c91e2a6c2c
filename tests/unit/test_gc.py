"""`harness gc` on the host (the agent, in-process): which attempt folders the retention rule removes, and
that it never removes one in use — the repo's lock holder, its journal's attempt, a live process's attempt,
or one written to within the last hour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.agent.gc import DAY_S, RECENT_S, Folder, collect_garbage, decide
from harness.agent.lock import RepoLock
from harness.agent.procs import MARKER_ENV
from harness.common.protocol import GcRequest, Journal, LockHolder

NOW = 1_900_000_000.0


def folder(name: str, days: float, size: int = 100) -> Folder:
    run_id, attempt_id = name.split("/")
    return Folder(run_id, attempt_id, f"/w/attempts/{name}", size, NOW - days * DAY_S)


def verdicts(entries) -> dict[str, tuple[bool, str]]:
    return {f"{e.run_id}/{e.attempt_id}": (e.remove, e.why) for e in entries}


def test_older_than_the_limit_goes_unless_in_use_and_nothing_recent_ever_goes():
    folders = [folder("r1/old", 30), folder("r1/busy", 40), folder("r2/fresh", 0.01), folder("r2/young", 3)]
    got = verdicts(decide(folders, {"r1/busy": "it holds the repo's lock"}, GcRequest(older_than_days=14), NOW))
    assert got == {"r1/old": (True, "older than 14 days"), "r1/busy": (False, "in use: it holds the repo's lock"),
                   "r2/fresh": (False, "written to within the last hour"), "r2/young": (False, "newer than 14 days")}
    everything = verdicts(decide(folders, {}, GcRequest(older_than_days=0), NOW))
    assert everything["r2/fresh"][0] is False and everything["r2/young"][0] is True
    assert 0.01 * DAY_S < RECENT_S  # (the fresh one was written to within the last hour)


def test_beyond_the_size_limit_the_oldest_go_first_and_what_is_in_use_still_counts():
    folders = [folder("r/a", 9, 400), folder("r/b", 8, 300), folder("r/c", 7, 200), folder("r/d", 6, 100),
               folder("r/busy", 10, 250)]
    entries = decide(folders, {"r/busy": "a live process of that attempt"}, GcRequest(max_bytes=600), NOW)
    assert [f"{e.run_id}/{e.attempt_id}" for e in entries] == ["r/busy", "r/a", "r/b", "r/c", "r/d"]  # oldest first
    got = verdicts(entries)
    # 1250 bytes; busy (250) must stay: a (400) and b (300) go, leaving 550 <= 600
    assert [k for k, (remove, _) in got.items() if remove] == ["r/a", "r/b"]
    assert got["r/a"][1] == "the oldest beyond 600 bytes" and got["r/c"] == (False, "within the size limit")
    assert sum(e.size_bytes for e in entries if not e.remove) <= 600


def test_a_dry_run_removes_nothing_and_the_lists_are_the_same(tmp_path):
    work = make_folders(tmp_path, {"r1/old": 30, "r1/new": 2})
    repo = git_repo(tmp_path)
    dry = collect_garbage(str(work), str(repo), GcRequest(older_than_days=14, dry_run=True))
    assert (work / "attempts" / "r1" / "old").is_dir() and not any(e.removed for e in dry.entries)
    real = collect_garbage(str(work), str(repo), GcRequest(older_than_days=14, dry_run=False))
    assert verdicts(real.entries) == verdicts(dry.entries)
    assert not (work / "attempts" / "r1" / "old").exists() and (work / "attempts" / "r1" / "new").is_dir()
    assert [e.removed for e in real.entries] == [True, False]
    assert dry.entries[0].size_bytes == 1000 and dry.entries[0].age_s >= 30 * DAY_S - 60


def test_never_removes_the_lock_holders_the_journals_or_a_live_processs_attempt(tmp_path):
    work = make_folders(tmp_path, {"r/locked": 30, "r/journal": 30, "r/live": 30, "other/gone": 30})
    repo = git_repo(tmp_path)
    hdir = repo / ".git" / "harness"
    hdir.mkdir()
    (hdir / "journal.json").write_text(json.dumps(Journal(run_id="r", attempt_id="journal").to_dict()))
    lock = RepoLock(str(hdir))
    lock.acquire(str(repo), LockHolder(run_id="r", attempt_id="locked"), wait_s=0, tick=lambda: None)
    # a process of attempt r/live (a server, a bench client): it carries the attempt's marker
    live = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, MARKER_ENV: "r/live"})
    assert live.stdout is not None and live.stdout.readline() == b"up\n"  # running, its environment in /proc
    try:
        report = collect_garbage(str(work), str(repo), GcRequest(older_than_days=14, dry_run=False))
    finally:
        live.communicate(b"", timeout=30)
        lock.release()
    got = verdicts(report.entries)
    assert got["other/gone"] == (True, "older than 14 days") and not (work / "attempts" / "other").exists()
    assert got["r/locked"] == (False, "in use: it holds the repo's lock")
    assert got["r/journal"] == (False, "in use: its journal is left (run `harness recover`)")
    assert got["r/live"] == (False, "in use: a live process of that attempt")
    for kept in ("locked", "journal", "live"):
        assert (work / "attempts" / "r" / kept / "server.log").is_file()


@pytest.mark.parametrize("kind", ["link", "file"])
def test_only_real_folders_two_levels_down_count_and_links_are_never_followed(tmp_path, kind):
    work = make_folders(tmp_path, {"r/old": 30})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    odd = work / "attempts" / "r" / "odd"
    if kind == "link":
        odd.symlink_to(outside)
        (work / "attempts" / "r" / "old" / "escape").symlink_to(outside)
    else:
        odd.write_text("not a folder")
    report = collect_garbage(str(work), str(git_repo(tmp_path)), GcRequest(older_than_days=14, dry_run=False))
    assert [f"{e.run_id}/{e.attempt_id}" for e in report.entries] == ["r/old"]
    assert (outside / "precious").read_text() == "keep me" and os.path.lexists(odd)


def make_folders(tmp_path: Path, ages: dict[str, float]) -> Path:
    """A work dir with an attempt folder per name, its log of 1000 bytes, last written `ages` days ago."""
    work = tmp_path / "work"
    now = time.time()
    for name, days in ages.items():
        d = work / "attempts" / name
        d.mkdir(parents=True)
        (d / "server.log").write_bytes(b"x" * 1000)
        for p in (d / "server.log", d):
            os.utime(p, (now - days * DAY_S, now - days * DAY_S))
    return work


def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    if not repo.exists():
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo
