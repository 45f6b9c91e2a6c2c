"""The profile stage: SGLang's torch profiler around a few forward steps of a short load.

How SGLang 0.5.16 profiles (0.5.23 is the same code; docs/reference/sglang-0.5.16-profiler.md):
/start_profile answers once the scheduler has taken the request. Without `start_step` the profiler starts
at once — while the server idles, and with SGLang's default Python stacks its tracer then records the
scheduler's busy idle loop: every idle second costs about a minute of stop and export later, during which
the scheduler serves nothing. With `start_step` it starts at the next forward step. After `num_steps`
steps the scheduler stops it at the start of the following step — only while batches run — logging
"Stop profiling..." before and "Profiling done. Traces are saved to: …" after every rank has written
`<profile_id>-TP-<rank>[-DP-…][-PP-…][-EP-…].trace.json.gz` into `output_dir`.

So here: the load first; /start_profile (start_step 1, stacks off unless asked for) once its warmup is
over, from a thread, so a slow answer cannot stall the stage; then the trace files, or /stop_profile
when the load ended before the steps. The whole stage ends within the profile timeout, and it never fails
the attempt: what went wrong is the `profile_error`, the status stays the benchmark's.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Optional

from .bench import Load
from .errors import Aborted, StageFailed
from .hostio import fill_slots, read_tail
from .procs import kill_group
from .server import LogFollower

TRACE_RE = re.compile(r"-TP-\d+.*\.trace\.json(\.gz)?$")
WARMUP_DONE = r"Warmup completed with \d+ sequences"
# What the scheduler logs (profiler_manager.py), by the name the stage notes it under.
SERVER_LINES = {"starts": r"Profiling starts", "stopping": r"Stop profiling(-\w+)?\.\.\.",
                "done": r"Profiling done\. Traces are saved to"}
SETTLE_S = 2.0  # without the "Profiling done" line: the traces are whole once their sizes hold this long
TICK_S = 0.1


class ProfileFailed(Exception):
    """No profile; the message is the record's `profile_error`."""


class _Post:
    """One POST in a thread of its own, so the stage keeps its own clock however long SGLang takes."""

    def __init__(self, load: Load, path: str, body: dict[str, Any], timeout: float) -> None:
        self.path = path
        self.answer: Optional[tuple[int, str]] = None
        self.error: Optional[str] = None
        self.t0 = time.monotonic()
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(load, body, timeout), name="profile-post", daemon=True).start()

    def _run(self, load: Load, body: dict[str, Any], timeout: float) -> None:
        try:
            self.answer = load.server.post(self.path, body, timeout=timeout)
        except Exception as exc:  # any way the request can fail is an answer for the stage to report
            if isinstance(exc, socket.timeout) or isinstance(getattr(exc, "reason", None), socket.timeout):
                self.error = ("got no answer in %.0fs (SGLang answers once its scheduler takes the request; it "
                              "was busy)" % (time.monotonic() - self.t0))
            else:
                self.error = "failed: %s" % (str(exc) or type(exc).__name__)
        finally:
            self.done.set()
            load.link.wake.set()

    def failure(self) -> Optional[str]:
        """Why it failed, once it has: None while pending or after a 200."""
        if not self.done.is_set():
            return None
        if self.error is not None:
            return "%s %s" % (self.path, self.error)
        assert self.answer is not None
        code, text = self.answer
        return None if code == 200 else "%s answered %s: %s" % (self.path, code, text.strip()[:500])


class Capture:
    def __init__(self, load: Load) -> None:
        assert load.spec.profile is not None
        self.load = load
        self.p = load.spec.profile
        self.out_dir = os.path.join(load.attempt_dir, "profile")
        self.load_log = os.path.join(load.attempt_dir, "profile-load.log")
        self.t0 = self.deadline = 0.0
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.start: Optional[_Post] = None
        self.stop: Optional[_Post] = None

    def run(self) -> None:
        """Never raises: the traces go into `profile_files`, anything else into `profile_error`."""
        facts = self.load.facts.bench
        self.t0 = time.monotonic()
        self.deadline = self.t0 + float(self.p.timeout)
        try:
            facts.profile_files = self._capture()
        except ProfileFailed as exc:
            facts.profile_error = str(exc)
        except Aborted as exc:  # the benchmark is done and stays the result; the attempt goes on to stop
            facts.profile_error = "the profile stage was stopped after %.0fs: %s" % (self._elapsed(), exc)
        except StageFailed as exc:  # the server died or hung while profiling
            facts.profile_error = "%s (profiling for %.0fs)" % (exc.message, self._elapsed())
        except Exception as exc:  # even a bug here leaves the benchmark's result alone
            facts.profile_error = "profiling failed: %s: %s" % (type(exc).__name__, exc)
        finally:
            self._end_load()

    # ------------------------------------------------------------------ steps

    def _capture(self) -> list[str]:
        os.makedirs(self.out_dir, exist_ok=True)
        argv = fill_slots(self.p.argv, self.load.spec.server.port) + [
            "--output-file", os.path.join(self.load.attempt_dir, "profile-load.jsonl")]
        self.proc = self.load.spawn_client(argv, self.load_log)
        self._wait_warmup()
        log = self.load.server.log
        assert log is not None
        log.poll()  # what the server logged before the start is not ours
        for name, pattern in SERVER_LINES.items():
            log.expect(name, pattern)
        body = {"output_dir": self.out_dir, "start_step": 1, "num_steps": self.p.steps,
                "activities": list(self.p.activities), "with_stack": self.p.with_stack,
                "record_shapes": self.p.record_shapes}
        self.start = _Post(self.load, "/start_profile", body, self._left())
        return self._wait_traces()

    def _wait_warmup(self) -> None:
        """The profile is of the case's load, not of its warmup request."""
        assert self.proc is not None
        follower = LogFollower(self.load_log, [], WARMUP_DONE)
        try:
            while True:
                follower.poll()
                if follower.ready_seen:
                    return
                if self.proc.poll() is not None:
                    raise ProfileFailed("the profiling load (case %s) exited %s before its warmup was over:\n%s"
                                        % (self.p.case, self.proc.returncode, read_tail(self.load_log, 2000)))
                if time.monotonic() >= self.deadline:
                    raise ProfileFailed("the profiling load (case %s) was still in its warmup after %ss (the profile "
                                        "timeout); nothing was profiled" % (self.p.case, self.p.timeout))
                self._tick()
        finally:
            follower.close()

    def _wait_traces(self) -> list[str]:
        assert self.start is not None and self.proc is not None and self.load.server.log is not None
        log = self.load.server.log
        sizes: Optional[list[int]] = None
        steady_since = 0.0
        while True:
            now = time.monotonic()
            files = self._traces()
            if files:
                if "done" in log.marks:  # every rank has written its file (a barrier comes before the line)
                    return files
                now_sizes = [os.path.getsize(f) for f in files]
                if now_sizes != sizes:
                    sizes, steady_since = now_sizes, now
                elif now - steady_since >= SETTLE_S:
                    return files
            failed = self.start.failure()
            if self.stop is not None and self.stop.failure():
                failed = "the load ended before %d forward steps were profiled, and %s" % (self.p.steps,
                                                                                        self.stop.failure())
            if failed and not files:
                raise ProfileFailed(failed)
            if (self.proc.poll() is not None and self.stop is None and self.start.answer is not None
                    and "stopping" not in log.marks):
                # The load ended before the steps did: stop it ourselves (the traces are written on the spot).
                self.stop = _Post(self.load, "/stop_profile", {}, self._left())
            if now >= self.deadline:
                raise ProfileFailed(self._why_no_traces(files))
            self._tick()

    def _traces(self) -> list[str]:
        return sorted(os.path.join(self.out_dir, f) for f in os.listdir(self.out_dir) if TRACE_RE.search(f))

    def _why_no_traces(self, files: list[str]) -> str:
        assert self.start is not None and self.load.server.log is not None
        marks = self.load.server.log.marks
        now = time.monotonic()
        head = "no profile within the profile timeout of %ss: " % self.p.timeout
        if files:
            return head + "the trace files in %s were still growing" % self.out_dir
        if not self.start.done.is_set():
            return head + "/start_profile got no answer in %.0fs (SGLang answers once its scheduler takes the " \
                          "request; it was busy)" % (now - self.start.t0)
        if "stopping" in marks:
            why = ("the server logged %r %.0fs before the end and wrote no trace since (still stopping the profiler "
                   "and exporting" % (marks["stopping"][1].strip()[-60:], now - marks["stopping"][0]))
            return head + why + (": Python stacks make that take minutes)" if self.p.with_stack else ")")
        if "starts" not in marks:
            return head + "/start_profile answered 200 but no forward step ran after it (no 'Profiling starts' line)"
        load = "running" if self.proc is not None and self.proc.poll() is None else "ended"
        return head + "the profiler started, but %d forward steps did not run (the load has %s)" % (self.p.steps, load)

    # ------------------------------------------------------------------ plumbing

    def _tick(self) -> None:
        self.load.check_abort()
        self.load.server.watch("profile")
        self.load.link.wake.wait(TICK_S)
        self.load.link.wake.clear()

    def _left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def _elapsed(self) -> float:
        return time.monotonic() - self.t0

    def _end_load(self) -> None:
        """The load only drives the steps: once they are recorded (or given up on), it goes."""
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
