"""Which safety-core functions changed since the committed mutation report (pure: reads source, no mutmut).

The full mutation pass (`scripts/mutation.py full --write`) records, for each safety-core function, a
fingerprint of its code and one of every test that mutmut found reaching it. CI (`scripts/mutation.py
changed`) recomputes both and runs mutants only for the functions where either differs: the code changed
(a new mutant may survive) or a test that reached it changed or went away (an old mutant may now survive).
A test added elsewhere changes nothing here, and cannot make a killed mutant survive.

Fingerprints are of the syntax tree (`ast.dump`), so a comment, a blank line or a reformatting does not
count as a change; a changed docstring does (it is part of the tree), which costs one extra run at worst.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

# harness.agent.tree.xǁTreeǁrevert__mutmut_*   harness.experiments.plan.x_content_key__mutmut_*
_MUTANT_NAME = re.compile(r"^(?P<module>[\w.]+)\.x(?:ǁ(?P<cls>\w+)ǁ(?P<method>\w+)|_(?P<func>\w+))__mutmut_")


@dataclass(frozen=True, order=True)
class SafetyFunction:
    """One function of the safety core, as mutmut names its mutants."""

    module: str
    cls: str | None
    name: str

    @classmethod
    def from_pattern(cls, pattern: str) -> SafetyFunction:
        m = _MUTANT_NAME.match(pattern)
        if not m:
            raise ValueError(f"not a mutmut mutant pattern: {pattern!r}")
        if m.group("method"):
            return cls(m.group("module"), m.group("cls"), m.group("method"))
        return cls(m.group("module"), None, m.group("func"))

    @property
    def qualname(self) -> str:
        return ".".join(p for p in (self.module, self.cls, self.name) if p)

    @property
    def pattern(self) -> str:
        inner = f"ǁ{self.cls}ǁ{self.name}" if self.cls else f"_{self.name}"
        return f"{self.module}.x{inner}__mutmut_*"

    def source_file(self, root: Path) -> Path:
        return root.joinpath(*self.module.split(".")).with_suffix(".py")


def _find_def(tree: ast.Module, cls: str | None, name: str) -> ast.AST | None:
    body: list[ast.stmt] = tree.body
    if cls is not None:
        owner = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if owner is None:
            return None
        body = owner.body
    return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)


def _digest(node: ast.AST) -> str:
    return hashlib.sha256(ast.dump(node, include_attributes=False).encode()).hexdigest()[:16]


class _WhereFromLeftOut(ast.NodeTransformer):
    """A test's imports keep the names they bind, not the module path: a module moved to another package is
    the same test (the function under test is fingerprinted on its own)."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        return ast.ImportFrom(module=None, names=node.names, level=0)

    def visit_Import(self, node: ast.Import) -> ast.AST:
        return ast.Import(names=[ast.alias(name=a.name.rsplit(".", 1)[-1], asname=a.asname) for a in node.names])

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        body = getattr(node, "body", None)
        if isinstance(body, list):  # a run of imports re-sorted (isort after a move) is the same run
            out: list[ast.stmt] = []
            run: list[ast.stmt] = []
            for stmt in [*body, None]:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    run.append(stmt)
                    continue
                out += sorted(run, key=ast.dump)
                run = []
                if stmt is not None:
                    out.append(stmt)
            node.body = out  # type: ignore[attr-defined]
        return node


def function_fingerprint(root: Path, fn: SafetyFunction) -> str | None:
    """The function's syntax-tree fingerprint, or None when the file or the function is gone."""
    try:
        tree = ast.parse(fn.source_file(root).read_text())
    except (OSError, SyntaxError):
        return None
    node = _find_def(tree, fn.cls, fn.name)
    return None if node is None else _digest(node)


def test_fingerprint(root: Path, test_id: str) -> str | None:
    """A pytest node id's test function, fingerprinted (parameters stripped: one function, many ids); None
    when the test is gone."""
    path, _, rest = test_id.partition("::")
    parts = [re.sub(r"\[.*\]$", "", p) for p in rest.split("::") if p]
    if not parts:
        return None
    try:
        tree = ast.parse((root / path).read_text())
    except (OSError, SyntaxError):
        return None
    node = _find_def(tree, parts[0] if len(parts) > 1 else None, parts[-1])
    return None if node is None else _digest(_WhereFromLeftOut().visit(node))


def tests_fingerprint(root: Path, test_ids: list[str]) -> str:
    """One fingerprint over every test that reached a function (sorted ids, each with its own)."""
    h = hashlib.sha256()
    for tid in sorted(set(test_ids)):
        h.update(f"{tid}={test_fingerprint(root, tid)}\n".encode())
    return h.hexdigest()[:16]


@dataclass
class FunctionResult:
    """One safety function in the report: its fingerprints and what its mutants came to."""

    code: str | None
    tests: str
    test_ids: list[str]
    mutants: int
    killed: int
    equivalent: int
    checked: str  # when its mutants last ran (the full pass, or a `changed --write` after it)


@dataclass
class Report:
    """The last full mutation pass: when, on which commit, what it found, per function."""

    date: str
    commit: str
    minutes: float
    functions: dict[str, FunctionResult] = field(default_factory=dict)

    @property
    def mutants(self) -> int:
        return sum(f.mutants for f in self.functions.values())

    @property
    def killed(self) -> int:
        return sum(f.killed for f in self.functions.values())

    @property
    def equivalent(self) -> int:
        return sum(f.equivalent for f in self.functions.values())

    def to_json(self) -> str:
        doc = {"date": self.date, "commit": self.commit, "minutes": self.minutes,
               "mutants": self.mutants, "killed": self.killed, "equivalent": self.equivalent,
               "functions": {k: vars(v) for k, v in sorted(self.functions.items())}}
        return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Report:
        doc = json.loads(text)
        return cls(doc["date"], doc["commit"], float(doc["minutes"]),
                   {k: FunctionResult(**v) for k, v in doc["functions"].items()})

    def to_markdown(self) -> str:
        lines = ["# Mutation report: the safety core", "",
                 "Written by `python3 scripts/mutation.py full --write` (the full pass; docs/testing.md). CI runs",
                 "mutants only for the functions whose code, or a test that reaches them, changed since this report",
                 "(`scripts/mutation.py changed`). The data behind this page: `docs/mutation-report.json`.", "",
                 f"- the full pass: {self.date}, commit `{self.commit}`, {self.minutes:.1f} minutes",
                 f"- mutants: {self.mutants}, killed {self.killed}, survived {self.mutants - self.killed} "
                 f"(equivalent, each explained in docs/testing.md: {self.equivalent})", "",
                 "| function | mutants | killed | equivalent | tests reaching it | checked |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for name, f in sorted(self.functions.items()):
            lines.append(f"| `{name}` | {f.mutants} | {f.killed} | {f.equivalent} | {len(set(f.test_ids))} "
                         f"| {f.checked} |")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Change:
    function: SafetyFunction
    why: str


def changes_since(report: Report | None, functions: list[SafetyFunction], root: Path) -> list[Change]:
    """The safety functions whose mutants must run again, each with why."""
    out = []
    for fn in functions:
        code = function_fingerprint(root, fn)
        if code is None:
            raise LookupError(f"{fn.qualname} is in the safety core (scripts/mutation.py SAFETY_CORE) but not in "
                              f"{fn.source_file(root).relative_to(root)}: it moved or was renamed; update SAFETY_CORE")
        known = report.functions.get(fn.qualname) if report else None
        if known is None:
            out.append(Change(fn, "not in the report"))
        elif known.mutants == 0:
            out.append(Change(fn, "the report has no mutant of it (was its file in [tool.mutmut] only_mutate?)"))
        elif known.code != code:
            out.append(Change(fn, "its code changed"))
        elif known.tests != tests_fingerprint(root, known.test_ids):
            gone = [t for t in sorted(set(known.test_ids)) if test_fingerprint(root, t) is None]
            out.append(Change(fn, f"a test that reached it is gone ({gone[0]})" if gone
                              else "a test that reached it changed"))
    return out
