"""tests/support/ordering.py: the longest tests go first (the shortest, in a run that stops at its first failure),
tests of one xdist_group move together, and a test the durations file does not know is not taken for a quick one
in a slow module."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.support import ordering


@dataclass
class FakeMark:
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


@dataclass
class FakeItem:
    nodeid: str
    group: str | None = None

    def get_closest_marker(self, name):
        return FakeMark((self.group,)) if name == "xdist_group" and self.group else None


@dataclass
class FakeConfig:
    maxfail: int = 0  # pytest's default: no limit

    def getoption(self, name):
        return getattr(self, name)


def test_unknown_tests_count_as_their_modules_longest_known_one():
    known = {"tests/integration/test_a.py::slow": 40.0, "tests/integration/test_a.py::quick": 0.5,
             "tests/unit/test_b.py::t": 0.01}
    got = ordering.expected_seconds(["tests/integration/test_a.py::new", "tests/unit/test_b.py::new",
                                     "tests/unit/test_c.py::new", "tests/integration/test_a.py::quick"], known)
    assert got == {"tests/integration/test_a.py::new": 40.0, "tests/unit/test_b.py::new": 0.01,
                   "tests/unit/test_c.py::new": 0.0, "tests/integration/test_a.py::quick": 0.5}


def test_heaviest_first_groups_together_ties_in_collection_order(monkeypatch):
    known = {"m.py::a": 1.0, "m.py::b": 30.0, "m.py::c": 1.0, "d.py::x": 20.0, "d.py::y": 15.0, "u.py::q": 0.1,
             "u.py::r": 0.1}
    monkeypatch.setattr(ordering, "load_durations", lambda: known)
    items = [FakeItem("m.py::a"), FakeItem("m.py::b"), FakeItem("d.py::x", "demo"), FakeItem("u.py::q"),
             FakeItem("m.py::c"), FakeItem("d.py::y", "demo"), FakeItem("u.py::r")]
    ordering.pytest_collection_modifyitems(None, FakeConfig(), items)
    # The demo group (35 s in all) before the 30 s test; its two tests side by side, in their own order.
    assert [i.nodeid for i in items] == ["d.py::x", "d.py::y", "m.py::b", "m.py::a", "m.py::c", "u.py::q", "u.py::r"]


def test_a_run_that_stops_at_its_first_failure_takes_the_quickest_first(monkeypatch):
    """`-x` (mutmut runs each mutant's tests so): the first failure ends the run, so the cheap tests go first."""
    known = {"m.py::a": 1.0, "m.py::b": 30.0, "d.py::x": 20.0, "d.py::y": 15.0, "u.py::q": 0.1}
    monkeypatch.setattr(ordering, "load_durations", lambda: known)
    items = [FakeItem("m.py::a"), FakeItem("m.py::b"), FakeItem("d.py::x", "demo"), FakeItem("u.py::q"),
             FakeItem("d.py::y", "demo")]
    ordering.pytest_collection_modifyitems(None, FakeConfig(maxfail=1), items)
    assert [i.nodeid for i in items] == ["u.py::q", "m.py::a", "m.py::b", "d.py::x", "d.py::y"]


def test_the_committed_durations_file_is_read():
    """An absent or broken file would quietly turn the ordering off (every test 0 s)."""
    known = ordering.load_durations()
    assert len(known) > 500
    assert all(n.startswith("tests/") and "::" in n and s >= 0 for n, s in known.items())
