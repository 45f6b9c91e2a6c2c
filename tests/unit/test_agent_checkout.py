"""A bisect step's attempt at another commit, in-process on real git repositories: the agent checks the commit
out before the patches and puts HEAD — its commit and its branch — back after them, verified as part of the
revert; a killed agent's journal lets its watchdog or the next agent do the same. And the history mode's look
at the commits between two ends. The tree is judged with git and `tree_snapshot`, never the agent's helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agent.attempt import Attempt
from harness.agent.history import read_history
from harness.agent.serve import serve
from harness.agent.tree import Git
from harness.common.outcome import HistoryRequest
from tests.conftest import tree_snapshot
from tests.unit.test_agent_journal import hand_to_watchdog, watchdog_report
from tests.unit.test_agent_tree import (
    RecordingLink,
    diff_of,
    git,
    journal_path,
    make_repo,
    spec_for,
)


@pytest.fixture
def repo(tmp_path) -> Path:
    """make_repo's tree (base; the user's untracked notes.txt beside it, which the allow-list covers), then two
    commits on its branch: one changes pkg/server.py, one adds pkg/later.py."""
    r = make_repo(tmp_path)
    (r / "pkg" / "server.py").write_text("def serve():\n    return 'second'\n")
    commit_only(r, "pkg/server.py", "second: serve says so")
    (r / "pkg" / "later.py").write_text("LATER = True\n")
    commit_only(r, "pkg/later.py", "third: a later module")
    assert git(r, "status", "--porcelain") == "?? notes.txt\n"
    return r


def commit_only(repo: Path, path: str, message: str) -> None:
    git(repo, "add", path)
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", message)


def head_state(repo: Path) -> tuple[str, str, str]:
    """HEAD's commit, the ref it is on (empty: detached), and git status: read with git itself."""
    on = git(repo, "symbolic-ref", "-q", "HEAD") if (repo / ".git" / "HEAD").read_text().startswith("ref:") else ""
    return git(repo, "rev-parse", "HEAD").strip(), on.strip(), git(repo, "status", "--porcelain=v1")


def base_of(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD~2").strip()


def server_patch(repo: Path, base: str) -> str:
    """A patch made against the base commit (it does not apply at HEAD, where server.py changed)."""
    def edit(s: Path) -> None:
        git(s, "checkout", "-q", base)
        (s / "pkg" / "server.py").write_text("def serve():\n    return 'patched'\n")
    return diff_of(repo, edit)


def checkout_spec(repo: Path, tmp_path: Path, ref: str, patches: list[str] = (), **kw) -> object:
    spec = spec_for(repo, tmp_path, list(patches), **kw)
    spec.checkout = ref
    return spec


def test_the_commit_is_checked_out_under_the_patches_and_head_is_put_back_on_its_branch(repo, tmp_path):
    before, head_before = tree_snapshot(repo), head_state(repo)
    base = base_of(repo)
    seen: dict[str, object] = {}

    def look() -> None:
        seen["head"] = git(repo, "rev-parse", "HEAD").strip()
        seen["detached"] = not (repo / ".git" / "HEAD").read_text().startswith("ref:")
        seen["server"] = (repo / "pkg" / "server.py").read_text()
        seen["later"] = (repo / "pkg" / "later.py").exists()
        seen["journal"] = json.loads(journal_path(repo).read_text())["checkout"]

    def checked_out() -> None:  # between the checkout and the patches: the journal already says where HEAD was
        journal = json.loads(journal_path(repo).read_text())
        seen["before patches"] = (journal["run_id"], journal["attempt_id"], journal["marker"], journal["state"],
                                  journal["restore"], journal["dirty_before"], journal["base_commit"],
                                  len(journal["tree_before"]), git(repo, "rev-parse", "HEAD").strip())

    result = Attempt(checkout_spec(repo, tmp_path, "HEAD~2", [server_patch(repo, base)]),
                     RecordingLink({"patch": checked_out, "compile": look})).run()

    assert result.status == "ok", result.error
    # the user's untracked notes.txt is no file of the patches': whatever they leave untracked is (the revert
    # deletes those), so the journal names it as there before
    assert seen.pop("before patches") == ("r1", "a1", "r1/a1", "checkout", [], ["notes.txt"], base, 64, base)
    assert result.preflight.base_commit == base  # the record says which commit was measured
    assert seen == {"head": base, "detached": True, "server": "def serve():\n    return 'patched'\n",
                    "later": False, "journal": {"commit": base, "head": head_before[0], "branch": head_before[1]}}
    assert result.revert.verified is True and result.revert.diff == []
    assert head_state(repo) == head_before and tree_snapshot(repo) == before
    assert not journal_path(repo).exists()


def test_a_detached_head_is_put_back_detached(repo, tmp_path):
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    git(repo, "branch", git(repo, "rev-parse", "HEAD").strip())  # a branch named like the commit: still detached
    before, head_before = tree_snapshot(repo), head_state(repo)
    result = Attempt(checkout_spec(repo, tmp_path, "HEAD~1"), RecordingLink()).run()
    assert result.status == "ok", result.error
    assert head_before[1] == "" and head_state(repo) == head_before and tree_snapshot(repo) == before


def test_patches_that_do_not_apply_at_the_commit_leave_head_and_tree_as_found(repo, tmp_path):
    before, head_before = tree_snapshot(repo), head_state(repo)
    stale = server_patch(repo, git(repo, "rev-parse", "HEAD").strip())  # made at HEAD: not at the base commit
    result = Attempt(checkout_spec(repo, tmp_path, "HEAD~2", [stale]), RecordingLink()).run()
    assert result.status == "apply-failed" and "does not apply" in result.error
    assert result.revert.verified is True  # the checkout itself was reverted, from its journal
    assert head_state(repo) == head_before and tree_snapshot(repo) == before
    assert not journal_path(repo).exists()


@pytest.mark.parametrize("dirt", ["tracked", "untracked"])
def test_a_dirty_tree_refuses_the_checkout_and_nothing_changes(repo, tmp_path, dirt):
    if dirt == "tracked":  # even an allow-listed change to a tracked file would travel into the other commit
        (repo / "tool.py").write_text("print('mine')\n")
        allowed = ["tool.py", "notes.txt"]
    else:
        (repo / "scratch.txt").write_text("no allow-list covers me\n")
        allowed = ["notes.txt"]
    before, head_before = tree_snapshot(repo), head_state(repo)
    spec = checkout_spec(repo, tmp_path, "HEAD~2")
    spec.allow_dirty = allowed
    result = Attempt(spec, RecordingLink()).run()
    assert result.status == "preflight-failed" and "not clean" in result.error
    assert result.preflight.dirty == (["tool.py"] if dirt == "tracked" else ["scratch.txt"])
    assert head_state(repo) == head_before and tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_an_unknown_commit_is_refused_changing_nothing(repo, tmp_path):
    before, head_before = tree_snapshot(repo), head_state(repo)
    for ref in ("no-such-ref", "--orphan"):
        result = Attempt(checkout_spec(repo, tmp_path, ref), RecordingLink()).run()
        assert result.status == "preflight-failed" and ref in result.error and "not a commit" in result.error
    assert head_state(repo) == head_before and tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_a_branch_that_moved_meanwhile_makes_the_revert_unverified_naming_head(repo, tmp_path):
    """HEAD cannot be put back where it was (someone moved the branch): the revert must not claim it did."""
    moved, branch = git(repo, "rev-parse", "HEAD~1").strip(), head_state(repo)[1]
    link = RecordingLink({"compile": lambda: git(repo, "update-ref", branch, moved)})
    result = Attempt(checkout_spec(repo, tmp_path, "HEAD~2"), link).run()
    assert result.revert.verified is False and result.status == "infra-error"
    assert any(d.startswith("HEAD: ") and branch in d for d in result.revert.diff), result.revert.diff
    assert journal_path(repo).exists()  # kept: the next preflight refuses this tree


@pytest.mark.parametrize("detached", [False, True])
def test_head_that_cannot_be_checked_out_again_is_named_and_the_journal_kept(repo, tmp_path, detached):
    """Something put a file where HEAD's commit has one (pkg/later.py is new after the base commit): git refuses
    to check HEAD out over it, and the revert says so — what failed, and where HEAD is instead."""
    if detached:
        git(repo, "checkout", "-q", "--detach")
    head, branch, _ = head_state(repo)
    base = base_of(repo)
    link = RecordingLink({"compile": lambda: (repo / "pkg" / "later.py").write_text("a stray file\n")})
    result = Attempt(checkout_spec(repo, tmp_path, "HEAD~2"), link).run()
    assert result.revert.verified is False and result.status == "infra-error"
    failed, where = result.revert.diff[:2]
    assert failed == (f"HEAD: git checkout {head[:12]} failed: The following untracked working tree files would be "
                      "overwritten by checkout:")
    assert where == f"HEAD: {base[:12]} (detached), was {head[:12]} {branch or '(detached)'}"
    assert journal_path(repo).exists()


def test_a_branch_head_cannot_point_at_again_is_named(repo, tmp_path):
    killed_after_checkout(repo, tmp_path, [])
    journal = json.loads(journal_path(repo).read_text())
    journal["checkout"]["branch"] = "not-a-ref"  # git points HEAD only inside refs/
    journal_path(repo).write_text(json.dumps(journal))
    result = Attempt(spec_for(repo, tmp_path, [], attempt_id="rescuer"), RecordingLink()).recover()
    head = journal["checkout"]["head"][:12]
    assert result.status == "preflight-failed" and result.recovered.revert.verified is False
    assert result.recovered.revert.diff[:2] == [
        "HEAD: cannot put it back on not-a-ref: fatal: Refusing to point HEAD outside of refs/",
        f"HEAD: {head} (detached), was {head} not-a-ref"]


def test_an_agent_killed_right_after_git_apply_at_another_commit_is_recovered(repo, tmp_path):
    """The checkout's journal gets the patches' paths before git apply writes a byte: a recovery restores them, then
    HEAD."""
    class KilledHere(BaseException):
        pass

    class DiesRightAfterGitApply(Git):
        def __call__(self, *args, **kw):
            p = super().__call__(*args, **kw)
            if args[0] == "apply" and "--check" not in args and "--numstat" not in args:
                raise KilledHere()
            return p

    before, head_before, base = tree_snapshot(repo), head_state(repo), base_of(repo)
    dying = Attempt(checkout_spec(repo, tmp_path, "HEAD~2", [server_patch(repo, base)], attempt_id="killed"),
                    RecordingLink())
    dying.take_lock()
    plan = dying.preflight()
    dying.tree.git = DiesRightAfterGitApply(dying.repo)
    with pytest.raises(KilledHere):
        dying.apply(plan)
    dying.release_lock()
    journal = json.loads(journal_path(repo).read_text())
    assert (journal["state"], journal["restore"]) == ("applying", ["pkg/server.py"])
    result = Attempt(spec_for(repo, tmp_path, [], attempt_id="rescuer"), RecordingLink()).recover()
    assert result.status == "ok" and result.recovered.revert.verified is True
    assert head_state(repo) == head_before and tree_snapshot(repo) == before


def killed_after_checkout(repo: Path, tmp_path: Path, patches: list[str]) -> None:
    """An agent that checked out and patched, then died (no cleanup ran)."""
    dying = Attempt(checkout_spec(repo, tmp_path, "HEAD~2", patches, attempt_id="killed"), RecordingLink())
    dying.take_lock()
    dying.apply(dying.preflight())
    dying.release_lock()  # the kernel drops a dead process's flock


@pytest.mark.parametrize("by", ["recover", "watchdog"])
def test_an_agent_killed_at_another_commit_is_put_back_by_recovery_or_its_watchdog(repo, tmp_path, by):
    before, head_before, base = tree_snapshot(repo), head_state(repo), base_of(repo)
    killed_after_checkout(repo, tmp_path, [server_patch(repo, base)])
    assert head_state(repo)[0] == base and (repo / "pkg/server.py").read_text().endswith("'patched'\n")
    if by == "recover":
        result = Attempt(spec_for(repo, tmp_path, [], attempt_id="rescuer"), RecordingLink()).recover()
        assert result.status == "ok" and result.recovered.revert.verified is True
    else:
        assert hand_to_watchdog(repo, tmp_path) == 0
        assert json.loads(watchdog_report(repo).read_text())["revert"]["verified"] is True
    assert head_state(repo) == head_before and tree_snapshot(repo) == before and not journal_path(repo).exists()


# ------------------------------------------------------------------ the history mode


def test_the_history_lists_the_first_parent_line_oldest_first_with_subjects(repo):
    report = read_history(str(repo), HistoryRequest(good="HEAD~2", bad=head_state(repo)[1]), ["notes.txt"])
    shas = git(repo, "rev-list", "--reverse", "HEAD").split()
    assert [(c.sha, c.subject) for c in report.commits] == list(zip(shas, ["base", "second: serve says so",
                                                                          "third: a later module"]))
    assert (report.head, report.branch, report.dirty, report.journal) == (shas[-1], head_state(repo)[1], [], None)
    (repo / "tool.py").write_text("changed\n")
    assert read_history(str(repo), HistoryRequest(good="HEAD~1"), ["notes.txt"]).dirty == ["tool.py"]


@pytest.mark.parametrize(("good", "bad", "says"), [
    ("nope", "HEAD", "the good end 'nope' is not a commit"),
    ("HEAD", "HEAD", "the same commit"),
    ("HEAD", "HEAD~2", "not on the first-parent line"),
])
def test_a_range_that_cannot_be_bisected_is_refused_saying_why(repo, tmp_path, good, bad, says):
    link = RecordingLink()
    spec = spec_for(repo, tmp_path, [], mode="history")
    spec.history = HistoryRequest(good=good, bad=bad)
    assert serve(spec, link) == 0
    final = link.events[-1]
    assert final["event"] == "final" and final["status"] == "preflight-failed" and says in final["error"]
