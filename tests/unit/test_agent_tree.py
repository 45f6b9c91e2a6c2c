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

from harness.agent.attempt import Attempt
from harness.agent.link import Link
from harness.agent.tree import Git, digest
from harness.common import protocol
from tests.conftest import tree_snapshot


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit(repo: Path, message: str) -> None:
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", message)


def git_state(repo: Path) -> tuple[str, str]:
    """What git shows of a tree beyond its files: the branch checked out, and the staging area."""
    return git(repo, "symbolic-ref", "HEAD"), git(repo, "status", "--porcelain=v1", "--untracked-files=all")


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path)


def make_repo(tmp_path: Path) -> Path:
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
    commit(r, "base")
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
             attempt_id: str = "a1", run_id: str = "r1", mode: str = "apply-revert",
             argv: list[str] = ("python3",)) -> protocol.Spec:
    return protocol.Spec.decode({
        "protocol": protocol.PROTOCOL, "mode": mode, "run_id": run_id, "attempt_id": attempt_id,
        "repo": str(repo), "workdir": str(tmp_path / "work"), "allow_dirty": ["notes.txt"], "base_ref": None,
        "patches": [{"set": "awkward", "name": f"{i:04d}.patch", "text": t} for i, t in enumerate(patches)],
        "files": [{"set": "awkward", "path": p, "mode": m, "content_b64": base64.b64encode(c).decode()}
                  for p, c, m in files],
        "server": {"argv": list(argv), "env": {}, "host": "127.0.0.1", "port": "auto"},
        "timeouts": {"stop_grace": 1, "gpu_release": 1}, "requirements": {},
        "heartbeat_timeout_s": None,
    })


def journal_path(repo: Path) -> Path:
    return repo / ".git" / "harness" / "journal.json"


def stages(link: RecordingLink) -> list[str]:
    return [e["stage"] for e in link.events if e["event"] == "stage"]


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
    before, git_before = tree_snapshot(repo), git_state(repo)
    seen_patched: dict[str, object] = {}

    def look() -> None:  # while patched: the patch really took effect
        seen_patched["module"] = (repo / "pkg/new/deeper/deepest/module.py").exists()
        seen_patched["whole_file"] = (repo / "extra/dir/blob.bin").read_bytes()
        seen_patched["whole_file_in_existing_dir"] = (repo / "pkg/whole.py").read_bytes()
        seen_patched["gone"] = not (repo / "pkg/sub/gone.py").exists()
        seen_patched["renamed"] = (repo / "pkg/new_name.py").exists() and not (repo / "pkg/old_name.py").exists()
        seen_patched["tool_exec"] = bool((repo / "tool.py").stat().st_mode & stat.S_IXUSR)
        seen_patched["run_exec"] = bool((repo / "run.sh").stat().st_mode & stat.S_IXUSR)
        seen_patched["journal"] = journal_path(repo).exists()

    link = RecordingLink({"compile": look})
    spec = spec_for(repo, tmp_path, [awkward_patch(repo)],
                    files=[("extra/dir/blob.bin", b"\x00\xffraw", 0o600), ("pkg/whole.py", b"WHOLE = 1\n", 0o644)])
    result = Attempt(spec, link).run()

    assert result.status == "ok", result.error
    assert seen_patched == {"module": True, "whole_file": b"\x00\xffraw", "whole_file_in_existing_dir": b"WHOLE = 1\n",
                            "gone": True, "renamed": True, "tool_exec": True, "run_exec": False, "journal": True}
    revert = result.revert
    assert revert is not None and revert.verified is True and revert.diff == []
    assert revert.tree_before is not None and len(revert.tree_before) == 64 and revert.tree_after == revert.tree_before
    assert tree_snapshot(repo) == before  # every new directory gone, deletions and modes restored
    assert git_state(repo) == git_before  # the same branch checked out, nothing staged
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

    assert result.revert.verified is False
    assert set(result.revert.diff) >= {"pkg/__init__.py", "core.12345"}
    assert result.status == "infra-error" and "revert could not be verified" in result.error
    assert journal_path(repo).exists(), "the journal is the only trace of what was patched: it must stay"
    journal = json.loads(journal_path(repo).read_text())
    assert journal["attempt_id"] == "a1"
    # What the agent did restore, it restored: the patched files are back.
    assert (repo / "pkg" / "server.py").read_text() == "def serve():\n    return 'stock'\n"
    assert not (repo / "pkg" / "new").exists()

    # The next attempt on this tree refuses to run, names the leftover and changes nothing.
    left = tree_snapshot(repo)
    nxt = Attempt(spec_for(repo, tmp_path, [], attempt_id="a2"), RecordingLink()).run()
    assert nxt.status == "preflight-failed"
    assert "a1" in nxt.error and "core.12345" in nxt.error and "pkg/__init__.py" in nxt.error
    assert tree_snapshot(repo) == left and journal_path(repo).exists()


def test_after_the_stray_files_are_dealt_with_the_next_attempt_recovers_and_runs(repo, tmp_path):
    before = tree_snapshot(repo)
    link = RecordingLink({"compile": lambda: (repo / "core.1").write_bytes(b"x")})
    assert Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run().revert.verified is False
    (repo / "core.1").unlink()  # the operator removes the core dump; the journal is still there

    link2 = RecordingLink()
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], attempt_id="a2"), link2).run()
    assert result.status == "ok", result.error
    assert result.recovered.journal.attempt_id == "a1"
    assert result.recovered.revert.verified is True
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
    assert result.status == "ok", result.error
    assert result.recovered.revert.verified is True
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_recover_without_a_journal_changes_nothing_and_says_so(repo, tmp_path):
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, []), RecordingLink()).recover()
    assert result.status == "ok" and result.recovered is None
    assert "nothing to recover" in result.message
    assert tree_snapshot(repo) == before


def test_patch_that_does_not_apply_changes_nothing_and_leaves_no_journal(repo, tmp_path):
    before = tree_snapshot(repo)
    good = awkward_patch(repo)
    stale = ("--- a/pkg/server.py\n+++ b/pkg/server.py\n@@ -1,2 +1,2 @@\n def serve():\n"
             "-    return 'something else'\n+    return 'x'\n")
    result = Attempt(spec_for(repo, tmp_path, [good, stale]), RecordingLink()).run()
    assert result.status == "apply-failed"
    assert "0001.patch" in result.error and "0000.patch" not in result.error.split("does not apply")[0]
    first = result.error.splitlines()[0]  # what progress lines and summaries show: git's reason is on it
    assert first.endswith(": patch failed: pkg/server.py:1"), first
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_whole_file_that_would_overwrite_an_untracked_user_file_is_refused(repo, tmp_path):
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [], files=[("notes.txt", b"mine now", 0o644)])
    result = Attempt(spec, RecordingLink()).run()
    assert result.status in ("apply-failed", "preflight-failed")
    assert "notes.txt" in result.error
    assert tree_snapshot(repo) == before


def test_dirty_tree_is_refused_naming_every_dirty_path(repo, tmp_path):
    (repo / "pkg" / "server.py").write_text("local edit\n")
    git(repo, "mv", "tool.py", "tool_renamed.py")  # a staged rename: both names are dirty
    (repo / "x").write_text("a one-letter name\n")
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [])
    spec.allow_dirty = []
    result = Attempt(spec, RecordingLink()).run()
    assert result.status == "preflight-failed"
    assert sorted(result.preflight.dirty) == ["notes.txt", "pkg/server.py", "tool.py", "tool_renamed.py", "x"]
    assert tree_snapshot(repo) == before


def test_status_entries_lists_paths_with_spaces_and_untracked_files_in_new_dirs(repo):
    (repo / "dir with space").mkdir()
    (repo / "dir with space" / "a b.txt").write_text("x")
    (repo / "tool.py").write_text("changed\n")
    paths = sorted(Git(str(repo)).status_entries())
    assert paths == ["dir with space/a b.txt", "notes.txt", "tool.py"]


@pytest.mark.parametrize("change", ["content", "mode", "new-untracked", "delete", "crlf-under-autocrlf", "link"])
def test_the_tree_manifest_changes_with_any_change_of_bytes_even_one_git_filters_away(repo, change):
    g = Git(str(repo))
    target = repo / "pkg" / "server.py"
    if change == "crlf-under-autocrlf":  # git's own hash of the file would not change: the bytes do
        git(repo, "config", "core.autocrlf", "true")
    before = digest(g.manifest())
    if change == "content":
        target.write_text(target.read_text() + "#\n")
    elif change == "mode":
        target.chmod(0o755)
    elif change == "new-untracked":
        (repo / "pkg" / "new.py").write_text("")
    elif change == "crlf-under-autocrlf":
        target.write_bytes(target.read_bytes().replace(b"\n", b"\r\n"))
    elif change == "link":
        (repo / "pkg" / "link").symlink_to("sub")
    else:
        target.unlink()
    assert digest(g.manifest()) != before
    assert os.path.exists(repo / ".git" / "index")


def test_the_manifest_names_exactly_the_tracked_and_untracked_files_and_its_digest_ignores_order(repo):
    """The verification's two halves: what is compared (every file git knows or would add, nothing else —
    no entry for the repo itself) and how (a digest of the mapping, whatever order it was built in)."""
    manifest = Git(str(repo)).manifest()
    on_disk = {p.relative_to(repo).as_posix() for p in repo.rglob("*")
               if ".git" not in p.relative_to(repo).parts and (p.is_file() or p.is_symlink())}
    ignored = set(Git(str(repo)).ignored())
    assert set(manifest) == on_disk - ignored
    assert digest(dict(reversed(list(manifest.items())))) == digest(manifest)


# ------------------------------------------------------------------ what the plan refuses, before anything changes


def test_patch_touching_an_allow_listed_dirty_file_is_refused_naming_it(repo, tmp_path):
    """Revert restores a patched file from the base commit: on a file with the user's own (allow-listed)
    edits that would throw the edits away, so the attempt is refused even where git apply would succeed."""
    def edit(s: Path) -> None:
        old = s / "pkg" / "old_name.py"
        old.write_text(old.read_text().replace("LINE_0 = 0", "LINE_0 = 'patched'"))
        (s / "pkg" / "server.py").write_text("def serve():\n    return 'patched'\n")

    patch = diff_of(repo, edit)
    with open(repo / "pkg" / "old_name.py", "a") as f:  # far from the patch's hunk
        f.write("USER_EDIT = 1\n")
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [patch])
    spec.allow_dirty = ["notes.txt", "pkg/old_name.py"]
    result = Attempt(spec, RecordingLink()).run()
    assert result.status == "preflight-failed"
    assert "pkg/old_name.py" in result.error and "dirty (allow-listed)" in result.error
    assert "pkg/server.py" not in result.error
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_patch_renaming_an_allow_listed_dirty_file_is_refused_and_the_users_edits_kept(repo, tmp_path):
    patch = diff_of(repo, lambda s: (s / "pkg" / "old_name.py").rename(s / "pkg" / "new_name.py"))
    with open(repo / "pkg" / "old_name.py", "a") as f:
        f.write("USER_EDIT = 1\n")
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [patch])
    spec.allow_dirty = ["notes.txt", "pkg/old_name.py"]
    result = Attempt(spec, RecordingLink()).run()
    assert tree_snapshot(repo) == before
    assert result.status == "preflight-failed" and "pkg/old_name.py" in result.error


def test_whole_file_over_an_ignored_user_file_is_refused_and_the_file_kept(repo, tmp_path):
    """git does not list ignored files, but revert would delete what the patch set wrote there."""
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, [], files=[("build/cache.bin", b"ours", 0o644)]), RecordingLink()).run()
    assert result.status == "apply-failed"
    assert "build/cache.bin" in result.error and "move it away" in result.error
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_whole_file_with_a_path_outside_the_tree_is_refused_naming_the_patch_set(repo, tmp_path):
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, [], files=[("../outside.txt", b"x", 0o644)]), RecordingLink()).run()
    assert result.status == "apply-failed"
    assert "awkward" in result.error and "../outside.txt" in result.error
    assert not (repo.parent / "outside.txt").exists()
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


# ------------------------------------------------------------------ the host's git and its names


def test_the_hosts_git_config_does_not_change_what_a_patch_writes(repo, tmp_path):
    """A host with apply.whitespace=fix: a patch that adds trailing whitespace is applied as it was made."""
    git(repo, "config", "apply.whitespace", "fix")
    patch = diff_of(repo, lambda s: (s / "pkg" / "server.py").write_text("def serve():  \n    return 'x'\n"))
    before = tree_snapshot(repo)
    seen = {}
    link = RecordingLink({"compile": lambda: seen.update(text=(repo / "pkg" / "server.py").read_text())})
    result = Attempt(spec_for(repo, tmp_path, [patch]), link).run()
    assert result.status == "ok", result.error
    assert seen["text"] == "def serve():  \n    return 'x'\n"
    assert tree_snapshot(repo) == before


def test_a_host_whose_git_refuses_whitespace_errors_still_applies_the_patch(repo, tmp_path):
    git(repo, "config", "apply.whitespace", "error")
    patch = diff_of(repo, lambda s: (s / "pkg" / "server.py").write_text("def serve():  \n    return 'x'\n"))
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, [patch]), RecordingLink()).run()
    assert result.status == "ok", result.error
    assert tree_snapshot(repo) == before


def test_tree_changed_between_preflight_and_apply_fails_as_apply_failed_naming_the_file(repo, tmp_path):
    """git apply writes nothing when it fails; the attempt says apply-failed in git's words, which name
    the file — even a name that is not UTF-8, on a host whose git prints such names raw."""
    name = os.fsdecode(b"caf\xe9.txt")
    (repo / name).write_text("menu\n")
    commit(repo, "a latin-1 name")
    git(repo, "config", "core.quotePath", "false")
    patch = diff_of(repo, lambda s: (s / name).write_text("carte\n"))
    link = RecordingLink({"patch": lambda: (repo / name).write_text("changed after the preflight\n")})
    result = Attempt(spec_for(repo, tmp_path, [patch]), link).run()
    assert result.status == "apply-failed"
    assert "caf\ufffd.txt" in result.error
    # git's reason on the first line (the one progress lines and summaries show), and all it said below it
    first, *rest = result.error.splitlines()
    assert first.startswith("git apply failed: patch failed: caf\ufffd.txt"), first
    assert any("patch does not apply" in line for line in rest), result.error
    assert result.revert.verified is True and not journal_path(repo).exists()


def test_files_whose_names_look_like_options_are_restored(repo, tmp_path):
    (repo / "-dash.txt").write_text("looks like an option\n")
    commit(repo, "a dash")
    before = tree_snapshot(repo)
    patch = diff_of(repo, lambda s: (s / "-dash.txt").write_text("patched\n"))
    result = Attempt(spec_for(repo, tmp_path, [patch]), RecordingLink()).run()
    assert result.status == "ok", result.error
    assert tree_snapshot(repo) == before


def test_patch_creating_a_file_with_a_tab_in_its_name_is_reverted(repo, tmp_path):
    """git's numstat separates fields with tabs, so the plan misreads such a name; the check against git
    status after applying puts the real name in the journal."""
    before = tree_snapshot(repo)
    patch = diff_of(repo, lambda s: (s / "pkg" / "a\tb.py").write_text("TAB = 1\n"))
    seen = {}
    link = RecordingLink({"compile": lambda: seen.update(json.loads(journal_path(repo).read_text()))})
    result = Attempt(spec_for(repo, tmp_path, [patch]), link).run()
    assert result.status == "ok", result.error
    assert "pkg/a\tb.py" in seen["delete"]
    assert tree_snapshot(repo) == before


def test_a_users_empty_folder_that_a_new_file_goes_into_is_kept(repo, tmp_path):
    (repo / "pkg" / "empty").mkdir()  # invisible to git, the user's all the same
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [], files=[("pkg/empty/new.py", b"NEW = 1\n", 0o644)])
    result = Attempt(spec, RecordingLink()).run()
    assert result.status == "ok", result.error
    assert tree_snapshot(repo) == before


def test_a_patch_set_changing_more_than_200_files_is_restored(repo, tmp_path):
    """Revert restores in chunks of paths (argv limits): every chunk is restored."""
    (repo / "many").mkdir()
    for i in range(250):
        (repo / "many" / f"m{i:03d}.py").write_text(f"N = {i}\n")
    commit(repo, "many files")
    before = tree_snapshot(repo)
    patch = diff_of(repo, lambda s: [(s / "many" / f"m{i:03d}.py").write_text("N = -1\n") for i in range(250)])
    result = Attempt(spec_for(repo, tmp_path, [patch]), RecordingLink()).run()
    assert result.status == "ok", result.error
    assert len(result.patch.changed_paths.restore) == 250
    assert tree_snapshot(repo) == before


def test_the_same_attempt_run_twice_in_one_work_dir_runs_both_times(repo, tmp_path):
    """A retry that reuses the attempt's id finds its work folder, patches included, from last time."""
    before = tree_snapshot(repo)
    for _ in range(2):
        result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), RecordingLink()).run()
        assert result.status == "ok", result.error
    assert os.listdir(tmp_path / "work" / "attempts" / "r1" / "a1" / "patches") == ["00-awkward-0000.patch"]
    assert tree_snapshot(repo) == before


# ------------------------------------------------------------------ what the verification must see


def test_a_tracked_file_in_an_ignored_folder_changed_while_patched_makes_the_revert_unverified(repo, tmp_path):
    """`build/` is ignored, but a file force-added there is tracked: it is part of the tree."""
    (repo / "build" / "tracked.cfg").write_text("tracked despite .gitignore\n")
    git(repo, "add", "-f", "build/tracked.cfg")
    commit(repo, "a tracked file in an ignored folder")
    link = RecordingLink({"compile": lambda: (repo / "build" / "tracked.cfg").write_text("changed\n")})
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run()
    assert result.revert.verified is False and result.revert.diff == ["build/tracked.cfg"]
    assert result.status == "infra-error" and journal_path(repo).exists()


def test_unverified_revert_names_a_stray_file_whose_name_is_not_utf8(repo, tmp_path):
    git(repo, "config", "core.quotePath", "false")  # git prints such names raw
    link = RecordingLink({"compile": lambda: (repo / os.fsdecode(b"core.\xe9")).write_bytes(b"x")})
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run()
    assert result.revert.verified is False and result.revert.diff == ["core.\ufffd"]
    assert result.status == "infra-error" and journal_path(repo).exists()


def test_revert_restores_from_the_base_commit_even_a_patched_file_someone_staged(repo, tmp_path):
    before, git_before = tree_snapshot(repo), git_state(repo)
    link = RecordingLink({"compile": lambda: git(repo, "add", "pkg/server.py")})
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run()
    assert result.status == "ok", result.error
    assert tree_snapshot(repo) == before and git_state(repo) == git_before


# ------------------------------------------------------------------ a patch set writes only inside the tree


def link_patch(link: str, target: str) -> str:
    """A patch making `link` a symbolic link to `target`, as `git diff` writes one."""
    return (f"diff --git a/{link} b/{link}\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
            f"+++ b/{link}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")


def hooks_of(repo: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (repo / ".git" / "hooks").iterdir()}


@pytest.mark.parametrize("where", ["outside", "dot-git"])
def test_whole_file_written_through_a_link_the_patches_create_is_refused_and_nothing_stays(repo, tmp_path, where):
    """The patch makes a link (git allows it), files/ then writes through it: outside the tree, or into
    .git/hooks, where the revert's own `git checkout` would run what was written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = str(outside) if where == "outside" else ".git/hooks"
    before, hooks_before = tree_snapshot(repo), hooks_of(repo)
    spec = spec_for(repo, tmp_path, [link_patch("lnk", target)],
                    files=[("lnk/post-checkout", b"#!/bin/sh\ntouch pwned\n", 0o755)])
    result = Attempt(spec, RecordingLink()).run()

    assert result.status == "apply-failed", result.error
    assert "lnk/post-checkout" in result.error and "symbolic link lnk" in result.error
    assert list(outside.iterdir()) == [] and hooks_of(repo) == hooks_before
    assert not (repo / "pwned").exists() and not (repo / "lnk").is_symlink()
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()
    assert result.revert.verified is True  # what was applied (the link) is gone again


@pytest.mark.parametrize("entry", ["ext/evil.txt", "ext"])
def test_whole_file_through_a_tracked_link_pointing_outside_is_refused_before_anything_changes(
        repo, tmp_path, entry):
    """The controller cannot see the host's tree: a link already there is the agent's to notice."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.txt").write_text("theirs\n")
    (repo / "ext").symlink_to(outside if entry.endswith("evil.txt") else outside / "kept.txt")
    commit(repo, "a tracked link to a folder outside")
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, [], files=[(entry, b"evil\n", 0o644)]), RecordingLink()).run()

    assert result.status == "apply-failed", result.error
    assert f"files/{entry}" in result.error and "symbolic link ext" in result.error
    assert sorted(p.name for p in outside.iterdir()) == ["kept.txt"]
    assert (outside / "kept.txt").read_text() == "theirs\n"
    assert tree_snapshot(repo) == before and not journal_path(repo).exists() and result.revert is None


def test_whole_file_over_a_tracked_hard_link_replaces_the_file_and_leaves_the_other_name_alone(repo, tmp_path):
    """A tracked file that shares its inode with a file outside the tree (`cp -al`, a deduplicating tool):
    writing the entry into it would change the outside file too; the entry replaces it instead."""
    outside = tmp_path / "outside.py"
    os.link(repo / "tool.py", outside)
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, [], files=[("tool.py", b"print('patched')\n", 0o644)]),
                     RecordingLink()).run()

    assert result.status == "ok", result.error
    assert outside.read_text() == "print('tool')\n", "the file outside the tree was written through its inode"
    assert tree_snapshot(repo) == before and result.revert.verified is True


@pytest.mark.parametrize("what", ["does not exist on the host", "is a file, not a folder", "is not a git repository"])
def test_a_repo_entry_that_is_no_checkout_says_what_it_is_and_which_key_to_fix(tmp_path, what):
    target = tmp_path / "target"
    if what.startswith("is a file"):
        target.write_text("not a checkout\n")
    elif what.startswith("is not a git"):
        target.mkdir()
    result = Attempt(spec_for(target, tmp_path, []), RecordingLink()).run()
    assert result.status == "preflight-failed"
    assert what in result.error and "`repo:`" in result.error and "hosts.yaml" in result.error


def test_whole_file_at_the_path_of_a_link_the_patches_create_is_refused_after_git_apply(repo, tmp_path):
    """The link does not exist when the plan is checked: only the check after `git apply` sees that the
    entry's own path is now a link (the controller refuses such a set too; the agent must not rely on it)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    before = tree_snapshot(repo)
    spec = spec_for(repo, tmp_path, [link_patch("lnk", str(outside / "target.txt"))],
                    files=[("lnk", b"through the link\n", 0o644)])
    result = Attempt(spec, RecordingLink()).run()

    assert result.status == "apply-failed", result.error
    assert "files/lnk" in result.error and "symbolic link" in result.error
    assert list(outside.iterdir()) == [] and tree_snapshot(repo) == before
    assert result.revert.verified is True


def _rewrite_hook(repo: Path) -> None:
    (repo / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\necho hook\n")


def _change_config(repo: Path) -> None:
    with open(repo / ".git" / "config", "a") as f:
        f.write("[alias]\n\tst = status\n")


def _change_ignored(repo: Path) -> None:
    (repo / "build" / "cache.bin").write_bytes(b"\x00changed while patched")
    (repo / "pkg" / "__pycache__").mkdir(exist_ok=True)  # Python's caches are not part of the promise
    (repo / "pkg" / "__pycache__" / "server.cpython-311.pyc").write_bytes(b"new bytecode")


@pytest.mark.parametrize("change, differs", [(_rewrite_hook, ".git/hooks/post-checkout"),
                                             (_change_config, ".git/config"),
                                             (_change_ignored, "build/cache.bin")])
def test_a_hook_git_config_or_ignored_file_changed_while_patched_makes_the_revert_unverified(
        repo, tmp_path, change, differs):
    (repo / ".gitignore").write_text("build/\n__pycache__/\n")
    commit(repo, "ignore caches")
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "server.cpython-311.pyc").write_bytes(b"old bytecode")
    link = RecordingLink({"compile": lambda: change(repo)})
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run()
    assert result.revert.verified is False and result.revert.diff == [differs]
    assert result.status == "infra-error" and journal_path(repo).exists()


def test_whole_file_below_a_tracked_file_is_a_patch_failure_naming_both_and_changes_nothing(repo, tmp_path):
    """`files/run.sh/extra.py` can never be written (run.sh is a file): no retry can fix it, so it is the
    patch set's failure (apply-failed) with a sentence — not an agent error with a traceback."""
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, [], files=[("run.sh/extra.py", b"x", 0o644)]), RecordingLink()).run()
    assert result.status == "apply-failed", result
    assert "files/run.sh/extra.py" in result.error and "awkward" in result.error
    assert "Traceback" not in result.error
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_whole_file_below_a_file_the_same_patch_set_adds_is_a_patch_failure_and_reverted(repo, tmp_path):
    """The clash only exists once the set's own diff has added `pkg/added.py`: still apply-failed, the diff
    already applied is reverted."""
    before = tree_snapshot(repo)
    added = diff_of(repo, lambda s: (s / "pkg" / "added.py").write_text("A = 1\n"))
    spec = spec_for(repo, tmp_path, [added], files=[("pkg/added.py/inner.py", b"x", 0o644)])
    result = Attempt(spec, RecordingLink()).run()
    assert result.status == "apply-failed", result
    assert "files/pkg/added.py/inner.py" in result.error and "Traceback" not in result.error
    assert result.revert.verified is True
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


# ------------------------------------------------------------------ names a spec built by hand gives (#48)

HAND_BUILT = {  # each one `git apply` takes without a word: it strips `/tmp` (or `/dev`) to a folder in the tree
    "plain diff, absolute target": ("--- /dev/null\n+++ /tmp/harness-48\n@@ -0,0 +1 @@\n+x\n", 2, "tmp"),
    "plain diff, CRLF": ("--- /dev/null\r\n+++ /tmp/harness-48\r\n@@ -0,0 +1 @@\r\n+x\r\n", 2, "tmp"),
    "plain diff, /dev/null on both sides": ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+x\n", 2, "dev"),
    "git diff, +++ absolute": ("diff --git a/tmp/harness-48 b/tmp/harness-48\nnew file mode 100644\n"
                               "--- /dev/null\n+++ /tmp/harness-48\n@@ -0,0 +1 @@\n+x\n", 4, "tmp"),
}


@pytest.mark.parametrize("form", sorted(HAND_BUILT))
def test_a_hand_built_spec_naming_an_absolute_path_is_refused_on_the_host_before_git_reads_it(repo, tmp_path, form):
    """The controller refuses these when it reads the set; a spec that never went through it must not get
    further on the host: refused before anything is applied, naming the set, the patch, the line."""
    text, line, folder = HAND_BUILT[form]
    before = tree_snapshot(repo)
    link = RecordingLink()
    result = Attempt(spec_for(repo, tmp_path, [text]), link).run()
    assert result.status == "apply-failed", result.error
    assert f"patch set awkward, 0000.patch line {line}: " in result.error and "refused" in result.error
    assert "patch" not in stages(link) and not (repo / folder).exists()  # refused at preflight
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()
