"""The agent's tree safety, run in-process against real git repositories (no server, no SSH).

The promise: whatever a patch set does (new nested directories, deletions, renames, mode changes,
whole new files) the tree is restored byte for byte, and when it cannot be (something else wrote into
the tree while it was patched) the attempt says so — `verified: false`, the changed paths named, the
journal kept — and the next attempt refuses to run on that tree instead of measuring it.

These tests drive the agent's own lifecycle (`Attempt.run` in its apply-revert mode, and `recover`)
in this process, so mutation testing (scripts/mutation) can attribute them to the agent's code; the
same promises are checked end to end through sshd in tests/integration/test_promises_agent.py. The tree
is judged with `tree_snapshot` (tests/conftest.py), never with the agent's own git-based check.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import protocol
from harness.agent.attempt import Attempt
from harness.agent.link import Link
from harness.agent.tree import Git
from tests.conftest import tree_snapshot


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A small target tree: tracked files at several depths, one executable, one ignored folder."""
    r = tmp_path / "target"
    (r / "pkg" / "sub").mkdir(parents=True)
    (r / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (r / "pkg" / "server.py").write_text("def serve():\n    return 'stock'\n")
    (r / "pkg" / "old_name.py").write_text("".join(f"LINE_{i} = {i}\n" for i in range(30)))
    (r / "pkg" / "sub" / "gone.py").write_text("DELETE_ME = True\n")
    (r / "run.sh").write_text("#!/bin/sh\necho run\n")
    (r / "run.sh").chmod(0o755)
    (r / "tool.py").write_text("print('tool')\n")
    (r / ".gitignore").write_text("build/\n")
    git(r.parent, "init", "-q", str(r))
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    (r / "notes.txt").write_text("the user's own untracked notes\n")  # untracked, not ignored: must survive
    (r / "build").mkdir()
    (r / "build" / "cache.bin").write_bytes(b"\x00ignored")
    return r


def diff_of(repo: Path, edit: Callable[[Path], None]) -> str:
    """A patch made the way users make them: edit a scratch clone, take `git diff` (renames, modes)."""
    scratch = repo.parent / f"scratch-{len(list(repo.parent.iterdir()))}"
    subprocess.run(["git", "clone", "-q", str(repo), str(scratch)], check=True)
    edit(scratch)
    git(scratch, "add", "-A")
    return git(scratch, "diff", "--cached", "-M", "--binary")


class RecordingLink(Link):
    """The controller's side of the link, in-process: keeps every event and runs `on_stage` hooks."""

    def __init__(self, on_stage: dict[str, Callable[[], None]] | None = None) -> None:
        super().__init__()
        self.events: list[dict] = []
        self.on_stage = on_stage or {}

    def send(self, event: protocol.Event) -> None:
        body = protocol.encode(event)
        self.events.append(body)
        if body["event"] == "stage" and body["stage"] in self.on_stage:
            self.on_stage[body["stage"]]()


def spec_for(repo: Path, tmp_path: Path, patches: list[str], files: list[tuple[str, bytes, int]] = (),
             attempt_id: str = "a1") -> protocol.Spec:
    return protocol.Spec.decode({
        "protocol": protocol.PROTOCOL, "mode": "apply-revert", "run_id": "r1", "attempt_id": attempt_id,
        "repo": str(repo), "workdir": str(tmp_path / "work"), "allow_dirty": ["notes.txt"], "base_ref": None,
        "patches": [{"set": "awkward", "name": f"{i:04d}.patch", "text": t} for i, t in enumerate(patches)],
        "files": [{"set": "awkward", "path": p, "mode": m, "content_b64": base64.b64encode(c).decode()}
                  for p, c, m in files],
        "server": {"argv": ["python3"], "env": {}, "host": "127.0.0.1", "port": "auto"},
        "timeouts": {"stop_grace": 1, "gpu_release": 1}, "requirements": {},
        "heartbeat_timeout_s": None,
    })


def journal_path(repo: Path) -> Path:
    return repo / ".git" / "harness" / "journal.json"


def awkward_patch(repo: Path) -> str:
    def edit(s: Path) -> None:
        nested = s / "pkg" / "new" / "deeper" / "deepest"
        nested.mkdir(parents=True)
        (nested / "module.py").write_text("NEW = True\n")
        (s / "pkg" / "sub" / "gone.py").unlink()                      # deletion (empties pkg/sub)
        (s / "pkg" / "old_name.py").rename(s / "pkg" / "new_name.py")  # rename with a content change
        with open(s / "pkg" / "new_name.py", "a") as f:
            f.write("ONE_MORE = 1\n")
        (s / "tool.py").chmod(0o755)                                  # mode change with a content change
        (s / "tool.py").write_text("#!/usr/bin/env python3\nprint('tool')\n")
        (s / "run.sh").chmod(0o644)                                   # mode-only change
        (s / "pkg" / "server.py").write_text("def serve():\n    return 'patched'\n")

    return diff_of(repo, edit)


def test_awkward_patch_set_is_applied_then_restored_byte_for_byte(repo, tmp_path):
    before = tree_snapshot(repo)
    seen_patched: dict[str, object] = {}

    def look() -> None:  # while patched: the patch really took effect
        seen_patched["module"] = (repo / "pkg/new/deeper/deepest/module.py").exists()
        seen_patched["whole_file"] = (repo / "extra/dir/blob.bin").read_bytes()
        seen_patched["gone"] = not (repo / "pkg/sub/gone.py").exists()
        seen_patched["renamed"] = (repo / "pkg/new_name.py").exists() and not (repo / "pkg/old_name.py").exists()
        seen_patched["tool_exec"] = bool((repo / "tool.py").stat().st_mode & stat.S_IXUSR)
        seen_patched["run_exec"] = bool((repo / "run.sh").stat().st_mode & stat.S_IXUSR)
        seen_patched["journal"] = journal_path(repo).exists()

    link = RecordingLink({"compile": look})
    spec = spec_for(repo, tmp_path, [awkward_patch(repo)], files=[("extra/dir/blob.bin", b"\x00\xffraw", 0o600)])
    result = Attempt(spec, link).run()

    assert result["status"] == "ok", result.get("error")
    assert seen_patched == {"module": True, "whole_file": b"\x00\xffraw", "gone": True, "renamed": True,
                            "tool_exec": True, "run_exec": False, "journal": True}
    assert result["status"] == "ok", result.get("error")
    assert result["revert"]["verified"] is True
    assert tree_snapshot(repo) == before  # every new directory gone, deletions and modes restored
    assert not journal_path(repo).exists()
    assert (repo / "notes.txt").read_text() == "the user's own untracked notes\n"
    assert (repo / "build" / "cache.bin").read_bytes() == b"\x00ignored"


def test_files_created_in_the_tree_while_patched_make_the_revert_unverified(repo, tmp_path):
    """Something (the server, a user) writes into the tree while it is patched: the agent cannot
    restore those bytes, so it must not claim it did."""
    def stray_writes() -> None:
        with open(repo / "pkg" / "__init__.py", "a") as f:  # tracked, not touched by the patch
            f.write("# written by the server\n")
        (repo / "core.12345").write_bytes(b"core dump")     # new, untracked, not ignored

    link = RecordingLink({"compile": stray_writes})
    spec = spec_for(repo, tmp_path, [awkward_patch(repo)])
    result = Attempt(spec, link).run()

    assert result["revert"]["verified"] is False
    assert set(result["revert"]["diff"]) >= {"pkg/__init__.py", "core.12345"}
    assert result["status"] != "ok" and "revert could not be verified" in result["error"]
    assert journal_path(repo).exists(), "the journal is the only trace of what was patched: it must stay"
    journal = json.loads(journal_path(repo).read_text())
    assert journal["attempt_id"] == "a1"
    # What the agent did restore, it restored: the patched files are back.
    assert (repo / "pkg" / "server.py").read_text() == "def serve():\n    return 'stock'\n"
    assert not (repo / "pkg" / "new").exists()

    # The next attempt on this tree refuses to run, names the leftover and changes nothing.
    left = tree_snapshot(repo)
    nxt = Attempt(spec_for(repo, tmp_path, [], attempt_id="a2"), RecordingLink()).run()
    assert nxt["status"] == "preflight-failed"
    assert "a1" in nxt["error"] and "core.12345" in nxt["error"] and "pkg/__init__.py" in nxt["error"]
    assert tree_snapshot(repo) == left and journal_path(repo).exists()


def test_after_the_stray_files_are_dealt_with_the_next_attempt_recovers_and_runs(repo, tmp_path):
    before = tree_snapshot(repo)
    link = RecordingLink({"compile": lambda: (repo / "core.1").write_bytes(b"x")})
    assert Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run()["revert"]["verified"] is False
    (repo / "core.1").unlink()  # the operator removes the core dump; the journal is still there

    link2 = RecordingLink()
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], attempt_id="a2"), link2).run()
    assert result["status"] == "ok", result.get("error")
    assert result["recovered"]["journal"]["attempt_id"] == "a1"
    assert result["recovered"]["revert"]["verified"] is True
    assert any(e["event"] == "recovering" for e in link2.events)
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_agent_killed_while_patched_is_recovered_by_the_next_agent(repo, tmp_path):
    """The agent dies between applying and reverting (SIGKILL: no cleanup runs). The journal written
    before the first byte changed is enough for `recover` to put the tree back."""
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [awkward_patch(repo)], files=[("extra/dir/blob.bin", b"blob", 0o644)])
    dying = Attempt(spec, RecordingLink())
    dying.take_lock()
    dying.apply(dying.preflight())
    dying.release_lock()  # the kernel drops a dead process's flock
    assert tree_snapshot(repo) != before and journal_path(repo).exists()

    rescuer = Attempt(spec_for(repo, tmp_path, [], attempt_id="recover"), RecordingLink())
    result = rescuer.recover()
    assert result["status"] == "ok", result.get("error")
    assert result["recovered"]["revert"]["verified"] is True
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_recover_without_a_journal_changes_nothing_and_says_so(repo, tmp_path):
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, []), RecordingLink()).recover()
    assert result["status"] == "ok" and result["recovered"] is None
    assert "nothing to recover" in result["message"]
    assert tree_snapshot(repo) == before


def test_patch_that_does_not_apply_changes_nothing_and_leaves_no_journal(repo, tmp_path):
    before = tree_snapshot(repo)
    good = awkward_patch(repo)
    stale = ("--- a/pkg/server.py\n+++ b/pkg/server.py\n@@ -1,2 +1,2 @@\n def serve():\n"
             "-    return 'something else'\n+    return 'x'\n")
    result = Attempt(spec_for(repo, tmp_path, [good, stale]), RecordingLink()).run()
    assert result["status"] == "apply-failed"
    assert "0001.patch" in result["error"] and "0000.patch" not in result["error"].split("does not apply")[0]
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_whole_file_that_would_overwrite_an_untracked_user_file_is_refused(repo, tmp_path):
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [], files=[("notes.txt", b"mine now", 0o644)])
    result = Attempt(spec, RecordingLink()).run()
    assert result["status"] in ("apply-failed", "preflight-failed")
    assert "notes.txt" in result["error"]
    assert tree_snapshot(repo) == before


def test_dirty_tree_is_refused_naming_every_dirty_path(repo, tmp_path):
    (repo / "pkg" / "server.py").write_text("local edit\n")
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [])
    spec.allow_dirty = []
    result = Attempt(spec, RecordingLink()).run()
    assert result["status"] == "preflight-failed"
    assert sorted(result["dirty"]) == ["notes.txt", "pkg/server.py"]
    assert tree_snapshot(repo) == before


def test_status_entries_lists_paths_with_spaces_and_untracked_files_in_new_dirs(repo):
    (repo / "dir with space").mkdir()
    (repo / "dir with space" / "a b.txt").write_text("x")
    (repo / "tool.py").write_text("changed\n")
    paths = sorted(p for _, p in Git(str(repo)).status_entries())
    assert paths == ["dir with space/a b.txt", "notes.txt", "tool.py"]


@pytest.mark.parametrize("change", ["content", "mode", "new-untracked", "delete"])
def test_tree_state_changes_with_any_change_git_can_see(repo, tmp_path, change):
    g = Git(str(repo))
    before = g.tree_state(str(tmp_path))
    target = repo / "pkg" / "server.py"
    if change == "content":
        target.write_text(target.read_text() + "#\n")
    elif change == "mode":
        target.chmod(0o755)
    elif change == "new-untracked":
        (repo / "pkg" / "new.py").write_text("")
    else:
        target.unlink()
    assert g.tree_state(str(tmp_path)) != before
    assert git(repo, "status", "--porcelain", "--", "pkg/server.py", "pkg/new.py")  # git agrees it changed
    assert not list(Path(tmp_path).glob("tree-index-*")), "the scratch index is removed"
    assert os.path.exists(repo / ".git" / "index")
