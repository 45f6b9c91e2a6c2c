"""Patch sets: a folder under `patches/` with ordered `*.patch` files and an optional `files/` tree.

A patch set is read once on the controller into plain data (texts and bytes) that travels inside the
attempt spec, and hashed so results can say exactly which patch contents produced them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import field_validator

from ..common.diffheaders import diff_files
from ..common.patchpaths import patch_set_refusals
from ..errors import ConfigError
from .config import Strict, validate_model
from .yamlsrc import load_yaml

# --------------------------------------------------------------------------- patchset.yaml

TARGET_ID = r"^(harness-sim|sglang==[0-9][0-9A-Za-z.+-]*)$"


class PatchSetMeta(Strict):
    """`applies_to`: the target(s) the set's top-level patches are made for ('sglang==0.5.23' or a list of
    them). `variants`: more targets, each with its own subfolder holding that version's patches and
    files/ (the agent picks the variant matching the host's SGLang)."""

    description: str = ""
    applies_to: str | list[str] | None = None
    variants: dict[str, str] | None = None
    order: tuple[str, ...] | None = None

    @field_validator("applies_to")
    @classmethod
    def _targets(cls, v: str | list[str] | None) -> str | list[str] | None:
        for t in [v] if isinstance(v, str) else v or []:
            if not re.match(TARGET_ID, t):
                raise ValueError(f"{t!r} is not a target: write 'sglang==<version>' or 'harness-sim'")
        return v

    @field_validator("variants")
    @classmethod
    def _variant_folders(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for target, folder in (v or {}).items():
            if not re.match(TARGET_ID, target):
                raise ValueError(f"variant {target!r} is not a target: write 'sglang==<version>'")
            if not re.match(r"^[A-Za-z0-9._-]+$", folder) or folder in (".", "..", "files"):
                raise ValueError(f"variant folder {folder!r} must be one plain subfolder name of the patch set")
        return v

    def targets(self) -> tuple[str, ...]:
        """The targets of the top-level patches."""
        v = self.applies_to
        return (v,) if isinstance(v, str) else tuple(v or ())


def load_patchset_meta(file: Path) -> PatchSetMeta:
    doc = load_yaml(file)
    return validate_model(PatchSetMeta, doc.data if doc.data is not None else {}, doc, what="patch set")



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
class Variant:
    """One version's content of a patch set: the patches and new files made for `applies_to`."""

    applies_to: tuple[str, ...]  # 'sglang==<version>' or 'harness-sim'; empty: not said
    patches: tuple[PatchFile, ...]
    files: tuple[NewFile, ...]
    folder: Path


@dataclass(frozen=True)
class PatchSet:
    """A patch set: usually one variant (its folder's top level); per-version variants beside it in
    subfolders named in patchset.yaml. The agent applies the one matching the host's SGLang."""

    name: str
    folder: Path
    description: str
    variants: tuple[Variant, ...]

    @property
    def applies_to(self) -> tuple[str, ...]:
        return tuple(t for v in self.variants for t in v.applies_to)

    @property
    def has_variants(self) -> bool:
        return len(self.variants) > 1

    def variant_for(self, target: str | None) -> Variant | None:
        """The variant made for `target`; a set of one variant serves any target (checked elsewhere)."""
        if not self.has_variants:
            return self.variants[0]
        return next((v for v in self.variants if target in v.applies_to), None)

    @property
    def sha256(self) -> str:
        """Over every variant's content (one variant: the same hash as before variants existed)."""
        return variants_digest(self.variants)


def variants_digest(variants: tuple[Variant, ...]) -> str:
    """A patch set's share of the resume key: every variant's patches and files, names, modes and bytes. (A
    function of its own, not the property's body: mutation testing does not mutate properties.)"""
    h = hashlib.sha256()
    for v in variants:
        if len(variants) > 1:
            h.update(b"variant\0" + ",".join(v.applies_to).encode() + b"\0")
        for p in v.patches:
            h.update(b"patch\0" + p.name.encode() + b"\0" + p.text.encode() + b"\0")
        for f in v.files:
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
    order = meta.order if meta else None
    variants = [_load_variant(folder, meta.targets() if meta else (), order, meta_file, name)]
    for target, sub in (meta.variants or {}).items() if meta else ():
        if target in variants[0].applies_to:
            raise ConfigError(f"variant {target} is also in applies_to (the top-level patches)", file=meta_file,
                              hint="list a target once: in applies_to for the top level, or under variants")
        if not (folder / sub).is_dir():
            raise ConfigError(f"variant {target}: folder {folder / sub} not found", file=meta_file,
                              hint=f"put that version's *.patch files (and files/) in {folder / sub}/")
        variants.append(_load_variant(folder / sub, (target,), None, meta_file, f"{name} ({target})"))
    return PatchSet(name, folder, meta.description if meta else "", tuple(variants))


def _load_variant(folder: Path, applies_to: tuple[str, ...], order: tuple[str, ...] | None, meta_file: Path,
                  label: str) -> Variant:
    patch_files = sorted(folder.glob("*.patch"))
    if order is not None:
        by_name = {p.name: p for p in patch_files}
        missing = [n for n in order if n not in by_name]
        if missing:
            raise ConfigError(f"order lists missing patch file(s): {', '.join(missing)}", file=meta_file)
        patch_files = [by_name[n] for n in order]
    patches = []
    for p in patch_files:
        try:
            # Bytes, then decode: reading as text would turn CRLF content into LF and the patch would
            # no longer match a file that has CRLF line ends.
            text = p.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read patch: {exc}", file=p) from None
        if not is_diff(text):
            raise ConfigError("not a diff git can apply (no '+++' header, no `diff --git` rename or mode change)",
                              file=p, hint="make patches with `git diff` relative to the target repo root")
        patches.append(PatchFile(p.name, text))
    files = []
    files_root = folder / "files"
    if files_root.is_dir():
        for f in sorted(files_root.rglob("*")):
            if f.is_dir() and not f.is_symlink():
                continue
            if f.is_symlink() or not f.is_file():
                # Skipping it would apply something other than what the folder shows; following it could
                # read any file of this machine into the host's tree.
                what = "a symbolic link" if f.is_symlink() else "not a regular file"
                raise ConfigError(f"files/{f.relative_to(files_root).as_posix()} is {what}: a patch set's files/ "
                                  "holds regular files only", file=f,
                                  hint="copy the file itself there, or make the link with a patch (`git diff` "
                                       "writes links as `new file mode 120000`)")
            rel = PurePosixPath(*f.relative_to(files_root).parts)
            files.append(NewFile(str(rel), f.read_bytes(), 0o755 if f.stat().st_mode & 0o111 else 0o644))
    if not patches and not files:
        raise ConfigError(f"patch set {label!r} is empty", file=folder,
                          hint="add *.patch files or a files/ tree")
    check_paths(folder, patches, files)  # first: a write through a link is a refusal of its own kind
    _check_files_below_diff_files(patches, files, files_root)
    return Variant(applies_to, tuple(patches), tuple(files), folder)


def check_paths(folder: Path, patches: list[PatchFile], files: list[NewFile]) -> None:
    """The path rule (harness/common/patchpaths.py), before any host is contacted: every path the set writes
    is inside the work tree, outside .git/, and not reached through a symbolic link the set creates."""
    refusals = patch_set_refusals([(p.name, p.text) for p in patches], [f.path for f in files])
    if not refusals:
        return
    first = refusals[0]
    if first.source.startswith("files/"):
        raise ConfigError(f"{first.source} {first.reason}", file=folder / first.source,
                          hint="a patch set may only write inside the work tree, never into .git/ or through "
                               "a symbolic link")
    same = [r for r in refusals if r.source == first.source]
    listed = "; ".join(f"{r.path} {r.reason}" + (f" (line {r.line})" if r.line and r is not first else "")
                       for r in same)
    raise ConfigError(f"patch touches paths outside the target repo or inside .git/: {listed}",
                      file=folder / first.source, line=first.line,
                      hint="name files relative to the repo root as `git diff` does (`--- a/pkg/x.py`, "
                           "`+++ b/pkg/x.py`; `/dev/null` only on the side of a new or deleted file), without "
                           "'..' or .git/, never through a symbolic link the patch set creates; links must "
                           "point inside the tree (`harness patch new NAME --from CHECKOUT` writes them so)")


_GIT_ONLY_CHANGE = re.compile(r"^(?:rename from |rename to |copy from |copy to |old mode |new mode |"
                              r"deleted file mode |new file mode )", re.MULTILINE)


def is_diff(text: str) -> bool:
    """A diff `git apply` accepts: content hunks (`+++`), a binary patch, or a `diff --git` header with a
    change that has no hunk — a pure rename or copy, a mode change, an empty new or deleted file."""
    if re.search(r"^\+\+\+ ", text, re.MULTILINE) or "GIT binary patch" in text:
        return True
    return bool(re.search(r"^diff --git ", text, re.MULTILINE) and _GIT_ONLY_CHANGE.search(text))




def _check_files_below_diff_files(patches: list[PatchFile], files: list[NewFile], files_root: Path) -> None:
    """files/foo.py/bar where the set's own diff leaves foo.py a file: it can never be written on any host
    (the agent would refuse it too, after contacting one)."""
    written = {f.new for patch in patches for f in diff_files(patch.text) if f.new and not f.link and not f.deleted}
    for entry in files:
        clash = next((str(d) for d in PurePosixPath(entry.path).parents if str(d) in written), None)
        if clash:
            raise ConfigError(f"files/{entry.path} cannot be written: the patch set's diff makes {clash} a file, "
                              f"not a folder", file=files_root / entry.path,
                              hint="move the file to a path that is not below a file the patches write")


def diff_paths(text: str) -> set[str]:
    """Every path a unified diff names in its headers (without the a/ b/ prefixes, git's quoting decoded)."""
    return {name for f in diff_files(text) for name in f.names}
