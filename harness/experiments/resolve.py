"""Resolving an experiment: look its backend up and read its patch sets from disk (the one place an
experiment's dependencies are read), so an attempt is then built from plain data."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .backends import REGISTRY, Backend
from .config import Experiment
from .files import read_experiment_file
from .patchsets import PatchSet, load_patch_set
from .yamlsrc import YamlDoc


@dataclass(frozen=True)
class Resolved:
    """An experiment with its backend looked up and its patch sets read: everything an attempt needs."""

    experiment: Experiment
    file: Path
    backend: Backend | None
    patch_sets: tuple[PatchSet, ...]
    checkout: str | None = None  # a bisect step: the commit the attempt checks out before its patch sets

    @property
    def name(self) -> str:
        return self.experiment.name

    @property
    def backend_name(self) -> str | None:
        if self.backend:
            return self.backend.name
        return self.experiment.server.attention_backend


def resolve_file(file: Path, patches_dir: Path) -> Resolved:
    """The experiment in `file`, read (files.py: the one door) and resolved."""
    read = read_experiment_file(file)
    return resolve(read.experiment, file, patches_dir, doc=read.doc)


def resolve(exp: Experiment, file: Path, patches_dir: Path, *, doc: YamlDoc | None = None) -> Resolved:
    """`exp` (read from `file`, which need not exist) with its backend and patch sets; errors name the line
    from `doc`, the YAML `exp` was read from, when the caller has it."""

    def line(*path: str | int) -> int | None:
        return doc.line_of(path) if doc else None

    backend = None
    if exp.backend is not None:
        backend = REGISTRY.get(exp.backend)
        if backend is None:
            close = difflib.get_close_matches(exp.backend, list(REGISTRY), n=1)
            raise ConfigError(f"unknown backend {exp.backend!r}", file=file, line=line("backend"),
                              hint=(f"did you mean {close[0]!r}? " if close else "")
                              + "known backends: " + ", ".join(REGISTRY))
        if exp.server.attention_backend is not None:
            raise ConfigError("give either `backend:` or `server.attention_backend:`, not both", file=file,
                              line=line("server", "attention_backend"))
    backend_sets: tuple[str, ...] = backend.patch_sets if backend else ()
    if backend and backend.name in exp.backend_patches:
        backend_sets = exp.backend_patches[backend.name]
    names: list[tuple[str, int | None]] = [(n, line("backend")) for n in backend_sets]
    names += [(n, line("patches", i)) for i, n in enumerate(exp.patches)]
    seen: set[str] = set()
    sets = []
    for name, ln in names:
        if name in seen:
            continue
        seen.add(name)
        sets.append(load_patch_set(patches_dir, name, referenced_from=file, line=ln))
    return Resolved(exp, file, backend, tuple(sets))
