"""`harness gc` on the host: the attempt folders under the work dir (`attempts/RUN/ATTEMPT/`, what the
controller fetched long ago) that the retention rule removes — those last written to more than N days ago,
then the oldest beyond a total size — and never one in use: the attempt holding the repo's lock, the
interrupted one its journal names, one a live process carries the marker of (any repo's), or one written to
within the last hour (an attempt of another checkout that shares this work dir)."""

from __future__ import annotations

import os
import shutil
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..common.outcome import GcEntry, GcReport
from ..common.protocol import GcRequest, Journal
from .hostio import read_json
from .lock import RepoLock
from .procs import live_markers
from .tree import Git

RECENT_S = 3600.0
DAY_S = 86400.0


class Folder(NamedTuple):
    run_id: str
    attempt_id: str
    path: str
    size_bytes: int
    newest: float  # the last time anything in it was written (mtime)


def collect_garbage(workdir: str, repo: str, request: GcRequest, now: Optional[float] = None) -> GcReport:
    """Look, decide and (unless a dry run) remove; the report lists every folder, oldest first."""
    attempts = os.path.join(workdir, "attempts")
    entries = decide(attempt_folders(attempts), in_use(repo), request, time.time() if now is None else now)
    if not request.dry_run:
        for entry in entries:
            if entry.remove:
                _remove(attempts, entry)
    return GcReport(workdir=workdir, dry_run=request.dry_run, entries=entries)


def decide(folders: List[Folder], busy: Dict[str, str], request: GcRequest, now: float) -> List[GcEntry]:
    """The rule (pure): in use or recent → kept; older than the age limit → removed; then, past the size
    limit, the oldest of the rest → removed until what stays fits."""
    entries = []
    for f in sorted(folders, key=lambda f: f.newest):
        age = max(0.0, now - f.newest)
        e = GcEntry(run_id=f.run_id, attempt_id=f.attempt_id, size_bytes=f.size_bytes, age_s=round(age, 1))
        marker = "%s/%s" % (f.run_id, f.attempt_id)
        if marker in busy:
            e.why = "in use: " + busy[marker]
        elif age < RECENT_S:
            e.why = "written to within the last hour"
        elif request.older_than_days is not None and age >= request.older_than_days * DAY_S:
            e.remove, e.why = True, "older than %g days" % request.older_than_days
        entries.append(e)
    if request.max_bytes is not None:
        kept = sum(e.size_bytes for e in entries if not e.remove)
        for e in entries:  # oldest first
            if kept <= request.max_bytes:
                break
            if not e.remove and not e.why:
                e.remove, e.why = True, "the oldest beyond %d bytes" % request.max_bytes
                kept -= e.size_bytes
    for e in entries:
        if not e.why:
            e.why = ("newer than %g days" % request.older_than_days if request.older_than_days is not None
                     else "within the size limit")
    return entries


def attempt_folders(attempts: str) -> List[Folder]:
    """Every `RUN/ATTEMPT` folder under `attempts` (links are never followed, nor counted as folders)."""
    found = []
    for run_id in _subfolders(attempts):
        for attempt_id in _subfolders(os.path.join(attempts, run_id)):
            path = os.path.join(attempts, run_id, attempt_id)
            try:
                size, newest = _size_and_newest(path)
            except OSError:  # gone meanwhile (another gc, a user)
                continue
            found.append(Folder(run_id, attempt_id, path, size, newest))
    return found


def in_use(repo: str) -> Dict[str, str]:
    """Attempt marker (`RUN/ATTEMPT`) → why its folder must stay."""
    busy = {m: "a live process of that attempt" for m in live_markers()}
    gitdir = Git(repo).gitdir() if os.path.isdir(repo) else None
    if gitdir is None:
        return busy
    hdir = os.path.join(gitdir, "harness")
    lock = RepoLock(hdir).probe()
    if lock.held and lock.run_id and lock.attempt_id:
        busy["%s/%s" % (lock.run_id, lock.attempt_id)] = "it holds the repo's lock"
    try:
        data = read_json(os.path.join(hdir, "journal.json"))
        journal = Journal.read(data) if isinstance(data, dict) else None
    except (OSError, ValueError):
        journal = None
    if journal is not None and journal.run_id and journal.attempt_id:
        busy["%s/%s" % (journal.run_id, journal.attempt_id)] = "its journal is left (run `harness recover`)"
    return busy


def _subfolders(path: str) -> List[str]:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    return [n for n in names if os.path.isdir(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n))]


def _size_and_newest(path: str) -> Tuple[int, float]:
    """The bytes of the files in `path` and the last time anything there was written (links not followed)."""
    size, newest = 0, os.lstat(path).st_mtime
    for root, dirs, files in os.walk(path):
        for name, is_file in [(d, False) for d in dirs] + [(f, True) for f in files]:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            newest = max(newest, st.st_mtime)
            size += st.st_size if is_file else 0
    return size, newest


def _remove(attempts: str, entry: GcEntry) -> None:
    path = os.path.join(attempts, entry.run_id, entry.attempt_id)
    try:
        shutil.rmtree(path)
        entry.removed = True
    except OSError as exc:
        entry.error = "%s: %s" % (type(exc).__name__, exc)
    try:
        os.rmdir(os.path.join(attempts, entry.run_id))  # the run's folder, once its last attempt is gone
    except OSError:
        pass
