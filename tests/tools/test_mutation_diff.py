"""scripts/mutation_diff.py: CI runs mutants only for safety functions whose code, or a test reaching them,
changed since the committed report. These tests build a tiny project (a module and its tests) and change it
the ways a developer does."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutation_diff", PROJECT / "scripts" / "mutation_diff.py")
md = importlib.util.module_from_spec(_spec)
sys.modules["mutation_diff"] = md  # dataclasses look their module up there
_spec.loader.exec_module(md)

SOURCE = '''
def guard(x):
    """Refuse negatives."""
    if x < 0:  # the promise
        raise ValueError(x)
    return x


class Tree:
    def revert(self, journal):
        return journal["tree_before"] == journal["tree_after"]
'''
TESTS = '''
def test_guard_refuses_negatives():
    assert guard(1) == 1


def test_revert_verifies():
    assert Tree().revert({"tree_before": 1, "tree_after": 1})
'''
GUARD = md.SafetyFunction.from_pattern("pkg.core.x_guard__mutmut_*")
REVERT = md.SafetyFunction.from_pattern("pkg.core.xǁTreeǁrevert__mutmut_*")


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "core.py").write_text(SOURCE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_core.py").write_text(TESTS)
    return tmp_path


def report_of(root: Path) -> md.Report:
    """The report a full pass would write now: guard reached by its test (two parametrized ids), revert by
    its own."""
    tests = {GUARD: ["tests/test_core.py::test_guard_refuses_negatives[a]",
                     "tests/test_core.py::test_guard_refuses_negatives[b]"],
             REVERT: ["tests/test_core.py::test_revert_verifies"]}
    return md.Report("2026-12-01 00:00 UTC", "abc", 1.0, {
        fn.qualname: md.FunctionResult(md.function_fingerprint(root, fn), md.tests_fingerprint(root, ids), ids,
                                       10, 9, 1, "2026-12-01 00:00 UTC") for fn, ids in tests.items()})


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_mutmut_names_map_to_functions_and_back():
    assert (GUARD.module, GUARD.cls, GUARD.name, GUARD.qualname) == ("pkg.core", None, "guard", "pkg.core.guard")
    assert (REVERT.cls, REVERT.name, REVERT.qualname) == ("Tree", "revert", "pkg.core.Tree.revert")
    assert REVERT.pattern == "pkg.core.xǁTreeǁrevert__mutmut_*" and GUARD.pattern == "pkg.core.x_guard__mutmut_*"
    assert md.SafetyFunction.from_pattern("harness.analysis.compare.x__apply_baseline__mutmut_*").name == "_apply_baseline"
    with pytest.raises(ValueError):
        md.SafetyFunction.from_pattern("harness.analysis.compare.apply_baseline")


def test_nothing_changed_nothing_to_run(project):
    assert md.changes_since(report_of(project), [GUARD, REVERT], project) == []


def test_a_comment_or_reformatting_is_not_a_change(project):
    report = report_of(project)
    edit(project / "pkg" / "core.py", "    if x < 0:  # the promise\n", "    # why: see the docs\n    if (x < 0):\n")
    assert md.changes_since(report, [GUARD, REVERT], project) == []


def test_a_changed_function_and_only_it_runs_again(project):
    report = report_of(project)
    edit(project / "pkg" / "core.py", "if x < 0:", "if x <= 0:")
    assert [(c.function, c.why) for c in md.changes_since(report, [GUARD, REVERT], project)] == \
        [(GUARD, "its code changed")]


def test_a_changed_or_deleted_test_that_reached_a_function_runs_it_again(project):
    report = report_of(project)
    edit(project / "tests" / "test_core.py", "assert guard(1) == 1", "assert guard(1)")  # a weaker test
    assert [(c.function, c.why) for c in md.changes_since(report, [GUARD, REVERT], project)] == \
        [(GUARD, "a test that reached it changed")]
    edit(project / "tests" / "test_core.py", "def test_revert_verifies", "def xtest_revert_verifies")
    why = {c.function: c.why for c in md.changes_since(report, [GUARD, REVERT], project)}
    assert why[REVERT] == "a test that reached it is gone (tests/test_core.py::test_revert_verifies)"


def test_a_module_moved_under_a_tests_import_is_not_a_change_but_another_name_is(project):
    path = project / "tests" / "test_core.py"
    edit(path, "def test_revert_verifies():\n", "def test_revert_verifies():\n    from pkg.core import Tree\n"
         "    import pkg.core as core_module\n")
    report = report_of(project)
    edit(path, "from pkg.core import Tree", "from pkg.stages.core import Tree")  # the package reorganised
    edit(path, "import pkg.core as core_module", "import pkg.stages.core as core_module")
    assert md.changes_since(report, [GUARD, REVERT], project) == []
    edit(path, "from pkg.stages.core import Tree", "from pkg.stages.core import Tree as OtherTree\n    Tree = 1")
    assert [(c.function, c.why) for c in md.changes_since(report, [GUARD, REVERT], project)] == \
        [(REVERT, "a test that reached it changed")]


def test_a_new_test_elsewhere_changes_nothing(project):
    report = report_of(project)
    (project / "tests" / "test_core.py").write_text(TESTS + "\n\ndef test_more():\n    assert guard(2) == 2\n")
    assert md.changes_since(report, [GUARD, REVERT], project) == []


def test_a_function_new_to_the_safety_core_runs_and_a_vanished_one_is_an_error(project):
    report = report_of(project)
    del report.functions[REVERT.qualname]
    assert [c.why for c in md.changes_since(report, [GUARD, REVERT], project)] == ["not in the report"]
    edit(project / "pkg" / "core.py", "def revert(", "def undo(")
    with pytest.raises(LookupError, match="pkg.core.Tree.revert is in the safety core"):
        md.changes_since(report, [GUARD, REVERT], project)


def test_the_report_round_trips_and_its_page_names_every_function(project):
    report = report_of(project)
    again = md.Report.from_json(report.to_json())
    assert again == report and (again.mutants, again.killed, again.equivalent) == (20, 18, 2)
    page = report.to_markdown()
    assert "| `pkg.core.guard` | 10 | 9 | 1 | 2 | 2026-12-01 00:00 UTC |" in page
    assert "| `pkg.core.Tree.revert` | 10 | 9 | 1 | 1 |" in page and "commit `abc`" in page


def test_the_committed_report_covers_the_safety_core_as_the_code_is_now():
    """What CI relies on: the committed report exists, parses, and names every safety function; whether it
    is up to date is `scripts/mutation.py changed`'s call (it runs what is not)."""
    spec = importlib.util.spec_from_file_location("mutation_script", PROJECT / "scripts" / "mutation.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules["mutation_script"] = script
    spec.loader.exec_module(script)  # imports mutation_diff: registered above
    report = md.Report.from_json((PROJECT / "docs" / "mutation-report.json").read_text())
    assert {fn.qualname for fn in script.safety_functions()} <= set(report.functions)
    assert report.to_markdown() == (PROJECT / "docs" / "mutation-report.md").read_text()


def test_a_function_the_report_has_no_mutant_of_runs_again(project):
    """A report row with no mutant (its file was not given to mutmut) checked nothing: it is no reason to skip."""
    report = report_of(project)
    row = report.functions[REVERT.qualname]
    report.functions[REVERT.qualname] = dataclasses.replace(row, mutants=0, killed=0, equivalent=0)
    assert [(c.function, c.why.split(" (")[0]) for c in md.changes_since(report, [GUARD, REVERT], project)] == \
        [(REVERT, "the report has no mutant of it")]
