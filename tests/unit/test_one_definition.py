"""Things defined once. Types: the experiment's `timeouts:` take their names and defaults from the wire's Timeouts,
and the log reader's Verdict is the record's verdict, so neither pair can drift apart. Code (#46): one function
judges a cell against another, one writes a number, one module words a metric — read from the sources."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.common.protocol import Timeouts as WireTimeouts
from harness.experiments.config import Timeouts
from harness.results.schemas import Record
from harness.triage.classify import Verdict, triage_text


def test_the_yaml_timeouts_are_the_wire_timeouts_key_for_key_with_the_same_defaults():
    wire = {f.name: f.default for f in dataclasses.fields(WireTimeouts)}
    yaml = {name: info.default for name, info in Timeouts.model_fields.items()}
    assert list(yaml) == list(wire)
    assert yaml == wire
    assert WireTimeouts(**Timeouts().model_dump()) == WireTimeouts()  # the one conversion, spec.py's


def _record(verdict: dict[str, object] | Verdict) -> Record:
    return Record(run_id="r", experiment="e", attempt="01", host="h", status="crashed", verdict=verdict)


def test_a_triage_verdict_is_kept_by_the_record_with_every_field():
    v = triage_text("[2025-11-01 10:00:04 TP0] torch.OutOfMemoryError: CUDA out of memory.\n", exit_code=1)
    rec = _record(v.to_dict())
    assert rec.verdict == v
    assert list(json.loads(rec.to_json())["verdict"]) == ["verdict", "category", "key_line", "phase", "hint"]


def test_a_hang_verdict_has_no_verdict_key_in_the_record_as_before():
    hang = {"category": "hung", "key_line": "Memory pool end.", "phase": "kv-cache", "hint": "h"}
    written = json.loads(_record(hang).to_json())["verdict"]
    assert written == hang


def test_positional_and_named_construction_agree_and_unknown_keys_are_refused():
    assert Verdict("crash", "oom", "x", "load-weights", None) == Verdict(
        verdict="crash", category="oom", key_line="x", phase="load-weights", hint=None)
    with pytest.raises(ValidationError):
        Verdict(category="oom", surprise=1)
    with pytest.raises(ValidationError):
        Verdict(verdict="crash")  # a verdict always names its category


def test_a_verdicts_display_lines_are_shown_escaped():
    assert Verdict(category="hung", key_line="a\x1b]52;c;evil\x07b").key_line == "a\\x1b]52;c;evil\\x07b"


# ============================================================================ one comparison, one number format, one
# table of metric words (#46): the rules below read the sources, so a second copy fails here when it comes back.

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
SKIP_MUTANTS = pytest.mark.skipif("/mutants/" in __file__, reason="mutmut's rewritten copy of the sources")


def _modules() -> dict[str, ast.Module]:
    return {p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))
            if "sim/template" not in p.as_posix()}


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _called(fn: ast.AST) -> set[str]:
    return {c.func.id if isinstance(c.func, ast.Name) else c.func.attr for c in ast.walk(fn)
            if isinstance(c, ast.Call) and isinstance(c.func, (ast.Name, ast.Attribute))}


def comparisons(trees: dict[str, ast.Module]) -> set[str]:
    """'module:function' of each function that judges one set of samples against another: it calls the
    significance test or the ratio's interval, or sets a cell's verdict to one of the judged words."""
    verdicts = {"better", "worse", "same", "few", "drift"}
    found = set()
    for rel, tree in trees.items():
        if rel == "analysis/significance.py":
            continue
        for fn in _functions(tree):
            sets_verdict = any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                               and n.value.value in verdicts
                               and any(isinstance(t, ast.Attribute) and t.attr == "verdict" for t in n.targets)
                               for n in ast.walk(fn))
            if sets_verdict or _called(fn) & {"mann_whitney_p", "ratio_interval"}:
                found.add(f"{rel}:{fn.name}")
    return found


@SKIP_MUTANTS
def test_one_function_judges_a_cell_against_another():
    assert comparisons(_modules()) == {"analysis/compare.py:judge"}, (
        "a second comparison: call analysis.compare.judge (the table, night against night, the page, a bisect)")


def test_the_comparison_rule_sees_a_second_comparison():
    copy = ast.parse("def mine(a, b):\n    c.p_value = mann_whitney_p(a, b)\n"
                     "def other(c):\n    c.verdict = 'few'\n")
    assert comparisons({"analysis/nights.py": copy}) == {"analysis/nights.py:mine", "analysis/nights.py:other"}


def number_formatters(trees: dict[str, ast.Module]) -> set[str]:
    """'module:function' of each function that writes a number the tables' way: ',.1f' and '.3g' together."""
    found = set()
    for rel, tree in trees.items():
        for fn in _functions(tree):
            specs = {ast.unparse(n.format_spec) for n in ast.walk(fn)
                     if isinstance(n, ast.FormattedValue) and n.format_spec is not None}
            if {"f',.1f'", "f'.3g'"} <= specs:
                found.add(f"{rel}:{fn.name}")
    return found


@SKIP_MUTANTS
def test_one_number_format():
    assert number_formatters(_modules()) == {"analysis/units.py:number"}, "write numbers with analysis.units.number"


def test_the_number_rule_sees_a_second_formatter():
    copy = ast.parse('def _num(v):\n    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"\n')
    assert number_formatters({"analysis/outliers.py": copy}) == {"analysis/outliers.py:_num"}


METRIC_WORDS = {"lower_is_better", "metric_unit", "metric_label", "metric_title", "direction"}


def metric_wordings(trees: dict[str, ast.Module]) -> set[str]:
    """Where a metric's words are made outside analysis/units.py: a function of the table's names, a
    `"lower" if … else "higher"`, an f-string's ' (unit)' after a metric."""
    found = set()
    for rel, tree in trees.items():
        if rel == "analysis/units.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_") in METRIC_WORDS:
                found.add(f"{rel}:{node.lineno} def {node.name}")
            elif isinstance(node, ast.IfExp) and {ast.unparse(node.body), ast.unparse(node.orelse)} == {
                    "'lower'", "'higher'"}:
                found.add(f"{rel}:{node.lineno} lower/higher")
            elif isinstance(node, ast.JoinedStr) and "({unit})" in ast.unparse(node):
                found.add(f"{rel}:{node.lineno} (unit)")
    return found


@SKIP_MUTANTS
def test_one_table_of_metric_words():
    assert metric_wordings(_modules()) == set(), "name metrics with analysis.units (unit, direction, label, title)"


def test_the_metric_rule_sees_a_second_table():
    copy = ast.parse("def metric_label(m):\n    return m\n"
                     "better = 'lower' if lower else 'higher'\n"
                     "t = f\"{metric}{f' ({unit})' if unit else ''}\"\n")
    assert metric_wordings({"analysis/nights.py": copy}) == {
        "analysis/nights.py:1 def metric_label", "analysis/nights.py:3 lower/higher", "analysis/nights.py:4 (unit)"}


# Functions with one home: a second `def` of the name anywhere in harness/ (the agent's side included) is a copy.
ONE_HOME = {
    "connectable_host": "common/hostaddr.py",  # the agent and the controller both import it from common/
    "redact_env": "masking.py", "secret_values": "masking.py",
    "judge": "analysis/compare.py", "interval_text": "analysis/compare.py", "number": "analysis/units.py",
    **{name: "analysis/units.py" for name in METRIC_WORDS},
    "load_yaml": "experiments/yamlsrc.py",
}
# Where a YAML file is read: the files a command is given at the door, and a patch set's patchset.yaml.
YAML_READERS = {"experiments/files.py", "experiments/patchsets.py", "experiments/yamlsrc.py"}


def homeless(trees: dict[str, ast.Module]) -> set[str]:
    """'module:name' of each definition of a ONE_HOME name outside its home, and each YAML read outside
    YAML_READERS."""
    found = set()
    for rel, tree in trees.items():
        for fn in _functions(tree):
            if fn.name in ONE_HOME and ONE_HOME[fn.name] != rel:
                found.add(f"{rel}:{fn.name}")
        if rel not in YAML_READERS and "load_yaml" in _called(tree):
            found.add(f"{rel}:load_yaml()")
    return found


@SKIP_MUTANTS
def test_each_shared_function_has_one_home():
    trees = _modules()
    assert {home for home in ONE_HOME.values()} <= set(trees)
    assert homeless(trees) == set(), "import the one definition (common/ for what the agent needs too)"


def test_the_home_rule_sees_a_copy_and_a_second_door():
    copy = ast.parse('def connectable_host(host):\n    return host\nexp = load_yaml(path)\n')
    assert homeless({"agent/hostio.py": copy}) == {"agent/hostio.py:connectable_host", "agent/hostio.py:load_yaml()"}
