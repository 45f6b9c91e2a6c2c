"""Patch sets: a folder under `patches/` with ordered `*.patch` files and an optional `files/` tree.

A patch set is read once on the controller into plain data (texts and bytes) that travels inside the
attempt spec, and hashed so results can say exactly which patch contents produced them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .config import load_patchset_meta
from .errors import ConfigError


@dataclass(frozen=True)
class PatchFile:
    name: str
    text: str


@dataclass(frozen=True)
class NewFile:
    path: str  # relative to the target repo root, POSIX
    content: bytes
    mode: int


@dataclass(frozen=True)
class PatchSet:
    name: str
    folder: Path
    description: str
    patches: tuple[PatchFile, ...]
    files: tuple[NewFile, ...]

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for p in self.patches:
            h.update(b"patch\0" + p.name.encode() + b"\0" + p.text.encode() + b"\0")
        for f in self.files:
            h.update(b"file\0" + f.path.encode() + b"\0" + oct(f.mode).encode() + b"\0" + f.content + b"\0")
        return h.hexdigest()


def load_patch_set(patches_dir: Path, name: str, *, referenced_from: Path | None = None,
                   line: int | None = None) -> PatchSet:
    folder = patches_dir / name
    if not folder.is_dir():
        available = sorted(p.name for p in patches_dir.iterdir() if p.is_dir()) if patches_dir.is_dir() else []
        raise ConfigError(
            f"patch set {name!r} not found (looked for folder {folder})",
            file=referenced_from, line=line,
            hint=("available patch sets: " + ", ".join(available)) if available
            else f"create {folder}/ with *.patch files",
        )
    meta_file = folder / "patchset.yaml"
    meta = load_patchset_meta(meta_file) if meta_file.exists() else None
    patch_files = sorted(folder.glob("*.patch"))
    if meta is not None and meta.order is not None:
        by_name = {p.name: p for p in patch_files}
        missing = [n for n in meta.order if n not in by_name]
        if missing:
            raise ConfigError(f"order lists missing patch file(s): {', '.join(missing)}", file=meta_file)
        patch_files = [by_name[n] for n in meta.order]
    patches = []
    for p in patch_files:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read patch: {exc}", file=p) from None
        if "\n+++ " not in text and not text.startswith("+++ ") and "GIT binary patch" not in text:
            raise ConfigError("not a unified diff (no '+++' header)", file=p,
                              hint="make patches with `git diff` relative to the target repo root")
        patches.append(PatchFile(p.name, text))
    files = []
    files_root = folder / "files"
    if files_root.is_dir():
        for f in sorted(files_root.rglob("*")):
            if f.is_symlink() or not f.is_file():
                continue
            rel = PurePosixPath(*f.relative_to(files_root).parts)
            files.append(NewFile(str(rel), f.read_bytes(), 0o755 if f.stat().st_mode & 0o111 else 0o644))
    if not patches and not files:
        raise ConfigError(f"patch set {name!r} is empty", file=folder,
                          hint="add *.patch files or a files/ tree")
    return PatchSet(name, folder, meta.description if meta else "", tuple(patches), tuple(files))
