"""A folder of files the harness writes for a user (`harness report --html DIR`), and a lone output file
(`harness compare --plot FILE`): the harness never deletes or overwrites a file it did not write.

A folder keeps a hidden manifest (`.harness-report.json`: each file it wrote with its sha256, and the
folders it made). Writing the folder again replaces a file only when the manifest lists it and its digest
still matches; anything else found in the folder — a user's file or folder, a file of ours edited since, a
symbolic link, a leftover temporary file — is refused before anything is written, naming it. `DIR` itself may
be a link to a folder (followed, as a user expects); a link inside it is never written through.

Files are written atomically: a temporary file beside the final one (created exclusively, never through a
link), then renamed over it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from ..common.filehash import sha256_file
from ..errors import ConfigError

MANIFEST = ".harness-report.json"
WRITTEN_BY = "harness report --html"
TMP_PREFIX = ".harness-tmp-"


@dataclass
class Written:
    """What the harness wrote in a folder: relative POSIX path → sha256, and the folders it made."""

    files: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    # A write cut short (crash, Ctrl-C) left its new digests as `pending`: either version is ours.
    pending: dict[str, str] = field(default_factory=dict)


def _refuse(path: Path, what: str, hint: str) -> ConfigError:
    return ConfigError(f"{path}: {what}; the harness never deletes or overwrites a file it did not write",
                       hint=hint)


def _hint(out_dir: Path) -> str:
    return f"choose another folder for --html, or move that out of {out_dir} first"


def read_manifest(out_dir: Path) -> Written:
    """The manifest of an earlier write (empty when there is none); a manifest that is not ours is refused."""
    path = out_dir / MANIFEST
    if not os.path.lexists(path):
        return Written()
    if path.is_symlink() or not path.is_file():
        raise _refuse(path, "not a file the harness wrote (a link or a folder)", _hint(out_dir))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("written_by") != WRITTEN_BY:
            raise ValueError(data.get("written_by"))
        return Written(files={str(k): str(v) for k, v in data["files"].items()},
                       dirs={str(d) for d in data["dirs"]},
                       pending={str(k): str(v) for k, v in data.get("pending", {}).items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise _refuse(path, f"not a manifest the harness can read ({type(e).__name__})", _hint(out_dir)) from None


def _entries(folder: Path, rel: PurePosixPath) -> Iterator[tuple[os.DirEntry[str], PurePosixPath]]:
    """Every entry under `folder`, depth first in name order (so "the first" file refused is stable);
    links are reported, never followed."""
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        yield e, rel / e.name
        if e.is_dir(follow_symlinks=False):
            yield from _entries(Path(e.path), rel / e.name)


def survey(out_dir: Path, written: Written) -> Written:
    """Check that everything in `out_dir` was written by the harness and is unchanged since; what is, as the
    files (with their current digest) and folders a new write may replace. Refuses the first that is not."""
    found = Written()
    pending = written.pending
    try:
        for entry, rel in _entries(out_dir, PurePosixPath()):
            name, path = str(rel), out_dir / rel
            if name == MANIFEST:
                continue
            if entry.is_symlink():
                raise _refuse(path, f"a symbolic link (to {os.readlink(path)}) where the report writes",
                              f"the report writes only real files inside its folder: {_hint(out_dir)}")
            if entry.is_dir(follow_symlinks=False):
                if name not in written.dirs:
                    raise _refuse(path, "a folder the harness did not make", _hint(out_dir))
                found.dirs.add(name)
            elif entry.is_file(follow_symlinks=False):
                if name not in written.files and name not in pending:
                    raise _refuse(path, _foreign_file(out_dir, name), _hint(out_dir))
                digest = sha256_file(str(path))
                if digest not in (written.files.get(name), pending.get(name)):
                    raise _refuse(path, "written by the harness but changed since", _hint(out_dir))
                found.files[name] = digest
            else:
                raise _refuse(path, "not a regular file or folder", _hint(out_dir))
    except OSError as e:
        raise ConfigError(f"{out_dir}: cannot read what is in the folder ({e.strerror or e})",
                          hint="give --html a folder you can read and write") from None
    return found


def _foreign_file(out_dir: Path, name: str) -> str:
    if PurePosixPath(name).name.startswith(TMP_PREFIX):
        return "a temporary file left by a write of the harness that was cut short"
    if name == "index.html" and not (out_dir / MANIFEST).exists():
        try:
            head = (out_dir / name).read_text(encoding="utf-8", errors="replace")[:2000]
        except OSError:
            head = ""
        if '<meta name="generator" content="harness ' in head:
            return "a page of an older harness, which kept no record of the files it wrote"
    return "a file the harness did not write"


def check(out_dir: Path) -> Written:
    """What the harness wrote in `out_dir` before and may replace (nothing when it is new); refuses a folder
    that holds anything else. Changes nothing."""
    if os.path.lexists(out_dir) and not out_dir.exists():
        raise ConfigError(f"{out_dir} is a symbolic link to {os.readlink(out_dir)}, which does not exist",
                          hint="create that folder, or give --html another folder")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is a file, not a folder", hint="give --html a folder (new or empty)")
    return survey(out_dir, read_manifest(out_dir)) if out_dir.is_dir() else Written()


def prepare(out_dir: Path) -> Written:
    """`check`, then `out_dir` created if new."""
    before = check(out_dir)
    if not out_dir.is_dir():
        try:
            out_dir.mkdir(parents=True)
        except OSError as e:
            raise ConfigError(f"cannot create the folder {out_dir} ({e.strerror or e})",
                              hint="give --html a folder you can write in") from None
    return before


def _dirs_of(names: list[str]) -> set[str]:
    return {str(p) for n in names for p in PurePosixPath(n).parents if str(p) != "."}


def write_manifest(out_dir: Path, files: Mapping[str, str], dirs: set[str],
                   pending: Mapping[str, str] | None = None) -> None:
    data = {"written_by": WRITTEN_BY, "files": dict(sorted(files.items())), "dirs": sorted(dirs)}
    if pending:
        data["pending"] = dict(sorted(pending.items()))
    replace_file(out_dir / MANIFEST, (json.dumps(data, indent=1) + "\n").encode())


def write_folder(out_dir: Path, contents: Mapping[str, bytes]) -> None:
    """Write `contents` (relative POSIX path → bytes) into `out_dir`, replacing only what the harness wrote
    there before (and removing those of its files no longer part of it). Refuses, changing nothing, when the
    folder holds anything else."""
    before = prepare(out_dir)
    new = {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}
    dirs = _dirs_of(list(contents))
    try:
        # First the manifest with both versions: a write cut short leaves a folder the next write accepts.
        write_manifest(out_dir, before.files, before.dirs | dirs, pending=new)
        for d in sorted(dirs, key=lambda d: d.count("/")):
            _mkdir(out_dir, d)
        for name, data in contents.items():
            replace_file(out_dir / name, data)
        for name in sorted(set(before.files) - set(contents)):  # ours, unchanged (surveyed), no longer needed
            if sha256_file(str(out_dir / name)) == before.files[name]:
                os.unlink(out_dir / name)
        for d in sorted(before.dirs - dirs, key=lambda d: -d.count("/")):
            _rmdir_if_empty(out_dir / d)
        write_manifest(out_dir, new, dirs | {d for d in before.dirs if (out_dir / d).is_dir()})
    except OSError as e:
        raise ConfigError(f"cannot write in {out_dir} ({e.strerror or e})",
                          hint="give --html a folder you can write in, on a disk with room") from None


def _mkdir(out_dir: Path, rel: str) -> None:
    path = out_dir / rel
    try:
        path.mkdir()
    except FileExistsError:
        pass
    if path.is_symlink() or not path.is_dir():  # made between the survey and now: never write through it
        raise _refuse(path, "not a folder the harness made", _hint(out_dir))


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise


def replace_file(path: Path, data: bytes | Callable[[IO[bytes]], None]) -> None:
    """Write `path` atomically: a temporary file beside it, created exclusively (never through a link), then
    renamed over it — a rename replaces a link at `path` rather than writing where it points. `data`: the
    bytes, or a function that writes into the open file."""
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                data(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary write would (mkstemp makes it private)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_output_file(path: Path, mark: bytes | None, option: str) -> None:
    """A lone output file (`option`, e.g. --plot) may be written at `path` only when nothing is there or the
    harness wrote what is there (`mark`, a tag the harness embeds in the file, found in it); refuses links,
    folders and anyone else's file, naming them."""
    hint = f"choose another file name for {option}, or move that out of the way first"
    if path.is_symlink():
        raise _refuse(path, f"a symbolic link (to {os.readlink(path)})", hint)
    if not path.exists():
        if not path.parent.is_dir():
            raise ConfigError(f"{path.parent} is not a folder, so {path.name} cannot be written there",
                              hint=f"create the folder, or give {option} a file in one that exists")
        return
    if not path.is_file():
        raise _refuse(path, "not a regular file", hint)
    try:
        ours = mark is not None and path.stat().st_size <= MAX_MARKED and mark in path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})", hint=hint) from None
    if not ours:
        raise _refuse(path, "a file the harness did not write (it carries no mark of the harness)", hint)


MAX_MARKED = 64 << 20  # a file of ours is a plot (well under this); a larger one is someone else's

