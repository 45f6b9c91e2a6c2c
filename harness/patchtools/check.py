"""Dry patch check against a local copy of the target source (`harness validate --against DIR`).

Only the files the patches touch are copied to a scratch repo; the patches are applied there in order
and every touched or new `.py` file is compiled. DIR itself is never written, so a broken patch is
caught on the laptop before any host is touched.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..common.targetid import target_identity
from ..experiments.patchsets import PatchSet, diff_paths


def dry_check(ps: PatchSet, target: Path) -> list[str]:
    """Problems found applying `ps` to `target` (empty when it applies and compiles); a set with
    per-version variants is checked with the variant the agent would pick for this target."""
    ident = target_identity(str(target))
    variant = ps.variant_for(ident)
    if variant is None:
        return [f"patch set {ps.name} has no variant for {ident or 'an unknown version'} "
                f"(its variants: {', '.join(ps.applies_to)})"]
    problems: list[str] = []
    touched = set()
    for p in variant.patches:
        touched |= diff_paths(p.text)
    with tempfile.TemporaryDirectory(prefix="harness-patchcheck-") as tmp_s:
        tmp = Path(tmp_s)
        subprocess.run(["git", "init", "-q", str(tmp)], check=True)
        for rel in touched:
            src = target / rel
            if src.is_file():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, tmp / rel)
        pdir = tmp / ".git" / "harness-patches"
        pdir.mkdir()
        paths = []
        for i, p in enumerate(variant.patches):
            path = pdir / f"{i:02d}-{p.name}"
            path.write_text(p.text)
            paths.append(str(path))
        if paths:
            for k in range(1, len(paths) + 1):  # as a series: name the first patch that fails
                r = subprocess.run(["git", "-C", str(tmp), "apply", "--whitespace=nowarn", paths[k - 1]],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    problems.append(f"patch set {ps.name}, {variant.patches[k - 1].name} does not apply to {target}:\n"
                                    + r.stderr.strip())
                    return problems
        for f in variant.files:
            if f.path.endswith(".py"):
                problems += _compile(f.content, f"files/{f.path}", ps.name)
        for rel in sorted(touched):
            if rel.endswith(".py") and (tmp / rel).is_file():
                problems += _compile((tmp / rel).read_bytes(), rel, ps.name)
    return problems


def _compile(source: bytes, name: str, set_name: str) -> list[str]:
    try:
        compile(source, name, "exec", dont_inherit=True)
        return []
    except (SyntaxError, ValueError) as exc:
        return [f"patch set {set_name}: {name} does not compile after patching: {exc}"]
