"""Load against the running server: SGLang's own benchmark clients, and a profile under a short load.

Clients run while the server is still watched, so a server crash mid-benchmark is reported as the
crash it is, not as a failed client.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from ..protocol import BenchCase, BenchResult, BenchStarted, Spec
from .errors import StageFailed
from .hostio import fill_slots, read_jsonl, read_tail
from .link import Link
from .procs import STARTED, TICK_S, kill_group
from .server import Server

TRACE_RE = re.compile(r"-TP-\d+.*\.trace\.json(\.gz)?$")


class Load:
    def __init__(self, spec: Spec, link: Link, server: Server, attempt_dir: str, env: dict[str, str],
                 check_abort: Callable[[], None], facts: dict[str, Any]) -> None:
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
            out = os.path.join(self.attempt_dir, "bench-%s.jsonl" % case.name)
            self.bench_files[case.name] = out
            self.facts["bench_files"] = self.bench_files  # fetched back even when the case fails
            for rep in range(int(case.repeats)):
                self._run_case(case, rep, out)
        return round(time.monotonic() - t0, 4)

    def _run_case(self, case: BenchCase, rep: int, out: str) -> None:
        argv = fill_slots(case.argv, self.spec.server.port) + ["--output-file", out]
        logp = os.path.join(self.attempt_dir, "bench-%s.log" % case.name)
        self.link.send(BenchStarted(case=case.name, repeat=rep))
        lines_before = len(read_jsonl(out))
        returncode = self.run_client(case.name, argv, logp)
        tail = read_tail(logp, 3000)
        if returncode != 0:
            raise StageFailed("bench-failed", "benchmark case %s exited %s:\n%s" % (case.name, returncode, tail))
        new = read_jsonl(out)[lines_before:]
        if not new:
            raise StageFailed("bench-failed", "benchmark case %s wrote no result line to its --output-file:\n%s"
                              % (case.name, tail))
        self.link.send(BenchResult(case=case.name, repeat=rep, result=new[-1]))

    def run_client(self, name: str, argv: list[str], log_path: str) -> int:
        """Run a benchmark client against the server while still watching the server; its exit code."""
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(argv, cwd=self.attempt_dir, env=self.env, stdin=subprocess.DEVNULL, stdout=logf,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        STARTED.add(proc.pid)
        deadline = time.monotonic() + float(self.spec.timeouts.bench)
        try:
            while proc.poll() is None:
                self.check_abort()
                self.server.watch("serving")
                if time.monotonic() > deadline:
                    raise StageFailed("bench-failed", "benchmark case %s did not finish within %ss"
                                      % (name, self.spec.timeouts.bench))
                self.link.wake.wait(TICK_S)
                self.link.wake.clear()
        finally:
            if proc.poll() is None:
                kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
        self.server.watch("serving")  # a server crash explains a failed client better than the client does
        return int(proc.returncode)

    # ------------------------------------------------------------------ profile

    def profile(self) -> None:
        """SGLang's /start_profile while a short load runs, then the trace files. Never fails the attempt:
        a profile that did not come is recorded as `profile_error`."""
        p = self.spec.profile
        assert p is not None
        out_dir = os.path.join(self.attempt_dir, "profile")
        os.makedirs(out_dir, exist_ok=True)
        try:
            code, text = self.server.post("/start_profile", {"output_dir": out_dir, "num_steps": p.steps,
                                                             "activities": p.activities})
            if code != 200:
                self.facts["profile_error"] = "/start_profile answered %s: %s" % (code, text.strip())
                return
            argv = fill_slots(p.argv, self.spec.server.port) + [
                "--output-file", os.path.join(self.attempt_dir, "profile-load.jsonl")]
            rc = self.run_client("profile-load", argv, os.path.join(self.attempt_dir, "profile-load.log"))
            if rc != 0:
                self.facts["profile_error"] = "the profiling load (case %s) exited %s" % (p.case, rc)
            files = self._wait_traces(out_dir, 2.0)
            if not files:  # fewer steps ran than asked: stop it ourselves
                self.server.post("/stop_profile", timeout=float(p.timeout))
                files = self._wait_traces(out_dir, float(p.timeout))
            if files:
                self.facts["profile_files"] = files
            else:
                self.facts["profile_error"] = "no trace files appeared in %s within %ss" % (out_dir, p.timeout)
        except (OSError, ValueError) as exc:
            self.facts["profile_error"] = "profiling failed: %s" % exc

    def _wait_traces(self, out_dir: str, timeout: float) -> list[str]:
        """Trace files, once they exist and their sizes stop changing (ranks write them after the stop)."""
        end = time.monotonic() + timeout
        last = None
        while True:
            files = sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir) if TRACE_RE.search(f))
            sizes = [os.path.getsize(f) for f in files]
            if files and sizes == last:
                return files
            last = sizes
            if time.monotonic() >= end:
                return files
            self.check_abort()
            self.server.watch("profile")
            time.sleep(0.25)
