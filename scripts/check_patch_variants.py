"""Check the SGLang patch sets against one SGLang checkout, each in the variant made for its version.

    python scripts/check_patch_variants.py CHECKOUT [CHECKOUT ...] [--patches-dir DIR] [--set NAME ...]

CHECKOUT is an SGLang source tree (`python/sglang/...`; `python -m tests.upstream.sglang_source DEST
--version X` lays out a release that way). Its version is read from `python/sglang/_version.py`, else
`python/sglang/version.py` (module-level `__version__ = "..."`, as the harness agent reads it).

A patch set is a folder under patches/ whose patchset.yaml says `applies_to: sglang==<version>` (the
top level is the variant for that version) and `variants: {sglang==<other>: <subfolder>}` for other
versions (what differs: `*.patch` files and a `files/` tree; the rest is inherited from the top level); the
variant is read and picked as the agent gets it (harness.experiments.patchsets: inherited files and
`files_from` included). Simulated-target sets (`applies_to: harness-sim`) are left out.

For each set, the variant for the checkout's version is applied in a scratch git repo that holds copies
of only the files the patches touch (CHECKOUT is never written): `git apply --check`, then `git apply`,
patch after patch, then the `files/` tree. Then, for every touched or new `.py` file:

- it is byte-compiled (`py_compile`);
- every absolute `from sglang... import NAME` / `import sglang...` in it (lazy ones inside functions
  and `TYPE_CHECKING` blocks too) must resolve in the patched tree: the module file exists and NAME is
  bound at its top level (or is a submodule), and `Class.attr` on an imported sglang class must name
  something that class (or a base in its module) defines; what the unpatched file already failed is
  not the patch set's doing and is not reported;
- with pyflakes installed: no undefined name that the unpatched file did not already have.

One line per set, `OK` or `PROBLEM` (with the reasons below it); exit status 1 when any set has a
problem, 2 when a checkout cannot be read.
"""

from __future__ import annotations

import argparse
import ast
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.common.targetid import target_identity  # noqa: E402
from harness.experiments.patchsets import Variant as Content  # noqa: E402
from harness.experiments.patchsets import load_patch_set  # noqa: E402

DIFF_PATHS = re.compile(r"^(?:\+\+\+ b/(\S+)|--- a/(\S+)|rename to (\S+)|copy to (\S+))", re.MULTILINE)


@dataclass
class Variant:
    set_name: str
    label: str  # "top level" or "sglang-X/"
    content: Content  # the patches and files the agent applies (inherited ones included)


@dataclass
class Result:
    set_name: str
    label: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def sglang_sets(patches: Path) -> list[str]:
    """The sets made for some SGLang release (sim-only sets left out)."""
    names = []
    for folder in sorted(p for p in patches.iterdir() if p.is_dir()):
        ps = load_patch_set(patches, folder.name)
        if any(t.startswith("sglang==") for t in ps.applies_to):
            names.append(folder.name)
    return names


def pick_variant(patches: Path, set_name: str, target: str) -> tuple[Variant | None, list[str]]:
    """The variant the agent would apply on `target` (harness.experiments.patchsets), and the targets the set has."""
    ps = load_patch_set(patches, set_name)
    v = ps.variant_for(target)
    if v is None:
        return None, list(ps.applies_to)
    label = "top level" if v.folder == ps.folder else f"{v.folder.name}/"
    return Variant(set_name, label, v), list(ps.applies_to)


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def touched_paths(patch_text: str) -> set[str]:
    out = set()
    for m in DIFF_PATHS.finditer(patch_text):
        path = next(g for g in m.groups() if g)
        if path != "/dev/null":
            out.add(path)
    return out


# ----------------------------------------------------------------------------- import resolution


def _module_file(roots: list[Path], module: str) -> Path | None:
    rel = PurePosixPath("python", *module.split("."))
    for root in roots:
        for cand in (root / f"{rel}.py", root / rel / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def _is_package(roots: list[Path], module: str) -> bool:
    rel = PurePosixPath("python", *module.split("."))
    return any((root / rel).is_dir() for root in roots)


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names bound at module level (inside top-level if/try/with blocks too); True when a star import
    or a module __getattr__ makes the set open-ended."""
    names: set[str] = set()
    open_ended = False

    def targets(t: ast.AST) -> None:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                names.add(n.id)

    def visit(body: list[ast.stmt]) -> None:
        nonlocal open_ended
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                if node.name == "__getattr__":
                    open_ended = True
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    targets(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets(node.target)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    names.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name == "*":
                        open_ended = True
                    else:
                        names.add(a.asname or a.name)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for part in ("body", "orelse", "finalbody"):
                    visit(getattr(node, part, []) or [])
                for h in getattr(node, "handlers", []) or []:
                    visit(h.body)
    visit(tree.body)
    return names, open_ended


def _class_attrs(tree: ast.Module, cls_name: str, seen: frozenset = frozenset()) -> set[str] | None:
    """Attributes a top-level class of `tree` defines in its body (methods, class variables, dataclass
    fields), with those of bases defined in the same module; None when that cannot be known (a base
    from elsewhere, a metaclass, a class __getattr__)."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    node = classes.get(cls_name)
    if node is None or cls_name in seen or node.keywords:
        return None
    attrs: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            attrs.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            attrs |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            attrs.add(stmt.target.id)
    if "__getattr__" in attrs:
        return None
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id == "object":
            continue
        if isinstance(base, ast.Name) and base.id in classes:
            inherited = _class_attrs(tree, base.id, seen | {cls_name})
            if inherited is None:
                return None
            attrs |= inherited
        else:
            return None
    return attrs


def unresolved_imports(source: bytes, name: str, roots: list[Path]) -> tuple[list[str], int]:
    """Absolute sglang imports in `source` that do not resolve in the tree (roots: patched scratch
    first, then the checkout), as messages without line numbers (so that a patched file can be compared
    with the unpatched one). Returns (problems, number of imported names checked)."""
    problems: list[str] = []
    checked = 0
    cache: dict[Path, tuple[set[str], bool]] = {}
    trees: dict[Path, ast.Module] = {}
    classes: dict[str, tuple[str, set[str]]] = {}  # local name -> (module.Class, its attributes)
    tree = ast.parse(source, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "sglang":
            mod_file = _module_file(roots, node.module)
            if mod_file is None:
                if not _is_package(roots, node.module):  # a namespace package (no __init__.py) is fine
                    problems.append(f"no module {node.module}")
                    continue
                bound, open_ended = set(), False
            else:
                if mod_file not in cache:
                    trees[mod_file] = ast.parse(mod_file.read_bytes(), str(mod_file))
                    cache[mod_file] = _top_level_names(trees[mod_file])
                bound, open_ended = cache[mod_file]
            for a in node.names:
                checked += 1
                if mod_file is not None and a.name in bound:
                    attrs = _class_attrs(trees[mod_file], a.name)
                    if attrs is not None:
                        classes[a.asname or a.name] = (f"{node.module}.{a.name}", attrs)
                if a.name == "*" or open_ended or a.name in bound:
                    continue
                if _module_file(roots, f"{node.module}.{a.name}") or _is_package(roots, f"{node.module}.{a.name}"):
                    continue
                problems.append(f"{node.module} has no top-level name {a.name!r}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "sglang":
                    checked += 1
                    if _module_file(roots, a.name) is None and not _is_package(roots, a.name):
                        problems.append(f"no module {a.name}")
    # Class.attr on an imported sglang class (API drift between releases: a classmethod that is new)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in classes:
            qual, attrs = classes[node.value.id]
            if node.attr not in attrs and not node.attr.startswith("__"):
                problems.append(f"{qual} has no attribute {node.attr!r}")
    return problems, checked


def undefined_names(source: bytes, name: str) -> list[str] | None:
    """pyflakes' undefined-name messages (without line numbers), or None without pyflakes."""
    try:
        from pyflakes import api, messages
        from pyflakes import reporter as rep
    except ImportError:
        return None
    found: list[str] = []

    class Collect(rep.Reporter):
        def __init__(self) -> None:
            pass

        def flake(self, msg) -> None:
            if isinstance(msg, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)):
                found.append(msg.message % msg.message_args)

        def syntaxError(self, *a) -> None:
            found.append("syntax error")

        def unexpectedError(self, *a) -> None:
            found.append("pyflakes could not read the file")

    api.check(source.decode("utf-8", "replace"), name, Collect())
    return found


# ----------------------------------------------------------------------------- one set


def check_variant(v: Variant, checkout: Path) -> Result:
    res = Result(v.set_name, v.label)
    patch_files, new_files = v.content.patches, v.content.files
    if not patch_files and not new_files:
        res.problems.append(f"{v.content.folder}: no *.patch files and no files/ tree")
        return res
    touched = set().union(*(touched_paths(p.text) for p in patch_files)) if patch_files else set()
    with tempfile.TemporaryDirectory(prefix="check-patch-variants-") as tmp_s:
        tmp = Path(tmp_s)
        _git(tmp, "init", "-q")
        texts = []
        for i, pf in enumerate(patch_files):
            texts.append((tmp / ".git" / f"{i:02d}-{pf.name}", pf.name))
            texts[-1][0].write_bytes(pf.text.encode("utf-8"))
        for rel in sorted(touched):
            src = checkout / rel
            if src.is_file():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, tmp / rel)
        for p, name in texts:
            r = _git(tmp, "apply", "--check", "--whitespace=nowarn", str(p))
            if r.returncode != 0:
                res.problems.append(f"{name} does not apply (git apply --check):\n                "
                                    + r.stderr.strip().replace("\n", "\n                "))
                return res
            r = _git(tmp, "apply", "--whitespace=nowarn", str(p))
            if r.returncode != 0:
                res.problems.append(f"{name}: git apply failed after --check passed:\n    " + r.stderr.strip())
                return res
        written = []
        for f in new_files:
            rel = f.path
            if (checkout / rel).exists():
                res.notes.append(f"files/{rel} replaces a file that exists in the checkout")
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(f.content)
            written.append(rel)
        py = sorted({r for r in touched | set(written) if r.endswith(".py") and (tmp / r).is_file()})
        roots = [tmp, checkout]
        n_imports = 0
        flakes_ran = False
        for rel in py:
            try:
                py_compile.compile(str(tmp / rel), cfile=str(tmp / ".git" / "compiled.pyc"), doraise=True)
            except py_compile.PyCompileError as exc:
                res.problems.append(f"{rel} does not compile: {exc.msg.strip()}")
                continue
            source = (tmp / rel).read_bytes()
            problems, n = unresolved_imports(source, rel, roots)
            n_imports += n
            if problems and (checkout / rel).is_file():  # only what the patch set brought in
                before, _ = unresolved_imports((checkout / rel).read_bytes(), rel, [checkout])
                problems = [p for p in problems if p not in before]
            res.problems += [f"{rel}: {p}" for p in dict.fromkeys(problems)]
            after = undefined_names(source, rel)
            if after is not None:
                flakes_ran = True
                before = undefined_names((checkout / rel).read_bytes(), rel) if (checkout / rel).is_file() else []
                for msg in sorted(set(after) - set(before or [])):
                    res.problems.append(f"{rel}: {msg} (pyflakes)")
        res.notes.insert(0, f"{len(patch_files)} patch(es), {len(written)} new file(s); compiled {len(py)} .py; "
                            f"{n_imports} sglang import(s) checked"
                            + ("; pyflakes: no new undefined names" if flakes_ran else "; pyflakes not installed"))
    return res


def check_checkout(checkout: Path, patches: Path, only: list[str] | None) -> tuple[list[Result], str | None]:
    target = target_identity(str(checkout))
    if target is None or not target.startswith("sglang=="):
        return [], None
    version = target.split("==", 1)[1]
    results = []
    for name in only or sglang_sets(patches):
        if not (patches / name).is_dir():
            results.append(Result(name, problems=[f"no patch set folder {patches / name}"]))
            continue
        variant, have = pick_variant(patches, name, target)
        if variant is None:
            results.append(Result(name, problems=[f"no variant for sglang {version} (variants: "
                                                  f"{', '.join(have) or 'none'})"]))
            continue
        results.append(check_variant(variant, checkout))
    return results, version


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkouts", nargs="+", type=Path, help="SGLang source trees (python/sglang/...)")
    ap.add_argument("--patches-dir", type=Path, default=ROOT / "patches")
    ap.add_argument("--set", dest="sets", action="append", help="only this patch set (repeatable)")
    args = ap.parse_args(argv)
    status = 0
    for checkout in args.checkouts:
        results, version = check_checkout(checkout.resolve(), args.patches_dir.resolve(), args.sets)
        if version is None:
            print(f"error: {checkout}: no SGLang version found (python/sglang/_version.py, version.py)")
            status = max(status, 2)
            continue
        print(f"{checkout}: sglang {version}")
        for r in results:
            word = "PROBLEM" if r.problems else "OK     "
            print(f"  {word} {r.set_name}" + (f" [{r.label}]" if r.label else ""))
            for n in r.notes:
                print(f"            {n}")
            for p in r.problems:
                print(f"            - {p}")
            if r.problems:
                status = max(status, 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
