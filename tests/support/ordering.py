"""Longest tests first, so a parallel run (pytest-xdist, `scripts/test`) does not end waiting on one long test
that happened to start last; shortest first in a run that stops at its first failure (`-x`, as mutmut runs each
mutant's tests): a mutant is killed by the first test that fails, so the cheap ones go first.

The expected seconds of each test come from `tests/durations.json`, measured by a whole run:

    scripts/test --write-durations tests/durations.json

A test the file does not know yet counts as its module's longest known test (a new integration test is
probably slow), or as 0 s in a module the file has never seen. Tests of one `xdist_group` (which a parallel
run gives to one worker, e.g. the tests that share the one `harness demo`) move together. The order changes
nothing else: each test sets up its own state.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--write-durations", metavar="PATH", default=None,
                     help="write each test's seconds (setup + call + teardown) here as JSON, for the ordering")


def expected_seconds(nodeids: list[str], known: dict[str, float]) -> dict[str, float]:
    """Each test's expected seconds: measured, else its module's longest measured test, else 0."""
    by_module: dict[str, float] = {}
    for nodeid, secs in known.items():
        module = nodeid.split("::", 1)[0]
        by_module[module] = max(by_module.get(module, 0.0), secs)
    return {n: known.get(n, by_module.get(n.split("::", 1)[0], 0.0)) for n in nodeids}


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def _group(item: pytest.Item) -> str:
    """The unit a parallel run hands to one worker: the test's `xdist_group`, or the test alone."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return item.nodeid
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    expected = expected_seconds([i.nodeid for i in items], load_durations())
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(_group(item), []).append(item)
    # Heaviest unit first (lightest first when the run stops at its first failure); stable, so equal estimates
    # keep the collection order (a module's quick tests stay together, its module-scoped fixtures set up once).
    sign = 1 if config.getoption("maxfail") == 1 else -1
    ordered = sorted(units.values(), key=lambda unit: sign * sum(expected[i.nodeid] for i in unit))
    items[:] = [item for unit in ordered for item in unit]


class _DurationWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # On the xdist controller too: the workers' reports arrive here.
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        rounded = {k: round(v, 2) for k, v in sorted(self.seconds.items())}
        self.path.write_text(json.dumps(rounded, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    # Without xdist (`-p no:xdist`, a serial profile) the mark is still ours to read: declare it.
    config.addinivalue_line("markers", "xdist_group(name): tests that share a session fixture run on one worker")
    path = config.getoption("--write-durations")
    if path and not hasattr(config, "workerinput"):  # the controller (or a serial run) writes; workers do not
        config.pluginmanager.register(_DurationWriter(Path(path)), "harness-durations")
