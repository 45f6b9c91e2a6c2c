"""A bisect step's commit: checked out before the patches, and HEAD put back after them.

The tree must be clean (a checkout would carry a change along, or refuse it halfway). What HEAD was — its commit,
and the branch it was on — goes into the journal before the checkout (attempt.py), so whoever reverts it (the
attempt itself, its watchdog, the next preflight, `harness recover`) puts HEAD back: `restore_ref` checks the
commit out detached, then points HEAD at the branch again (its tip: no file changes), and says what still differs.
Tree.revert counts that as part of its verification. And git's own reason for a failure, in a line (tree.py's
messages use it too). Standard library only (it ships with the agent).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any, Optional, Protocol

from ..common.protocol import Status
from .errors import FailureFacts, StageFailed


class GitRunner(Protocol):
    """What is needed of tree.Git: run a git command in the repo (`check`: raise on failure), or read its output."""

    repo: str

    def __call__(self, *args: str, check: bool = ...) -> Any: ...

    def out(self, *args: str, **kw: Any) -> str: ...

    def status_entries(self) -> list[str]: ...

    def tracked(self, paths: Sequence[str]) -> set[str]: ...


def blocking_changes(git: GitRunner, allow: Sequence[str]) -> list[str]:
    """What a checkout must not meet: any change to a tracked file (allow-listed or not: it would be carried along
    into the other commit, or refuse it halfway), and any untracked file that no allow-list glob covers."""
    dirty = git.status_entries()
    tracked = git.tracked(dirty)
    return sorted(p for p in dirty if p in tracked or not any(fnmatch.fnmatch(p, g) for g in allow))


def refuse_changes(git: GitRunner, allow: Sequence[str]) -> None:
    blocking = blocking_changes(git, allow)
    if blocking:
        raise StageFailed(Status.PREFLIGHT_FAILED, "target tree %s is not clean; a bisect checks out other commits, "
                          "so commit or stash these %d path(s) first: %s" % (git.repo, len(blocking),
                                                                             ", ".join(blocking[:30])),
                          facts=FailureFacts(dirty=blocking))


def current_ref(git: GitRunner) -> tuple[str, Optional[str]]:
    """(HEAD's commit, the ref HEAD is on — None when detached)."""
    head = git.out("rev-parse", "HEAD").strip()
    branch = git.out("symbolic-ref", "-q", "HEAD", check=False).strip()  # nothing when detached
    return head, branch or None


def resolve_commit(git: GitRunner, ref: str, what: str = "commit") -> str:
    """The full id of the commit `ref` names; refused (nothing changed) when it names none."""
    p = None if ref.startswith("-") else git("rev-parse", "--verify", "-q", ref + "^{commit}", check=False)
    sha = p.stdout.decode().strip() if p is not None and p.returncode == 0 else ""
    if not sha:
        raise StageFailed(Status.PREFLIGHT_FAILED, "%s %r is not a commit of %s (fetch it there first?)"
                          % (what, ref, git.repo))
    return sha


def check_out(git: GitRunner, commit: str) -> None:
    """HEAD detached at `commit`, the tree its files (the journal that can undo it is written before)."""
    p = git("checkout", "-q", "--detach", commit, check=False)
    if p.returncode != 0:
        raise StageFailed(Status.PREFLIGHT_FAILED, "git checkout %s failed in %s: %s" % (
            commit[:12], git.repo, _reason(p.stderr)))


def restore_ref(git: GitRunner, commit: str, branch: Optional[str]) -> list[str]:
    """HEAD back at `commit` and on `branch` (None: detached), as it was before the checkout: what still differs,
    for the revert's report ([] when HEAD is back)."""
    problems = []
    p = git("checkout", "-q", "--detach", commit, check=False)
    if p.returncode != 0:
        problems.append("HEAD: git checkout %s failed: %s" % (commit[:12], _reason(p.stderr)))
    if branch is not None and p.returncode == 0:
        q = git("symbolic-ref", "HEAD", branch, check=False)  # the branch's tip is `commit`: no file changes
        if q.returncode != 0:
            problems.append("HEAD: cannot put it back on %s: %s" % (branch, _reason(q.stderr)))
    head, on = current_ref(git)
    if (head, on) != (commit, branch):
        problems.append("HEAD: %s %s, was %s %s" % (head[:12], on or "(detached)", commit[:12],
                                                     branch or "(detached)"))
    return problems


def git_reason(stderr: str) -> str:
    """Git's own reason for a failure, for the message's first line (the one progress and summaries show; tree.py's
    messages use it too): its first `error:` line (`patch failed: path:12`), else its first non-empty line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    return lines[0] if lines else "git gave no reason"


def _reason(stderr: bytes) -> str:
    return git_reason(stderr.decode(errors="replace"))
