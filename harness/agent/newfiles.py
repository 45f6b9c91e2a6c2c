"""A patch set's files/ entries, written whole into the tree.

An entry below something that is not a folder (`foo.py/bar` where foo.py is a file, or a link) can never
be written: that is the patch set's failure (`apply-failed`, one sentence naming it), never a fault to
retry. Caught before anything changes when the tree already has the file; when only the set's own diff
creates it, at the write (the cleanup then reverts what was applied).
"""

from __future__ import annotations

import base64
import os
import tempfile

from ..common.protocol import FileEntry, Status
from .errors import StageFailed


def parents(rel: str) -> list[str]:
    """'a/b/c.py' -> ['a/b', 'a']"""
    out = []
    d = os.path.dirname(rel)
    while d:
        out.append(d)
        d = os.path.dirname(d)
    return out


def check_folders(repo: str, entry: FileEntry) -> None:
    for parent in parents(entry.path):
        path = os.path.join(repo, parent)
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            what = "a symbolic link" if os.path.islink(path) else "a file"
            raise StageFailed(Status.APPLY_FAILED, "patch set %s: files/%s cannot be written: %s in %s is %s, not a "
                              "folder; fix that path in the patch set's files/ tree"
                              % (entry.set, entry.path, parent, repo, what))


def write_file(repo: str, entry: FileEntry) -> None:
    """Written beside its place, then renamed over it: a file the tree has there is replaced, never written
    into, so an inode it shares with a file elsewhere (a hard link) is left alone, and no link is followed."""
    dest = os.path.join(repo, entry.path)
    tmp = None
    try:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".harness-", dir=os.path.dirname(dest))
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(entry.content_b64))
        os.chmod(tmp, int(entry.mode))
        os.replace(tmp, dest)
        tmp = None
    except OSError as exc:
        if tmp is not None:
            os.unlink(tmp)
        raise StageFailed(Status.APPLY_FAILED, "patch set %s: files/%s cannot be written in %s: %s; fix the patch "
                          "set's files/ tree" % (entry.set, entry.path, repo, exc.strerror or exc)) from None
