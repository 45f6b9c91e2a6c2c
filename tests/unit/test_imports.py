"""The package forms layers: no import cycle anywhere, the agent included (lazy imports inside functions count
too); the pure modules never import the ones that touch hosts, results or the console; the agent and `common`
import nothing of the controller (they ship alone, standard library only)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

# mutmut rewrites the sources it mutates (trampolines, longer modules): the rules are about ours.
pytestmark = pytest.mark.skipif("/mutants/" in __file__, reason="mutmut's rewritten copy of the sources")
PACKAGE = Path(__file__).resolve().parents[2] / "harness"
# The simulated target's template is SGLang's stand-in, not harness code.
SKIP = ("sim.template",)
PURE = ("experiments.backends", "experiments.commands", "results.metrics", "experiments.spec", "triage.classify",
        "triage.signatures", "triage.hints", "errors", "run.resume", "hosts.gpus", "results.schemas", "hosts.slurm",
        "experiments.configerrors", "common.protocol", "common.patchpaths", "render.svgdraw")
EDGE_PACKAGES = ("cli",)
EDGE = {"run.runner", "run.scheduler", "hosts.transport", "hosts.local", "hosts.ssh", "hosts.direct",
        "hosts.jsonlines", "hosts.slurmjob", "hosts.targets", "run.recording",
        "results.store", "analysis.compare", "render.plots"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or "__init__"


def _resolve(current: str, is_package: bool, level: int, module: str | None) -> str:
    """`from ..x import` in module `current` → the dotted name below harness/ it names."""
    base = current.split(".") if current != "__init__" else []
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else [])) or "__init__"


def import_graph() -> dict[str, set[str]]:
    """Module → the harness modules it imports, anywhere in the file (names below harness/, dotted)."""
    modules = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
               if not any(module_name(p).startswith(s) for s in SKIP)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                target = _resolve(name, is_package, node.level, node.module)
            elif (node.module or "").startswith("harness."):
                target = node.module[len("harness."):]
            else:
                continue
            # `from . import views` names a module; `from .. import __version__` the package
            named = [f"{target}.{a.name}" if target != "__init__" else a.name for a in node.names]
            subs = [m for m in named if m in modules]
            deps.update(subs or [target])
        graph[name] = deps - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_the_agent_included():
    graph = import_graph()
    assert any(m.startswith("agent.") for m in graph)
    assert find_cycle(graph) is None


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_pure_modules_do_not_import_upward():
    graph = import_graph()
    for name in PURE:
        edge = {d for d in graph[name] if d in EDGE or d.split(".")[0] in EDGE_PACKAGES}
        assert not edge, f"{name} imports {sorted(edge)}"


def test_the_agent_and_common_import_only_themselves_and_the_standard_library():
    graph = import_graph()
    for name, deps in graph.items():
        if name.split(".")[0] == "common":
            assert all(d.startswith("common.") for d in deps), f"{name} imports {sorted(deps)}"
        if name.split(".")[0] == "agent":
            assert all(d.split(".")[0] in ("agent", "common") for d in deps), f"{name} imports {sorted(deps)}"
    for path in [*(PACKAGE / "agent").glob("*.py"), *(PACKAGE / "common").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module
                     else [])
            for mod in names:
                assert mod.split(".")[0] in sys.stdlib_module_names, f"{path.name} imports {mod}"


def test_masking_sits_below_what_it_masks():
    """Every part that keeps text (the store, the runner, the page, the export) masks it: masking itself imports
    only the protocol (and the secret-name rule lives in it, not in the store)."""
    deps = import_graph()["masking"]
    assert all(d.startswith("common.") for d in deps), f"masking imports {sorted(deps)}"


def test_the_controller_does_not_reach_into_the_agent():
    graph = import_graph()
    for name, deps in graph.items():
        if name.split(".")[0] not in ("agent", "sim") and name != "hosts.shipping":
            assert not any(d.startswith("agent.") for d in deps), f"{name} imports {sorted(deps)}"


if __name__ == "__main__":  # python tests/unit/test_imports.py: the graph, one module a line
    for mod, deps in sorted(import_graph().items()):
        print(f"{mod:24} -> {', '.join(sorted(deps)) or '-'}")
