"""`harness bisect`'s look at the target repo (mode history), changing nothing: the first-parent line of commits
from the good one to the bad one with their subjects, where HEAD is, and whether the tree can be bisected (clean,
no interrupted attempt's journal). Standard library only (it ships with the agent)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..common.outcome import CommitInfo, HistoryReport, HistoryRequest, Journal
from ..common.protocol import Status
from .checkout import blocking_changes, current_ref, resolve_commit
from .errors import StageFailed
from .hostio import read_json
from .tree import Git

MAX_COMMITS = 100000  # a range this long is a mistake (a good ref from another history), not a bisect


def read_history(repo: str, request: HistoryRequest, allow_dirty: Sequence[str] = ()) -> HistoryReport:
    """The commits from `request.good` to `request.bad`, oldest first, both included; StageFailed (preflight-failed)
    naming the reason when the range cannot be bisected: an unknown ref, good not on bad's first-parent line."""
    git = Git(repo)
    gitdir = git.gitdir() if os.path.isdir(repo) else None
    if gitdir is None:
        raise StageFailed(Status.PREFLIGHT_FAILED, "%s is not a git repository; set `repo:` of this host in the "
                          "host inventory (hosts.yaml) to the target's git checkout" % repo)
    good = resolve_commit(git, request.good, "the good end")
    bad = resolve_commit(git, request.bad, "the bad end")
    if good == bad:
        raise StageFailed(Status.PREFLIGHT_FAILED, "the good and the bad end are the same commit %s" % good[:12])
    raw = git.out("log", "--first-parent", "--format=%H%x1f%P%x1f%s", "-n", str(MAX_COMMITS + 1),
                  "%s..%s" % (good, bad))
    line = [entry.split("\x1f", 2) for entry in raw.split("\n") if entry]
    if not line or line[-1][1].split(" ")[0] != good or len(line) > MAX_COMMITS:
        raise StageFailed(Status.PREFLIGHT_FAILED, "the good end %s is not on the first-parent line of the bad end "
                          "%s (not an ancestor, or merged in from a side branch): choose a good commit that is"
                          % (good[:12], bad[:12]))
    subject = git.out("log", "-n", "1", "--format=%s", good).strip()
    commits = [CommitInfo(sha=good, subject=subject)] + [CommitInfo(sha=sha, subject=subj)
                                                         for sha, _, subj in reversed(line)]
    head, branch = current_ref(git)
    path = os.path.join(gitdir, "harness", "journal.json")
    data = read_json(path) if os.path.isfile(path) else None
    left = (Journal.read(data).attempt_id or "?") if isinstance(data, dict) else None
    return HistoryReport(head=head, branch=branch, commits=commits, dirty=blocking_changes(git, allow_dirty),
                         journal=left)
