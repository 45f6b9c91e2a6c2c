"""Read a local checkout's changes as diffs `git apply` takes (for `harness patch new`), through gitpython.

Only reads: the checkout's work tree, index and `.git/` are left exactly as they were. The uncommitted
changes are staged into a throwaway index whose new objects go to a throwaway object folder, so even
untracked files leave no loose object behind in the user's repository.

What a diff cannot carry byte for byte is refused, naming the path, before anything is written: a nested
repository or a submodule (git would record a bare commit link and drop the files), a fifo, socket or
device (git skips them without a word), a symbolic link leading out of the tree or into .git/, a path that
is not UTF-8, and a file git's filters (core.autocrlf, eol/text attributes)
would store in a form other than its bytes on disk.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import git

from ..errors import ConfigError

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
    refuse_work_tree_problems(repo)  # before `git add`, which would turn a nested repository into a link
    with tempfile.TemporaryDirectory(prefix="harness-patchnew-") as tmp:
        objects = os.path.join(tmp, "objects")
        os.mkdir(objects)
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index"), "GIT_OBJECT_DIRECTORY": objects,
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.path.join(repo.common_dir, "objects"), **PLAIN_PATHS}
        _stage_all(repo, env, head)
        changes = raw_changes(repo, env, "--cached", head)
        refuse_unreproducible(repo, changes, env, "the uncommitted changes")
        refuse_filtered(repo, changes)
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
    try:
        repo.git.read_tree(head, env=env)
        repo.git.add("--all", "--", ".", env=env)
    except git.GitCommandError as exc:  # an unreadable file, say: git's own words, not a traceback
        raise ConfigError(f"{repo.working_tree_dir}: git cannot read the changes: {_git_reason(exc)}",
                          hint="fix what git names (`git add --all --dry-run` shows it too), then run again") \
            from None


def _git_reason(exc: git.GitCommandError) -> str:
    stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
    lines = [line.strip().strip("'").strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith(("error:", "fatal:"))), lines[0] if lines else "?")


# --------------------------------------------------------------------------- what a diff cannot carry


@dataclass(frozen=True)
class Change:
    """One path of `git diff --raw`: its modes before and after (000000: absent) and its new blob."""

    old_mode: str
    new_mode: str
    new_blob: str
    path: str  # as the file system names it (os.fsdecode: undecodable bytes as surrogates)


GITLINK, SYMLINK = "160000", "120000"


def raw_changes(repo: git.Repo, env: dict[str, str], *revs: str) -> list[Change]:
    """Every path the diff of `revs` changes, a rename as a deletion and an addition (paths verbatim: -z)."""
    out = repo.git.diff("--raw", "-z", "--no-abbrev", "--no-renames", "--no-ext-diff", "--no-relative",
                        "--ignore-submodules=none", *revs, "--", env=env, stdout_as_string=False)
    fields = out.split(b"\0")
    changes = []
    for meta, path in zip(fields[0::2], fields[1::2]):
        old_mode, new_mode, _old_blob, new_blob, _status = meta.decode().lstrip(":").split(" ")
        changes.append(Change(old_mode, new_mode, new_blob, os.fsdecode(path)))
    return changes


def _z(raw: bytes) -> list[str]:
    return [os.fsdecode(p) for p in raw.split(b"\0") if p]


def refuse_work_tree_problems(repo: git.Repo) -> None:
    """Refuse what `git add --all` would capture as something else, or skip without a word: a folder with
    its own .git (a nested repository: git records a commit link, not the files), a changed submodule,
    a fifo, socket or device."""
    root = str(repo.working_tree_dir)
    ignored = {p.rstrip("/") for p in _z(repo.git.ls_files("-z", "--others", "--ignored", "--exclude-standard",
                                                           "--directory", stdout_as_string=False))}
    gitlinks = {line.split("\t", 1)[1] for line in _z(repo.git.ls_files("-z", "--stage", stdout_as_string=False))
                if line.startswith(GITLINK + " ")}
    nested, special = _walk(root, ignored, gitlinks)
    if nested:
        raise ConfigError(f"{root}: {_list(p + '/' for p in nested)} holds its own git repository (a .git "
                          "inside it): git would capture a bare link to its commit and none of its files",
                          hint=f"to capture its files, move {nested[0]}/.git out of the checkout; to leave it "
                               f"out, add {nested[0]}/ to .gitignore")
    if gitlinks:
        status = _z(repo.git.status("--porcelain=v1", "-z", "--untracked-files=no", "--no-renames",
                                    "--ignore-submodules=none", stdout_as_string=False))
        changed = sorted(gitlinks & {entry[3:] for entry in status})
        if changed:
            raise ConfigError(f"{root}: submodule {_list(changed)} differs from HEAD (its commit, or files inside "
                              "it): a patch set cannot carry a submodule's changes",
                              hint="make the change in the checkout's own files, or put the submodule back as "
                                   "HEAD has it (`git submodule update`, then commit or stash inside it)")
    if special:  # a fifo .gitignore hides is no change (ls-files above lists no fifo among the ignored)
        hidden = set(_check_ignored(repo, [p for p, _ in special]))
        special = [(p, kind) for p, kind in special if p not in hidden]
    if special:
        raise ConfigError(f"{root}: {_list(f'{p} (a {kind})' for p, kind in special)} is no file git can store: "
                          "a patch set cannot carry it",
                          hint="remove it from the checkout, or list it in .gitignore")


def _walk(root: str, ignored: set[str], gitlinks: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(folders below the root holding a .git, (path, kind) of each fifo, socket or device), outside
    ignored paths, .git/ and submodules."""
    nested: list[str] = []
    special: list[tuple[str, str]] = []
    skip = ignored | gitlinks
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        if rel and ".git" in dirnames + filenames:
            nested.append(rel)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if os.path.join(rel, d) not in skip
                             and (rel or d != ".git"))
        for name in filenames:
            path = os.path.join(rel, name)
            try:
                kind = _special_kind(os.lstat(os.path.join(root, path)).st_mode)
            except OSError:  # gone since the folder was listed: nothing to capture
                continue
            if kind and path not in ignored:
                special.append((path, kind))
    return nested, sorted(special)


def _special_kind(mode: int) -> str | None:
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode):
        return None
    return {stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
            stat.S_IFBLK: "block device"}.get(stat.S_IFMT(mode), "special file")


def _check_ignored(repo: git.Repo, paths: list[str]) -> list[str]:
    """Those of `paths` that .gitignore hides (git check-ignore exits 1 when none is)."""
    p = subprocess.run(["git", "-C", str(repo.working_tree_dir), "check-ignore", "-z", "--stdin"],
                       input=b"".join(os.fsencode(x) + b"\0" for x in paths), capture_output=True, check=False)
    return _z(p.stdout)


def refuse_unreproducible(repo: git.Repo, changes: list[Change], env: dict[str, str], where: str) -> None:
    """Refuse changes a patch set would carry as something else: a submodule link (no files), a symbolic
    link out of the tree or into .git/, a path inside .git/, a path that is not UTF-8."""
    root = repo.working_tree_dir
    bad_names = [c.path for c in changes if not _utf8(c.path)]
    if bad_names:
        raise ConfigError(f"{root}, {where}: path {_list(repr(p) for p in bad_names)} is not UTF-8: a patch set is "
                          "UTF-8 text, so it cannot name that file",
                          hint="rename it to a UTF-8 name, then run again")
    in_git = [c.path for c in changes if ".git" in (part.lower() for part in c.path.split("/"))]
    if in_git:
        raise ConfigError(f"{root}, {where}: {_list(in_git)} is inside a .git folder",
                          hint="a patch set only changes the work tree: leave .git folders out")
    links = [c.path for c in changes if GITLINK in (c.old_mode, c.new_mode)]
    if links:
        raise ConfigError(f"{root}, {where}: {_list(links)} is a submodule or nested repository: a patch set "
                          "would carry a bare link to a commit and none of its files",
                          hint="make the change in the checkout's own files (move a nested repository's .git "
                               "away first), or leave the submodule as the base commit has it")
    for c in changes:
        if c.new_mode == SYMLINK:
            target = os.fsdecode(repo.git.cat_file("blob", c.new_blob, env=env, stdout_as_string=False))
            why = _link_escape(c.path, target)
            if why:
                raise ConfigError(f"{root}, {where}: {c.path} is a symbolic link to {target}, {why}",
                                  hint="a patch set changes only the tree it patches: point the link at a path "
                                       "inside the checkout (not .git/), or copy the file in")


def _utf8(path: str) -> bool:
    """A path whose bytes are UTF-8 (git writes other names' bytes raw, which a UTF-8 patch set cannot hold;
    names git C-quotes — a tab, a quote, a backslash — round-trip through `git apply`)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _link_escape(path: str, target: str) -> str | None:
    """Why a symbolic link at `path` to `target` leads out of the work tree, or into .git/; None if not."""
    if posixpath.isabs(target):
        return "an absolute path (outside the checkout on the host)"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        return "outside the checkout"
    if ".git" in (part.lower() for part in resolved.split("/")):
        return "inside .git/"
    return None


def refuse_filtered(repo: git.Repo, changes: list[Change]) -> None:
    """Refuse a file whose bytes on disk git stores in another form (core.autocrlf, an eol/text or filter
    attribute): the patch carries git's form, so the host would get other bytes than the checkout has."""
    files = [c for c in changes if c.new_mode in ("100644", "100755")]
    differ = [c.path for c in files if _raw_blob_id(os.path.join(str(repo.working_tree_dir), c.path),
                                                     len(c.new_blob)) != c.new_blob]
    if differ:
        raise ConfigError(f"{repo.working_tree_dir}: git stores {_list(differ)} in another form than its bytes on "
                          "disk (core.autocrlf, or an eol, text or filter attribute): the patch would carry git's "
                          "form, and the host would not get your file byte for byte",
                          hint=f"keep the bytes as they are: `git -C {repo.working_tree_dir} config core.autocrlf "
                               "false`, or mark the file `-text` in .gitattributes; then run again")


def _raw_blob_id(path: str, id_length: int) -> str | None:
    """git's object id of the file's bytes as they are (`git hash-object --no-filters`), without asking git:
    its --stdin-paths cannot take a name holding a newline. None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    h = hashlib.sha256() if id_length == 64 else hashlib.sha1()  # a sha256 repository's ids are longer
    h.update(b"blob %d\0" % len(data) + data)
    return h.hexdigest()


def _list(items: Iterable[str]) -> str:
    """At most 10 items, comma-separated; how many more."""
    seq = list(items)
    return ", ".join(seq[:10]) + (f" and {len(seq) - 10} more" if len(seq) > 10 else "")


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
        refuse_unreproducible(repo, raw_changes(repo, PLAIN_PATHS, base.hexsha, tip.hexsha), PLAIN_PATHS,
                              f"commits {base.hexsha[:12]}..{tip.hexsha[:12]}")
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
        refuse_unreproducible(repo, raw_changes(repo, PLAIN_PATHS, parent, c.hexsha), PLAIN_PATHS,
                              f"commit {c.hexsha[:12]} ({_subject(c)})")
        text = repo.git.diff(*DIFF_FLAGS, parent, c.hexsha, "--", env=PLAIN_PATHS, stdout_as_string=False,
                             strip_newline_in_stdout=False)
        if text:  # an empty commit changes nothing to apply
            diffs.append(CapturedDiff(_subject(c), text))
    return Capture(tuple(diffs), base.hexsha, source)


def _subject(c: git.Commit) -> str:
    return c.summary if isinstance(c.summary, str) else c.summary.decode(errors="replace")
