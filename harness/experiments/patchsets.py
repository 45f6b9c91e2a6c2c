"""Patch sets: a folder under `patches/` with ordered `*.patch` files, an optional `files/` tree and files taken
from the project (`files_from`); per-version variants in subfolders that inherit the rest (patchlayers.py).

A patch set is read once on the controller into plain data (texts and bytes) that travels inside the
attempt spec, and hashed so results can say exactly which patch contents produced them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import field_validator

from ..common.diffheaders import diff_files
from ..common.patchpaths import patch_set_refusals
from ..errors import ConfigError
from .config import Strict, validate_model
from .patchlayers import Layer, Source, inherit, ordered_files, ordered_patches, own_layer, read_bytes, referenced_files
from .yamlsrc import YamlDoc, load_yaml

# --------------------------------------------------------------------------- patchset.yaml

TARGET_ID = r"^(harness-sim|sglang==[0-9][0-9A-Za-z.+-]*)$"


class VariantMeta(Strict):
    """A variant: its folder (`sglang==0.5.16: sglang-0.5.16` is short for `{folder: sglang-0.5.16}`), and the
    top level's patch files (`0002-x.patch`) or files (`files/<path>`) it leaves out instead of inheriting."""

    folder: str
    drop: tuple[str, ...] = ()

    @field_validator("folder")
    @classmethod
    def _plain_folder(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9._-]+$", v) or v in (".", "..", "files"):
            raise ValueError(f"variant folder {v!r} must be one plain subfolder name of the patch set")
        return v

    @field_validator("drop")
    @classmethod
    def _drop_entries(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for entry in v:
            if not (entry.endswith(".patch") and "/" not in entry) and not entry.startswith("files/"):
                raise ValueError(f"drop {entry!r}: write a top-level patch file's name or files/<path>")
        return v


class PatchSetMeta(Strict):
    """`applies_to`: the target(s) the set's top-level patches are made for ('sglang==0.5.23' or a list of
    them). `variants`: more targets, each with a subfolder holding only what differs for that version (it
    inherits the rest from the top level; the agent picks the variant matching the host's SGLang).
    `files_from`: whole files taken from the project (target repo path → path from the project root)."""

    description: str = ""
    applies_to: str | list[str] | None = None
    variants: dict[str, VariantMeta] | None = None
    order: tuple[str, ...] | None = None
    files_from: dict[str, str] | None = None

    @field_validator("applies_to")
    @classmethod
    def _targets(cls, v: str | list[str] | None) -> str | list[str] | None:
        for t in [v] if isinstance(v, str) else v or []:
            if not re.match(TARGET_ID, t):
                raise ValueError(f"{t!r} is not a target: write 'sglang==<version>' or 'harness-sim'")
        return v

    @field_validator("variants", mode="before")
    @classmethod
    def _folder_alone(cls, v: Any) -> Any:
        return {t: {"folder": f} if isinstance(f, str) else f for t, f in v.items()} if isinstance(v, dict) else v

    @field_validator("variants")
    @classmethod
    def _variant_targets(cls, v: dict[str, VariantMeta] | None) -> dict[str, VariantMeta] | None:
        for target in v or {}:
            if not re.match(TARGET_ID, target):
                raise ValueError(f"variant {target!r} is not a target: write 'sglang==<version>'")
        return v

    def targets(self) -> tuple[str, ...]:
        """The targets of the top-level patches."""
        v = self.applies_to
        return (v,) if isinstance(v, str) else tuple(v or ())


def load_patchset_meta(file: Path) -> tuple[PatchSetMeta, YamlDoc]:
    doc = load_yaml(file)
    return validate_model(PatchSetMeta, doc.data if doc.data is not None else {}, doc, what="patch set"), doc


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
    """One version's content of a patch set, as applied: the patches and new files made for `applies_to` (a
    variant's own with what it inherits from the top level)."""

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
        """Over every variant's content as applied, inherited files included (one variant: the same hash as
        before variants existed)."""
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
    """Read patches_dir/name: the top level, then each variant as the top level with its folder laid over it
    (patchlayers.py). `files_from` paths are read from patches_dir's parent, the project root."""
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
    meta, doc = load_patchset_meta(meta_file) if meta_file.exists() else (PatchSetMeta(), None)

    def lines(*key: str) -> dict[str, int | None]:
        return entry_lines(doc, key)

    top = own_layer(folder)
    shared = referenced_files(meta.files_from or {}, patches_dir.parent, meta_file, lines("files_from"))
    if clash := sorted(set(shared) & set(top.files)):
        raise ConfigError(f"{clash[0]} is both a files/ entry and under files_from", file=meta_file,
                          line=shared[clash[0]].line, hint=f"keep one: delete {folder / 'files' / clash[0]} or "
                                                           "the files_from entry")
    top.files.update(shared)
    layers = [(meta.targets(), folder, top, name)]
    for target, spec in (meta.variants or {}).items():
        sub, drop = spec.folder, spec.drop
        if target in meta.targets():
            raise ConfigError(f"variant {target} is also in applies_to (the top-level patches)", file=meta_file,
                              hint="list a target once: in applies_to for the top level, or under variants")
        if not (folder / sub).is_dir():
            raise ConfigError(f"variant {target}: folder {folder / sub} not found", file=meta_file,
                              hint=f"put what differs for that version (*.patch files, files/) in {folder / sub}/")
        own = own_layer(folder / sub)
        if own.empty and not drop:
            raise ConfigError(f"variant {target}: {folder / sub} holds no *.patch file and no files/ entry: it "
                              "would be the top level itself", file=meta_file, line=lines("variants").get(target),
                              hint=f"add {target} to applies_to instead, or put what differs in {folder / sub}/")
        merged = inherit(top, own, drop, meta_file, lines("variants", target, "drop"))
        layers.append(((target,), folder / sub, merged, f"{name} ({target})"))
    order = meta.order
    if order is not None and (missing := [n for n in order if all(n not in la.patches for _, _, la, _ in layers)]):
        raise ConfigError(f"order lists missing patch file(s): {', '.join(missing)}", file=meta_file)
    variants = tuple(_variant(applies_to, at, layer, order, label) for applies_to, at, layer, label in layers)
    return PatchSet(name, folder, meta.description, variants)


def entry_lines(doc: YamlDoc | None, key: tuple[str, ...]) -> dict[str, int | None]:
    """The YAML's line of each entry under `key`: a mapping's keys, a list's items (for errors that name one)."""
    data = doc.data if doc else None
    for k in key:
        data = data.get(k) if isinstance(data, dict) else None
    if isinstance(data, dict):
        return {str(k): doc.line_of((*key, k)) if doc else None for k in data}
    if isinstance(data, list):
        return {str(e): doc.line_of((*key, i)) if doc else None for i, e in enumerate(data)}
    return {}


def _variant(applies_to: tuple[str, ...], folder: Path, layer: Layer, order: tuple[str, ...] | None,
             label: str) -> Variant:
    """One variant's content read and checked: each patch a diff git applies, each path inside the tree."""
    patches = []
    for name, src in ordered_patches(layer, order):
        try:
            # Bytes, then decode: reading as text would turn CRLF content into LF and the patch would
            # no longer match a file that has CRLF line ends.
            text = read_bytes(src).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"cannot read patch: {exc}", file=src.named) from None
        if not is_diff(text):
            raise ConfigError("not a diff git can apply (no '+++' header, no `diff --git` rename or mode change)",
                              file=src.named, hint="make patches with `git diff` relative to the target repo root")
        patches.append(PatchFile(name, text))
    files = [NewFile(path, read_bytes(src), 0o755 if src.read.stat().st_mode & 0o111 else 0o644)
             for path, src in ordered_files(layer)]
    if not patches and not files:
        raise ConfigError(f"patch set {label!r} is empty", file=folder,
                          hint="add *.patch files or a files/ tree")
    sources = {**layer.patches, **{f"files/{path}": src for path, src in layer.files.items()}}
    check_paths(sources, patches, files)  # first: a write through a link is a refusal of its own kind
    _check_files_below_diff_files(patches, files, layer.files)
    return Variant(applies_to, tuple(patches), tuple(files), folder)


def check_paths(sources: dict[str, Source], patches: list[PatchFile], files: list[NewFile]) -> None:
    """The path rule (harness/common/patchpaths.py), before any host is contacted: every path the set writes
    is inside the work tree, outside .git/, and not reached through a symbolic link the set creates."""
    refusals = patch_set_refusals([(p.name, p.text) for p in patches], [f.path for f in files])
    if not refusals:
        return
    first = refusals[0]
    src = sources[first.source]
    if first.source.startswith("files/"):
        raise ConfigError(f"{src.label} {first.reason}", file=src.named, line=src.line,
                          hint="a patch set may only write inside the work tree, never into .git/ or through "
                               "a symbolic link")
    same = [r for r in refusals if r.source == first.source]
    listed = "; ".join(f"{r.path} {r.reason}" + (f" (line {r.line})" if r.line and r is not first else "")
                       for r in same)
    raise ConfigError(f"patch touches paths outside the target repo or inside .git/: {listed}",
                      file=src.named, line=first.line,
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




def _check_files_below_diff_files(patches: list[PatchFile], files: list[NewFile], sources: dict[str, Source]) -> None:
    """files/foo.py/bar where the set's own diff leaves foo.py a file: it can never be written on any host
    (the agent would refuse it too, after contacting one)."""
    written = {f.new for patch in patches for f in diff_files(patch.text) if f.new and not f.link and not f.deleted}
    for entry in files:
        clash = next((str(d) for d in PurePosixPath(entry.path).parents if str(d) in written), None)
        if clash:
            src = sources[entry.path]
            raise ConfigError(f"{src.label} cannot be written: the patch set's diff makes {clash} a file, "
                              f"not a folder", file=src.named, line=src.line,
                              hint="move the file to a path that is not below a file the patches write")


def diff_paths(text: str) -> set[str]:
    """Every path a unified diff names in its headers (without the a/ b/ prefixes, git's quoting decoded)."""
    return {name for f in diff_files(text) for name in f.names}
