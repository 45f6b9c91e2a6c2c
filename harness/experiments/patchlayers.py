"""A patch set's layers: what one folder holds of its own (`*.patch` files, a `files/` tree), the project
files its patchset.yaml references (`files_from`), and a variant's content: the top level's, with the
variant folder's own laid over it (docs/patch-sets.md, "Variants").

The rule: a variant's patch file replaces the top level's of the same name, its `files/` entry the top
level's (or a `files_from` entry) of the same path; whatever the variant folder lacks it inherits; `drop`
(patchset.yaml) leaves an inherited one out. Only reads folders: what a set may write is checked on the
merged content (patchsets.check_paths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..common.patchpaths import path_problem
from ..errors import ConfigError


@dataclass(frozen=True)
class Source:
    """Where one patch file or whole file comes from: `read`, the file its bytes are read from; `label`,
    `named` and `line`, what an error about it names (the file itself, or a patchset.yaml line)."""

    read: Path
    label: str  # the patch file's name, `files/<path>`, or `files_from: <path>`
    named: Path
    line: int | None = None


@dataclass
class Layer:
    """One folder's content: patch file name → its source; path in the target repo → its whole file's source."""

    patches: dict[str, Source] = field(default_factory=dict)
    files: dict[str, Source] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.patches and not self.files


def own_layer(folder: Path) -> Layer:
    """The folder's own `*.patch` files and `files/` entries (regular files only)."""
    layer = Layer({p.name: Source(p, p.name, p) for p in sorted(folder.glob("*.patch"))})
    files_root = folder / "files"
    if not files_root.is_dir():
        return layer
    for f in sorted(files_root.rglob("*")):
        if f.is_dir() and not f.is_symlink():
            continue
        rel = PurePosixPath(*f.relative_to(files_root).parts)
        if f.is_symlink() or not f.is_file():
            # Skipping it would apply something other than what the folder shows; following it could
            # read any file of this machine into the host's tree.
            what = "a symbolic link" if f.is_symlink() else "not a regular file"
            raise ConfigError(f"files/{rel} is {what}: a patch set's files/ holds regular files only", file=f,
                              hint="copy the file itself there, name it under files_from in patchset.yaml, or "
                                   "make the link with a patch (`git diff` writes links as `new file mode 120000`)")
        layer.files[str(rel)] = Source(f, f"files/{rel}", f)
    return layer


def referenced_files(files_from: dict[str, str], project: Path, meta_file: Path,
                     lines: dict[str, int | None]) -> dict[str, Source]:
    """`files_from` (target repo path → a project file's path from the project root, the folder that holds
    patches/): each source a regular file inside the project, refused naming patchset.yaml's line."""
    root = project.resolve()
    out: dict[str, Source] = {}
    for dest, src in files_from.items():
        line = lines.get(dest)
        where = project / src
        bad = path_problem(src)  # the rule of a path in the repo, read for the project
        bad = bad and bad.replace("the work tree", "the project").replace("the repo root", "the project root")
        if bad is None and (where.is_symlink() or not where.is_file()):
            bad = ("is a symbolic link" if where.is_symlink() else
                   "is not a regular file" if where.exists() else "is not there")
        if bad is None and not where.resolve().is_relative_to(root):
            bad = "is outside the project (through a symbolic link above it)"
        if bad:
            raise ConfigError(f"files_from {dest}: {src} {bad} (in the project {project})", file=meta_file,
                              line=line, hint="name a regular file of the project by its path from the project "
                                              "root, the folder that holds patches/ (e.g. kernels/x.py)")
        rel = str(PurePosixPath(dest))
        out[rel] = Source(where, f"files_from: {rel}", meta_file, line)
    return out


def inherit(top: Layer, own: Layer, drop: tuple[str, ...], meta_file: Path,
            lines: dict[str, int | None]) -> Layer:
    """A variant's content: the top level's, less what `drop` names (`<name>.patch` or `files/<path>`; lines:
    each entry's patchset.yaml line), with the variant folder's own (`own`) replacing what has its name."""
    merged = Layer(dict(top.patches), dict(top.files))
    for entry in drop:
        kind, key = ("files", entry.removeprefix("files/")) if entry.startswith("files/") else ("patches", entry)
        inherited, mine = getattr(merged, kind), getattr(own, kind)
        problem = ("names nothing the top level has" if key not in inherited else
                   "is also in the variant's own folder (drop it, or override it: not both)" if key in mine else None)
        if problem:
            raise ConfigError(f"drop {entry} {problem}", file=meta_file, line=lines.get(entry),
                              hint="drop names a top-level patch file (`0002-x.patch`) or files/ entry "
                                   "(`files/<path>`, a files_from path too) the variant should not get")
        del inherited[key]
    merged.patches.update(own.patches)
    merged.files.update(own.files)
    return merged


def ordered_patches(layer: Layer, order: tuple[str, ...] | None) -> list[tuple[str, Source]]:
    """The layer's patch files in the order they apply: by name, or as `order` lists them (those the layer
    has; a patch file `order` does not name is not applied)."""
    if order is None:
        return sorted(layer.patches.items())
    return [(n, layer.patches[n]) for n in order if n in layer.patches]


def ordered_files(layer: Layer) -> list[tuple[str, Source]]:
    """The layer's whole files by path, folder by folder (as a sorted walk of files/ meets them)."""
    return sorted(layer.files.items(), key=lambda item: PurePosixPath(item[0]).parts)


def read_bytes(src: Source) -> bytes:
    try:
        return src.read.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{src.label}: cannot read {src.read}: {exc}", file=src.named, line=src.line) from None
