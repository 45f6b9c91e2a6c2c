"""One table of exit codes (`harness.errors.ExitCode`): every command exits through it, and README lists it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness.errors import ConfigError, ExitCode, HarnessError, HostError, Interrupted

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "harness" / "cli"


def literal_exits(source: str, name: str) -> list[str]:
    """`name:line` of every `typer.Exit(...)`, `sys.exit(...)` or `SystemExit(...)` given a number, not a name."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.Call):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if called in ("Exit", "exit", "SystemExit") and node.args and isinstance(node.args[0], ast.Constant):
            found.append(f"{name}:{node.lineno}")
    return found


def test_the_cli_exits_with_a_named_code_never_a_literal():
    literals = [hit for path in sorted(CLI.glob("*.py")) for hit in literal_exits(path.read_text(), path.name)]
    assert not literals, f"exit with ExitCode.<name>, not a number: {literals}"


def test_the_scan_finds_a_number_and_passes_a_name():
    planted = "import sys, typer\nraise typer.Exit(3)\nraise typer.Exit(ExitCode.HOST)\nsys.exit(2)\n"
    assert literal_exits(planted, "x.py") == ["x.py:2", "x.py:4"]


def test_readme_lists_every_exit_code():
    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("Exit codes"):].split("\n\n", 1)[0]
    listed = {int(n) for n in re.findall(r"`(\d+)`", paragraph)}
    assert {int(c) for c in ExitCode} <= listed, f"README's exit codes miss {sorted(set(ExitCode) - listed)}"


def test_each_error_kind_exits_with_its_code():
    assert HarnessError("x").exit_code == ExitCode.FAILED == 1
    assert ConfigError("x").exit_code == ExitCode.CONFIG == 2
    assert HostError("h", "x").exit_code == ExitCode.HOST == 3
    assert Interrupted("x").exit_code == ExitCode.INTERRUPTED == 130
