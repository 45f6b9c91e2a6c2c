"""Read a local checkout's changes as diffs `git apply` takes (for `harness patch new`), through gitpython.

Only reads: the checkout's work tree, index and `.git/` are left exactly as they were. The uncommitted
changes are staged into a throwaway index whose new objects go to a throwaway object folder, so even
untracked files leave no loose object behind in the user's repository.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from .errors import ConfigError

# Every flag that makes the output independent of the user's git config (diff.noprefix, color.ui=always,
# diff.external, core.abbrev, diff.relative...) and appliable by `git apply`: full blob ids for binaries,
# a/ b/ prefixes, renames as renames.
DIFF_FLAGS = ("--binary", "--full-index", "--find-renames", "--no-color", "--no-ext-diff", "--no-textconv",
              "--no-relative", "--src-prefix=a/", "--dst-prefix=b/", "--unified=3", "--diff-algorithm=myers")
# Paths as they are (UTF-8), not C-quoted: the patch set loader reads header paths unquoted.
PLAIN_PATHS = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.quotePath", "GIT_CONFIG_VALUE_0": "false"}
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's id of the empty tree: a root commit's parent


@dataclass(frozen=True)
class CapturedDiff:
    label: str  # a commit's subject, or '' for the uncommitted changes
    diff: bytes


@dataclass(frozen=True)
class Capture:
    diffs: tuple[CapturedDiff, ...]  # in the order they apply
    base: str  # the commit the first diff applies to
    source: str  # what was captured, for people: 'uncommitted changes on abc123def456', 'commits A..B'


def open_checkout(path: Path) -> git.Repo:
    """The git repository whose root is `path` (patch paths are relative to the root, so not a subfolder)."""
    if not path.is_dir():
        raise ConfigError(f"--from {path}: not a folder", hint="pass your SGLang checkout's root folder")
    try:
        repo = git.Repo(path, search_parent_directories=True)  # to name the root of a subfolder's repo
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise ConfigError(f"--from {path}: not a git repository",
                          hint="pass the root of a git checkout of SGLang (the folder holding .git)") from None
    if repo.bare or repo.working_tree_dir is None:
        raise ConfigError(f"--from {path}: a bare repository has no work tree", hint="pass a checkout")
    if Path(repo.working_tree_dir).resolve() != path.resolve():
        raise ConfigError(f"--from {path}: a folder inside the repository {repo.working_tree_dir}",
                          hint="pass the repository's root: patch paths are relative to it")
    return repo


def head_commit(repo: git.Repo) -> git.Commit:
    try:
        return repo.head.commit
    except ValueError:
        raise ConfigError(f"{repo.working_tree_dir}: the repository has no commit yet",
                          hint="a patch set is a change to a commit: commit the base first") from None


def capture_uncommitted(repo: git.Repo) -> Capture:
    """Tracked changes (staged or not) and untracked files that are not ignored, as one diff against HEAD:
    the tree as it is on disk, the way `git add -A && git diff --cached` would show it."""
    head = head_commit(repo).hexsha
    with tempfile.TemporaryDirectory(prefix="harness-patchnew-") as tmp:
        objects = os.path.join(tmp, "objects")
        os.mkdir(objects)
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index"), "GIT_OBJECT_DIRECTORY": objects,
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.path.join(repo.common_dir, "objects"), **PLAIN_PATHS}
        _stage_all(repo, env, head)
        diff = repo.git.diff("--cached", *DIFF_FLAGS, head, "--", env=env, stdout_as_string=False,
                             strip_newline_in_stdout=False)
    return Capture((CapturedDiff("", diff),) if diff else (), head, f"uncommitted changes on {head[:12]}")


def _stage_all(repo: git.Repo, env: dict[str, str], head: str) -> None:
    """`git add --all` into the throwaway index of `env`."""
    real_index = os.path.join(repo.git_dir, "index")
    if os.path.isfile(real_index):
        # A copy of the real index: its stat data spares hashing every unchanged file again.
        shutil.copy2(real_index, env["GIT_INDEX_FILE"])
        try:
            repo.git.add("--all", "--", ".", env=env)
            return
        except git.GitCommandError:
            os.remove(env["GIT_INDEX_FILE"])  # a split index cannot be copied alone: start from HEAD instead
    repo.git.read_tree(head, env=env)
    repo.git.add("--all", "--", ".", env=env)


def capture_range(repo: git.Repo, spec: str, *, squash: bool = False) -> Capture:
    """One diff per commit of `A..B` (B defaults to HEAD), oldest first, each against its parent; with
    `squash`, one diff from A to B."""
    left, sep, right = spec.partition("..")
    if not sep or not left or right.startswith("."):
        raise ConfigError(f"--range {spec!r}: write A..B (commits after A up to B)",
                          hint="e.g. --range origin/main..HEAD or --range v0.5.23..my-branch")
    ends = []
    for side in (left, right or "HEAD"):
        if side.startswith("-"):  # would read as an option of git's
            raise ConfigError(f"--range {spec!r}: {side!r} is not a revision")
        try:
            ends.append(repo.commit(side))
        except (git.BadName, ValueError, git.GitCommandError):
            raise ConfigError(f"--range {spec!r}: unknown revision {side!r}",
                              hint=f"`git -C {repo.working_tree_dir} log --oneline` lists the commits") from None
    base, tip = ends
    if not repo.is_ancestor(base, tip):
        raise ConfigError(f"--range {spec!r}: {left} is not an ancestor of {right or 'HEAD'}",
                          hint="the patches apply in order on top of A: A must be in B's history")
    commits = list(repo.iter_commits(f"{base.hexsha}..{tip.hexsha}", reverse=True, topo_order=True))
    source = f"commits {base.hexsha[:12]}..{tip.hexsha[:12]}"
    if squash:
        text = repo.git.diff(*DIFF_FLAGS, base.hexsha, tip.hexsha, "--", env=PLAIN_PATHS,
                             stdout_as_string=False, strip_newline_in_stdout=False)
        label = _subject(commits[0]) if len(commits) == 1 else ""
        return Capture((CapturedDiff(label, text),) if text else (), base.hexsha, source)
    merges = [c.hexsha[:12] for c in commits if len(c.parents) > 1]
    if merges:
        raise ConfigError(f"--range {spec!r} holds merge commit(s) {', '.join(merges)}",
                          hint="take a linear series (rebase it first), or pass --squash for one diff from A to B")
    diffs = []
    for c in commits:
        parent = c.parents[0].hexsha if c.parents else EMPTY_TREE
        text = repo.git.diff(*DIFF_FLAGS, parent, c.hexsha, "--", env=PLAIN_PATHS, stdout_as_string=False,
                             strip_newline_in_stdout=False)
        if text:  # an empty commit changes nothing to apply
            diffs.append(CapturedDiff(_subject(c), text))
    return Capture(tuple(diffs), base.hexsha, source)


def _subject(c: git.Commit) -> str:
    return c.summary if isinstance(c.summary, str) else c.summary.decode(errors="replace")
