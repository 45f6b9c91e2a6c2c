"""The controller's modules form layers: no import cycle (lazy imports inside functions count too), and
the pure modules never import the ones that touch hosts, results or the console."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
# Not controller modules: the agent runs on the host (stdlib only), the simulated target is SGLang's stand-in.
SKIP = ("agent", "sim")
PURE = ("backends", "commands", "metrics", "spec", "triage", "triage_signatures", "triage_hints", "errors", "resume",
        "hostgpus", "schemas", "slurm", "configerrors")
EDGE = {"cli", "cli_common", "cli_compare", "cli_hosts", "cli_inspect", "cli_patch", "cli_run", "cli_sim", "runner",
        "scheduler", "transport", "slurmjob", "targets", "recording", "results", "report", "reportplot", "progress"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or "__init__"


def import_graph() -> dict[str, set[str]]:
    """Module → the harness modules it imports, anywhere in the file (`harness.x.y` counted as `x`)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name.split(".")[0] in SKIP:
            continue
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:  # `from . import agent` names a module; `from . import __version__` the package
                    deps.update(a.name if (PACKAGE / f"{a.name}.py").exists() or (PACKAGE / a.name).is_dir()
                                else "__init__" for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness."):
                deps.add(node.module.split(".")[1])
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


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_pure_modules_do_not_import_upward():
    graph = import_graph()
    for name in PURE:
        assert not graph[name] & EDGE, f"{name} imports {sorted(graph[name] & EDGE)}"


if __name__ == "__main__":  # python tests/unit/test_imports.py: the graph, one module a line
    for mod, deps in sorted(import_graph().items()):
        print(f"{mod:12} -> {', '.join(sorted(deps)) or '-'}")
