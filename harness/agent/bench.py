"""Load against the running server: SGLang's own benchmark clients (the profile stage is `profiling`).

Clients run while the server is still watched, so a server crash mid-benchmark is reported as the
crash it is, not as a failed client. A case with a `warmup_argv` (one wave of its prompts) runs that first,
to its own `.warmup.jsonl` and log, never sent as a BenchResult: the metrics never see it. The GPUs' state is
sampled as a case starts and ends, and `Spec.cooldown` waits before every run but the first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any, Optional

from ..common.protocol import BenchCase, BenchResult, BenchStarted, CaseFacts, Final, PrefillTokens, Spec, Status
from .errors import StageFailed
from .gpu import gpu_state
from .hostio import fill_slots, read_jsonl, read_tail
from .link import Link
from .oneprocess import OneProcess, one_process_form
from .pacing import cool_down, needs_cooldown
from .procs import STARTED, TICK_S, kill_group
from .server import Server

WARMUP = -1  # a warm-up run's repeat number: never sent, never measured


def plan_runs(cases: list[BenchCase]) -> list[tuple[BenchCase, int]]:
    """Every run in order: per case its warm-up (unless off), then its repeats 0..repeats-1."""
    return [(case, rep) for case in cases
            for rep in ([WARMUP] if case.warmup_argv is not None else []) + list(range(int(case.repeats)))]


def _number(value: object) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


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
        self.cases: dict[str, CaseFacts] = {}
        self.runs: list[tuple[BenchCase, int]] = []
        self.started_at = 0.0
        self.prefill_at: Optional[list[int]] = None

    def bench(self) -> float:
        """Every case: its warm-up, then `repeats` runs; returns the seconds it took."""
        t0 = time.monotonic()
        for case in self.spec.bench:
            self.bench_files[case.name] = self.output_of(case)
            self.cases[case.name] = CaseFacts(name=case.name)
        self.facts.bench.files = self.bench_files  # fetched back even when a case fails
        self.facts.bench.cases = list(self.cases.values())
        self.runs = plan_runs(self.spec.bench)
        # The one process runs its clients back to back: a cool-down needs a process per run.
        if (self.spec.bench_one_process and self.runs and one_process_form(self.spec.bench)
                and self.spec.cooldown is None):
            OneProcess(self, self.runs).run()
        else:
            for i, (case, rep) in enumerate(self.runs):
                if needs_cooldown(i):
                    self.cool_down(case)
                self._run_case(case, rep)
        return round(time.monotonic() - t0, 4)

    def output_of(self, case: BenchCase, rep: int = 0) -> str:
        return os.path.join(self.attempt_dir, "bench-%s%s.jsonl" % (case.name, ".warmup" if rep == WARMUP else ""))

    def run_argv(self, case: BenchCase, rep: int) -> list[str]:
        """One run's command line: the port and its prompts' seed filled in (no --output-file yet)."""
        seed = case.warmup_seed if rep == WARMUP else case.seeds[rep] if case.seeds else None
        return fill_slots(case.argv_for(rep == WARMUP), self.spec.server.port, seed)

    def log_of(self, case: BenchCase, rep: int = 0) -> str:
        return os.path.join(self.attempt_dir, "bench-%s%s.log" % (case.name, ".warmup" if rep == WARMUP else ""))

    def started(self, case: BenchCase, rep: int) -> None:
        """A run starts: the case's first samples the GPUs; a measured one is announced."""
        self.started_at = time.monotonic()
        if rep == self.reps(case)[0]:
            facts = self.cases[case.name]
            facts.gpu_start = gpu_state(self.env)
            facts.prefix_cache, facts.seeds, facts.warmup_seed = case.prefix_cache, case.seeds, case.warmup_seed
        if rep == WARMUP:  # named now: a warm-up that fails is fetched (its log says why) as a case's run is
            self.cases[case.name].warmup_file = self.output_of(case, rep)
        else:
            self.link.send(BenchStarted(case=case.name, repeat=rep))

    def result_of(self, case: BenchCase, rep: int, returncode: int, new: Optional[dict[str, Any]]) -> None:
        """A run's end, whichever way it ran: its result sent on (a warm-up's kept apart), or the case's failure
        raised."""
        what = "benchmark case %s%s" % (case.name, "'s warm-up" if rep == WARMUP else "")
        if returncode != 0:
            raise StageFailed(Status.BENCH_FAILED, "%s exited %s:\n%s"
                              % (what, returncode, read_tail(self.log_of(case, rep), 3000)))
        if new is None:
            raise StageFailed(Status.BENCH_FAILED, "%s wrote no result line to its --output-file:\n%s"
                              % (what, read_tail(self.log_of(case, rep), 3000)))
        facts = self.cases[case.name]
        self.note_prefill(facts, rep)
        if rep == WARMUP:
            facts.warmup = True
            facts.warmup_s = _number(new.get("duration")) or round(time.monotonic() - self.started_at, 4)
            facts.warmup_median_ttft_ms = _number(new.get("median_ttft_ms"))
        else:
            self.link.send(BenchResult(case=case.name, repeat=rep, result=new))
        if rep == self.reps(case)[-1]:
            facts.gpu_end = gpu_state(self.env)

    def mark_prefill(self) -> None:
        """A run is about to start: what the server's log said of prefills so far is its starting point."""
        self.prefill_at = self.prefill_so_far()

    def prefill_so_far(self) -> Optional[list[int]]:
        """The server log's prefill counts so far (tokens computed, cached, lines), read up to now."""
        log = self.server.log
        if log is None or log.prefill_re is None:
            return None
        log.poll()
        return list(log.prefill)

    def note_prefill(self, facts: CaseFacts, rep: int) -> None:
        """What the server's prefills took from its prefix cache while this run ran (its log lines since it
        started: every request of the run has been prefilled by the time its result is written)."""
        now, before = self.prefill_so_far(), self.prefill_at
        if now is None or before is None:
            return
        new, cached, batches = (a - b for a, b in zip(now, before))
        facts.prefill = (facts.prefill or []) + [PrefillTokens(repeat=rep, new=new, cached=cached, batches=batches)]

    def reps(self, case: BenchCase) -> list[int]:
        return [rep for c, rep in self.runs if c.name == case.name]

    def cool_down(self, case: BenchCase) -> None:
        """The experiment's cool-down before a run of `case`, the server watched meanwhile; kept in its facts."""
        cfg = self.spec.cooldown
        if cfg is None:
            return
        waited = cool_down(cfg, lambda: gpu_state(self.env), self.pause, time.monotonic)
        facts = self.cases[case.name]
        facts.cooldown_s = round((facts.cooldown_s or 0.0) + waited.seconds, 3)
        if waited.settled is not None:
            facts.cooldown_settled = waited.settled and facts.cooldown_settled is not False

    def pause(self, seconds: float) -> None:
        """Wait `seconds` while still answering an abort and noticing a server crash."""
        end = time.monotonic() + seconds
        while True:
            self.check_abort()
            self.server.watch("serving")
            left = end - time.monotonic()
            if left <= 0:
                return
            self.link.wake.wait(min(TICK_S, left))
            self.link.wake.clear()

    def too_long(self, name: str) -> StageFailed:
        return StageFailed(Status.BENCH_FAILED, "benchmark case %s did not finish within %ss"
                           % (name, self.spec.timeouts.bench))

    def _run_case(self, case: BenchCase, rep: int) -> None:
        out = self.output_of(case, rep)
        argv = self.run_argv(case, rep) + ["--output-file", out]
        self.mark_prefill()
        self.started(case, rep)
        lines_before = len(read_jsonl(out))
        returncode = self.run_client(case.name, argv, self.log_of(case, rep))
        new = read_jsonl(out)[lines_before:]
        self.result_of(case, rep, returncode, new[-1] if new else None)

    def spawn_client(self, argv: list[str], log_path: str, stdin_pipe: bool = False) -> subprocess.Popen[bytes]:
        """A benchmark client in its own session (so it can be ended as a group), output into `log_path`; its
        stdin a pipe to it when asked (the one process waits there between runs), else nothing."""
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(argv, cwd=self.attempt_dir, env=self.env,
                                    stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, stdout=logf,
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
