"""What the tree holds, for revert verification; what a spec names and where a write would really land, for
the path rule.

Stdlib only (it ships with the agent). `describe` is byte for byte; ignored files are described by type,
mode, size and mtime (build outputs can be large); git's config and hooks by content.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from typing import Optional

from ..common.filehash import sha256_file
from ..common.patchpaths import is_dot_git, name_refusals, path_problem
from ..common.protocol import FileEntry, PatchEntry


def _missing_or_link(path: str) -> "tuple[Optional[str], Optional[os.stat_result]]":
    """("missing" or a link's description, None), or (None, its lstat) for anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing", None
    if stat.S_ISLNK(st.st_mode):
        return "link:" + hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest(), None
    return None, st


def describe(path: str) -> str:
    """A tracked or untracked file, byte for byte (a link by its target, a folder by its type)."""
    said, st = _missing_or_link(path)
    if st is None:
        return said or "missing"
    if not stat.S_ISREG(st.st_mode):
        return "other:%o" % stat.S_IFMT(st.st_mode)  # a submodule's folder, a fifo
    return "file:%s:%s" % ("x" if st.st_mode & 0o111 else "-", sha256_file(path))


def inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def bytecode(rel: str) -> bool:
    """Python's own caches: a server importing a patched module rewrites them, and Python checks them
    against their source's size and mtime (restored by the revert), so they are no part of the promise."""
    return rel.endswith((".pyc", ".pyo")) or "__pycache__" in rel.split("/")


def describe_stat(path: str) -> str:
    """An ignored file, cheaply (build outputs may be large): its type, mode, size and mtime, a link's target."""
    said, st = _missing_or_link(path)
    if st is None:
        return said or "missing"
    return "stat:%o:%d:%d" % (st.st_mode, st.st_size, st.st_mtime_ns)


def ignored_manifest(repo: str, ignored: Iterable[str]) -> dict[str, str]:
    """The ignored files that were there before the attempt (Python's caches aside), as they are now."""
    return {rel: describe_stat(os.path.join(repo, rel)) for rel in ignored if not bytecode(rel)}


def git_manifest(common_dir: str) -> dict[str, str]:
    """`.git/config` and every file under `.git/hooks/`, by content (small: read whole)."""
    out = {".git/config": describe(os.path.join(common_dir, "config"))}
    hooks = os.path.join(common_dir, "hooks")
    for folder, dirs, names in os.walk(hooks):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            rel = os.path.relpath(os.path.join(folder, name), common_dir).replace(os.sep, "/")
            out[".git/" + rel] = describe(os.path.join(folder, name))
    return out


def write_problem(repo: str, git_dirs: Sequence[str], rel: str, whole_file: bool) -> Optional[str]:
    """Why writing `rel` would leave the work tree (None: it would not), judged on the real tree: a
    symbolic link on its way (git refuses those for patches; a files/ entry must not follow one either,
    nor replace one: `whole_file`) or a real location outside the repo or inside its git dir."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    for k in range(1, len(parts) + (1 if whole_file else 0)):
        here = os.path.join(repo, *parts[:k])
        if os.path.islink(here):
            return "goes through the symbolic link %s (to %s)" % ("/".join(parts[:k]), os.readlink(here))
        if not os.path.isdir(here):
            break  # not there yet: what makedirs creates below it is real folders
    folder = os.path.dirname(os.path.join(repo, *parts))
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    real, root = os.path.realpath(folder), os.path.realpath(repo)
    if not inside(real, root):
        return "would land outside the work tree, in %s" % real
    if any(inside(real, g) for g in git_dirs) or \
            any(is_dot_git(p) for p in os.path.relpath(real, root).split(os.sep)):
        return "would land inside git's own folder, in %s" % real
    return None


def spec_refusal(patches: Sequence[PatchEntry], files: Sequence[FileEntry]) -> Optional[str]:
    """Why the spec's own names break the path rule (None: they do not), before git reads a patch: every
    name a patch's headers give (as written and as git strips it) and every files/ entry. The controller
    refused these when it read the set; a spec built by hand gets no further here."""
    for p in patches:
        for r in name_refusals(p.name, p.text):
            return "patch set %s, %s line %d: %s %s: refused, a patch set writes only inside the work tree " \
                   "(relative paths, never '..' or .git)" % (p.set, p.name, r.line or 0, r.path, r.reason)
    for entry in files:
        bad = path_problem(entry.path)
        if bad:
            return "patch set %s: unsafe path in files/: %r %s" % (entry.set, entry.path, bad)
    return None
