"""The bench stage with every client run in one process of the target's Python (bench_driver.py).

Same events, files and failures as a process per run (bench.py), warm-ups included: BenchStarted when a
measured run starts, BenchResult with the line it added to its --output-file, the case's log, "exited N" /
"wrote no result line" / "did not finish within" for a failed run; the server is watched all along, so a
crash is reported as the crash it is. No cool-downs: the driver runs its clients back to back.
"""

from __future__ import annotations

import json
import os
import pkgutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional, Protocol

from ..common.protocol import BenchCase, Spec, Status
from .errors import StageFailed
from .hostio import read_jsonl, read_tail
from .link import Link
from .procs import TICK_S, kill_group
from .server import Server

DRIVER = "bench_driver.py"


def one_process_form(cases: Sequence[BenchCase]) -> bool:
    """Every case's client is `<python> -m <module> …`, all with the same Python: the driver can run them."""
    pythons = {str(c.argv[0]) for c in cases if c.argv}
    return len(pythons) == 1 and all(len(c.argv) >= 3 and c.argv[1] == "-m" and isinstance(c.argv[2], str)
                                     for c in cases)


class Load(Protocol):
    """What the one process needs of bench.Load (named here: bench imports this module)."""

    spec: Spec
    link: Link
    server: Server
    attempt_dir: str
    check_abort: Callable[[], None]

    def spawn_client(self, argv: list[str], log_path: str, stdin_pipe: bool = False) -> subprocess.Popen[bytes]: ...
    def mark_prefill(self) -> None: ...
    def run_argv(self, case: BenchCase, rep: int) -> list[str]: ...
    def log_of(self, case: BenchCase, rep: int = 0) -> str: ...
    def output_of(self, case: BenchCase, rep: int = 0) -> str: ...
    def started(self, case: BenchCase, rep: int) -> None: ...
    def result_of(self, case: BenchCase, rep: int, returncode: int, new: Optional[dict[str, Any]]) -> None: ...
    def too_long(self, name: str) -> StageFailed: ...


class OneProcess:
    def __init__(self, load: Load, runs: list[tuple[BenchCase, int]]) -> None:
        self.load = load
        self.runs = runs
        folder = load.attempt_dir
        self.driver = os.path.join(folder, DRIVER)
        self.status = os.path.join(folder, "bench-driver.status.jsonl")
        self.plan = os.path.join(folder, "bench-driver.plan.json")
        self.log = os.path.join(folder, "bench-driver.log")

    def _write_plan(self) -> list[str]:
        source = pkgutil.get_data(__package__ or "harness.agent", DRIVER)
        if source is None:
            raise StageFailed(Status.BENCH_FAILED, "the agent carries no %s" % DRIVER)
        with open(self.driver, "wb") as f:
            f.write(source)
        open(self.status, "w").close()
        runs = [{"module": str(case.argv[2]), "log": self.load.log_of(case, rep),
                 "output": self.load.output_of(case, rep),
                 "args": self.load.run_argv(case, rep)[3:] + ["--output-file", self.load.output_of(case, rep)]}
                for case, rep in self.runs]
        with open(self.plan, "w") as f:
            json.dump({"status": self.status, "runs": runs}, f)
        return [str(self.runs[0][0].argv[0]), self.driver, self.plan]

    def run(self) -> None:
        self.load.mark_prefill()
        proc = self.load.spawn_client(self._write_plan(), self.log, stdin_pipe=True)
        try:
            self._follow(proc)
        finally:
            if proc.poll() is None:
                kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        self.load.server.watch("serving")

    @staticmethod
    def _go(proc: subprocess.Popen[bytes]) -> None:
        """Let the driver start its next run: it waits for this line, so what the server logs from here on is
        that run's (the prefix-cache counts of each run stay apart)."""
        try:
            if proc.stdin is not None:
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
        except OSError:  # the driver is gone: its exit is noticed by the loop
            pass

    def _follow(self, proc: subprocess.Popen[bytes]) -> None:
        load, seen, ended = self.load, 0, 0
        current: Optional[tuple[BenchCase, int]] = None
        deadline: Optional[float] = None
        while True:
            exited = proc.poll() is not None  # before reading: an exit's last events are then in the file
            for event in read_jsonl(self.status)[seen:]:
                seen += 1
                case, rep = self.runs[int(event["index"])]
                if event.get("event") == "start":
                    load.started(case, rep)
                    current, deadline = (case, rep), time.monotonic() + float(load.spec.timeouts.bench)
                else:
                    load.server.watch("serving")  # a server crash explains a failed client better
                    current, deadline = None, None
                    result: Any = event.get("result")
                    load.result_of(case, rep, int(event.get("rc", 1)), result if isinstance(result, dict) else None)
                    ended += 1
                    load.mark_prefill()
                    self._go(proc)
            if ended == len(self.runs):
                return
            if exited:
                load.server.watch("serving")
                name = current[0].name if current else self.runs[ended][0].name
                tail = read_tail(self.log, 1500) + (read_tail(load.log_of(*current), 1500) if current else "")
                raise StageFailed(Status.BENCH_FAILED, "the benchmark clients' process exited %s before case %s "
                                  "ended:\n%s" % (proc.returncode, name, tail))
            load.check_abort()
            load.server.watch("serving")
            if deadline is not None and current is not None and time.monotonic() > deadline:
                raise load.too_long(current[0].name)
            load.link.wake.wait(TICK_S)
            load.link.wake.clear()
