"""Issue 45's done-when, on the simulated target: a history of 30 commits, one of which makes flashinfer's decode
15 % slower and one of which does not start (the next one fixes it). `harness bisect` names the slow commit in at
most six steps, skipping the broken one with its triage verdict; its controller is SIGKILLed in the middle of a
step, and `--resume` finishes the bisect; the repo's HEAD, branch and files are then as they were found — read
with git and the file system, not with the harness's helpers. One bisect for the module (about a minute on two
busy cores: nine attempts of a few seconds each)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from harness.sim import Layout, init_target
from tests.conftest import marked_processes, tree_snapshot

# One worker runs the module (a parallel run would otherwise bisect once per worker that takes one of its tests).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("bisect")]

HARNESS = [sys.executable, "-m", "harness"]
SLOW_AT, BROKEN_AT = 19, 15  # commit 15 is the first middle: the bisect meets the broken commit at once
EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "sim" / "bisect-decode.yaml"  # the docs' own
METRIC = "decode:median_itl_ms"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def git_view(repo: Path) -> tuple[str, str, str]:
    """HEAD's commit, the branch it is on, and git's own status (tracked, untracked and ignored files)."""
    return (git(repo, "rev-parse", "HEAD"), git(repo, "symbolic-ref", "HEAD"),
            git(repo, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"))


@dataclass
class Bisected:
    repo: Path
    commits: tuple[str, ...]
    before: tuple[object, ...]
    killed: str  # what the first controller printed before it was killed
    resumed: subprocess.CompletedProcess
    run_id: str
    folder: Path
    resumed_at: float  # when the resume started (this machine's clock, as the records' mtimes)


@pytest.fixture(scope="module")
def bisected(tmp_path_factory) -> Bisected:
    tmp = tmp_path_factory.mktemp("bisect")
    target = init_target(tmp / "sim", history=Layout(commits=30, slow_at=SLOW_AT, broken_at=BROKEN_AT))
    (tmp / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"sim": {
        "address": "local", "repo": str(target.repo), "python": str(target.python), "gpus": 8, "arch": "sm90",
        "workdir": str(tmp / "work")}}}))
    before = (git_view(target.repo), tree_snapshot(target.repo))
    results = ["--results-dir", str(tmp / "results")]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}  # a pipe's lines: 180 wide
    first = subprocess.Popen([*HARNESS, "bisect", str(EXPERIMENT), "--good", "main~30", "--bad", "main", "--metric",
                              METRIC, "--hosts-file", "hosts.yaml", *results], cwd=tmp, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    assert first.stdout is not None
    in_step = False
    for line in first.stdout:  # each line as it comes: step 3's server starts (its commit checked out), the kill
        seen.append(line)
        in_step = in_step or line.startswith("step 3 ")
        if in_step and line.rstrip().endswith(": wait"):
            os.killpg(first.pid, signal.SIGKILL)  # the controller's own group only: the agent has its own session
            break
    first.wait(timeout=60)
    killed = "".join(seen)
    assert in_step and first.returncode == -signal.SIGKILL, killed
    run_id = re.search(r"^run (\S+): bisecting", killed, re.M).group(1)
    resumed_at = time.time()
    resumed = subprocess.run([*HARNESS, "bisect", str(EXPERIMENT), "--resume", run_id, *results], cwd=tmp, env=env,
                             capture_output=True, text=True, timeout=300)
    return Bisected(target.repo, target.commits, before, killed, resumed, run_id, tmp / "results" / run_id,
                    resumed_at)


def test_the_slow_commit_is_named_in_at_most_six_steps_the_broken_one_skipped(bisected):
    out = bisected.resumed.stdout
    assert bisected.resumed.returncode == 0, out + bisected.resumed.stderr
    slow = bisected.commits[SLOW_AT]
    answer = re.search(r"^first bad commit: (\w+) (.*) \(commit (\d+) of 30; (\d+) steps, (\d+) attempts\)$", out, re.M)
    assert answer, out
    assert answer.group(1) == slow and int(answer.group(3)) == SLOW_AT
    assert answer.group(2) == git(bisected.repo, "log", "-1", "--format=%s", slow).strip()
    assert int(answer.group(4)) <= 6
    broken = next(line for line in out.splitlines() if line.startswith(f"{BROKEN_AT} "))
    assert " skip " in broken, out
    assert re.search(rf"^{bisected.commits[BROKEN_AT][:10]} skipped: crashed \(import-error\): ImportError: "
                     r"cannot import name 'resolve_served_model_name'", out, re.M), out


def test_the_tree_is_as_found_after_the_kill_and_the_resume(bisected):
    assert bisected.resumed.returncode == 0, bisected.resumed.stderr
    repo = bisected.repo
    assert (git_view(repo), tree_snapshot(repo)) == bisected.before
    assert not (repo / ".git" / "harness" / "journal.json").exists()
    assert marked_processes(bisected.run_id) == []  # no server of the bisect's left
    assert "HEAD back on refs/heads/main" in bisected.resumed.stdout


def test_the_resume_goes_on_with_the_killed_step_and_redoes_no_finished_one(bisected):
    """No commit tried before the kill is tried again: each commit's records were all written before the resume
    or all after it (a step may take more than one attempt when its samples cannot tell — a loaded machine's
    noise — but never across the kill); the killed step's first attempt folder has none (it was killed before
    its benchmark: nothing to keep), and its second one is the step's result."""
    killed_at = re.search(r"^step 3 \(of at most \d+\): (\w+) ", bisected.killed, re.M)
    assert killed_at, bisected.killed
    first_step = re.search(r"^(good end|bad end|step \d+) .*$", bisected.resumed.stdout, re.M)
    assert first_step and first_step.group(0).startswith("step 3 (of at most"), bisected.resumed.stdout
    assert killed_at.group(1) in first_step.group(0)
    statuses: dict[str, list[str]] = {}
    after_resume: dict[str, set[bool]] = {}
    for record in bisected.folder.glob("*/*/record*.json"):
        data = json.loads(record.read_text())
        statuses.setdefault(data["checkout"], []).append(data["status"])
        after_resume.setdefault(data["checkout"], set()).add(record.stat().st_mtime > bisected.resumed_at)
    assert all(len(sides) == 1 for sides in after_resume.values()), (statuses, after_resume)
    max_attempts = json.loads((bisected.folder / "bisect.json").read_text())["max_attempts"]
    assert all(1 <= len(s) <= max_attempts for s in statuses.values()), statuses
    assert statuses[bisected.commits[BROKEN_AT]] == ["crashed"]
    folder = next(bisected.folder.glob(f"sim-decode.{killed_at.group(1)}"))
    attempts = sorted(p.name for p in folder.iterdir())
    assert attempts == ["01", "02"] and not list((folder / "01").glob("record*.json"))


def test_the_report_page_shows_the_bisect(bisected, tmp_path):
    p = subprocess.run([*HARNESS, "report", str(bisected.folder), "--html", str(tmp_path / "page")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "page" / "index.html").read_text()
    assert "first bad commit: " + bisected.commits[SLOW_AT] in page
    assert 'id="bisect"' in page and bisected.commits[BROKEN_AT][:10] in page


def test_the_dry_run_prints_the_plan_and_changes_nothing(bisected):
    before, runs = (git_view(bisected.repo), tree_snapshot(bisected.repo)), set(bisected.folder.parent.iterdir())
    p = subprocess.run([*HARNESS, "bisect", str(EXPERIMENT), "--good", "main~30", "--metric", METRIC, "--hosts-file",
                        "hosts.yaml", "--results-dir", str(bisected.folder.parent), "--dry-run"],
                       cwd=bisected.folder.parents[1], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"bisect of sim-decode on sim: 30 commits after {bisected.commits[0][:10]} "
                               "(good: main~30) up to "), p.stdout
    assert "then at most 5 steps" in p.stdout and f"the first at commit 15 {bisected.commits[15][:10]} " in p.stdout
    assert "nothing written: --dry-run" in p.stdout
    assert (git_view(bisected.repo), tree_snapshot(bisected.repo)) == before
    assert set(bisected.folder.parent.iterdir()) == runs
