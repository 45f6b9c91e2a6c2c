"""Load against the running server: SGLang's own benchmark clients (the profile stage is `profiling`).

Clients run while the server is still watched, so a server crash mid-benchmark is reported as the
crash it is, not as a failed client.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any, Optional

from ..common.protocol import BenchCase, BenchResult, BenchStarted, Final, Spec, Status
from .errors import StageFailed
from .hostio import fill_slots, read_jsonl, read_tail
from .link import Link
from .oneprocess import OneProcess, one_process_form
from .procs import STARTED, TICK_S, kill_group
from .server import Server


class Load:
    def __init__(self, spec: Spec, link: Link, server: Server, attempt_dir: str, env: dict[str, str],
                 check_abort: Callable[[], None], facts: Final) -> None:
        self.spec = spec
        self.link = link
        self.server = server
        self.attempt_dir = attempt_dir
        self.env = env
        self.check_abort = check_abort
        self.facts = facts
        self.bench_files: dict[str, str] = {}

    def bench(self) -> float:
        """Every case, `repeats` times; returns the seconds it took."""
        t0 = time.monotonic()
        for case in self.spec.bench:
            self.bench_files[case.name] = self.output_of(case)
        self.facts.bench.files = self.bench_files  # fetched back even when a case fails
        runs = [(case, rep) for case in self.spec.bench for rep in range(int(case.repeats))]
        if self.spec.bench_one_process and runs and one_process_form(self.spec.bench):
            OneProcess(self, runs).run()
        else:
            for case, rep in runs:
                self._run_case(case, rep, self.output_of(case))
        return round(time.monotonic() - t0, 4)

    def output_of(self, case: BenchCase) -> str:
        return os.path.join(self.attempt_dir, "bench-%s.jsonl" % case.name)

    def log_of(self, case: BenchCase) -> str:
        return os.path.join(self.attempt_dir, "bench-%s.log" % case.name)

    def result_of(self, case: BenchCase, rep: int, returncode: int, new: Optional[dict[str, Any]]) -> None:
        """A run's end, whichever way it ran: its result sent on, or the case's failure raised."""
        if returncode != 0:
            raise StageFailed(Status.BENCH_FAILED, "benchmark case %s exited %s:\n%s"
                              % (case.name, returncode, read_tail(self.log_of(case), 3000)))
        if new is None:
            raise StageFailed(Status.BENCH_FAILED, "benchmark case %s wrote no result line to its --output-file:\n%s"
                              % (case.name, read_tail(self.log_of(case), 3000)))
        self.link.send(BenchResult(case=case.name, repeat=rep, result=new))

    def too_long(self, name: str) -> StageFailed:
        return StageFailed(Status.BENCH_FAILED, "benchmark case %s did not finish within %ss"
                           % (name, self.spec.timeouts.bench))

    def _run_case(self, case: BenchCase, rep: int, out: str) -> None:
        argv = fill_slots(case.argv, self.spec.server.port) + ["--output-file", out]
        self.link.send(BenchStarted(case=case.name, repeat=rep))
        lines_before = len(read_jsonl(out))
        returncode = self.run_client(case.name, argv, self.log_of(case))
        new = read_jsonl(out)[lines_before:]
        self.result_of(case, rep, returncode, new[-1] if new else None)

    def spawn_client(self, argv: list[str], log_path: str) -> subprocess.Popen[bytes]:
        """A benchmark client in its own session (so it can be ended as a group), output into `log_path`."""
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(argv, cwd=self.attempt_dir, env=self.env, stdin=subprocess.DEVNULL, stdout=logf,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        STARTED.add(proc.pid)
        return proc

    def run_client(self, name: str, argv: list[str], log_path: str) -> int:
        """Run a benchmark client against the server while still watching the server; its exit code."""
        proc = self.spawn_client(argv, log_path)
        deadline = time.monotonic() + float(self.spec.timeouts.bench)
        try:
            while proc.poll() is None:
                self.check_abort()
                self.server.watch("serving")
                if time.monotonic() > deadline:
                    raise self.too_long(name)
                self.link.wake.wait(TICK_S)
                self.link.wake.clear()
        finally:
            if proc.poll() is None:
                kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
        self.server.watch("serving")  # a server crash explains a failed client better than the client does
        return int(proc.returncode)
