#!/usr/bin/env python3
"""Where the test suite's time goes: per directory, per module, and the costliest fixture set-ups.

Runs the suite serially in this process (so each test's seconds are its own, not its neighbours' load) and
prints markdown tables (docs/testing.md quotes them), or reads the output of an earlier `pytest -p no:xdist
--durations=0` run:

    python3 benchmarks/suite_time.py [PYTEST ARGS]       # the whole suite: about 13 minutes on two cores
    python3 benchmarks/suite_time.py --from pytest.log   # wall time only

Every phase counts: `setup` is the fixtures a test asked for (a session fixture's cost lands on the first
test that used it), `call` the test itself, `teardown` the fixtures' clean-up. `CPU s` is the machine's busy
CPU time while the test ran (/proc/stat, every process: the servers, agents and clients a test starts
included), which bounds what running tests in parallel can gain: on N cores a run takes at least the suite's
CPU seconds / N.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)")


def parse(text: str) -> list[tuple[float, str, str]]:
    """(seconds, phase, node id) of every line of pytest's durations table."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            out.append((float(m.group(1)), m.group(2), m.group(3).split("@", 1)[0]))
    return out


def table(rows: list[tuple[str, ...]], head: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def summarise(entries: list[tuple[float, str, str]], cpu: dict[str, float] | None = None, top: int = 12) -> str:
    cpu = cpu or {}
    by_dir: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_module: dict[str, float] = defaultdict(float)
    tests: dict[str, set[str]] = defaultdict(set)
    for secs, phase, nodeid in entries:
        path = nodeid.split("::", 1)[0]
        directory = "/".join(path.split("/")[:2])
        by_dir[directory][phase] += secs
        by_module[path] += secs
        tests[directory].add(nodeid)
    for nodeid, secs in cpu.items():
        by_dir["/".join(nodeid.split("::", 1)[0].split("/")[:2])]["cpu"] += secs
    total = sum(s for s, _, _ in entries)
    dirs = sorted(by_dir.items(), key=lambda kv: -sum(kv[1][p] for p in ("setup", "call", "teardown")))
    head = ("directory", "tests", "s", "setup s", "call s", "teardown s", "share") + (("CPU s",) if cpu else ())
    rows = []
    for d, p in dirs:
        wall = p["setup"] + p["call"] + p["teardown"]
        rows.append((d, str(len(tests[d])), f"{wall:.0f}", f"{p['setup']:.0f}", f"{p['call']:.0f}",
                     f"{p['teardown']:.0f}", f"{100 * wall / total:.0f} %") + ((f"{p['cpu']:.0f}",) if cpu else ()))
    cpu_note = f", {sum(cpu.values()):.0f} s of CPU" if cpu else ""
    out = [f"Total: {total:.0f} s over {sum(len(v) for v in tests.values())} tests{cpu_note}.", "",
           table(rows, head), "",
           table([(f"`{m}`", f"{s:.0f}") for m, s in sorted(by_module.items(), key=lambda kv: -kv[1])[:top]],
                 ("module", "s")), "",
           table([(f"`{n}`", f"{s:.1f}") for s, p, n in sorted(entries, reverse=True) if p == "setup"][:top],
                 ("set-up (the fixtures of)", "s")), "",
           table([(f"`{n}`", f"{s:.1f}") + ((f"{cpu.get(n, 0):.1f}",) if cpu else ())
                  for s, p, n in sorted(entries, reverse=True) if p == "call"][:top],
                 ("test", "s") + (("CPU s",) if cpu else ()))]
    return "\n".join(out)


def busy_cpu_s() -> float:
    """Seconds of CPU the whole machine has been busy since boot (user, nice, system, irq, softirq, steal)."""
    import os

    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


class Recorder:
    """A pytest plugin: each test's phases (seconds) and the machine's CPU while it ran."""

    def __init__(self) -> None:
        self.entries: list[tuple[float, str, str]] = []
        self.cpu: dict[str, float] = {}

    def pytest_runtest_protocol(self, item, nextitem):
        self._cpu0 = busy_cpu_s()

    def pytest_runtest_logreport(self, report) -> None:
        self.entries.append((report.duration, report.when, report.nodeid))
        if report.when == "teardown":
            self.cpu[report.nodeid] = busy_cpu_s() - self._cpu0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="log", type=Path, help="read this pytest log instead of running the suite")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (a directory, -k ...)")
    args = ap.parse_args()
    cpu = None
    if args.log:
        entries = parse(args.log.read_text(errors="replace"))
    else:
        import os

        import pytest

        os.chdir(ROOT)
        sys.path.insert(0, str(ROOT))
        rec = Recorder()
        rc = pytest.main(["-p", "no:xdist", "-p", "no:cacheprovider", "-q", *args.pytest_args], plugins=[rec])
        print(f"pytest exit code {rc}", file=sys.stderr)
        entries, cpu = rec.entries, rec.cpu
    if not entries:
        print("no durations found: run pytest with --durations=0", file=sys.stderr)
        return 1
    print(summarise(entries, cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
