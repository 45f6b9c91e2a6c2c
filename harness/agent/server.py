"""The server under test: launch it in its own session, follow its log, decide ready | crashed | hung,
dump a hung server's stacks, stop it and wait for its GPU memory to be released."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Optional

from ..common.protocol import Crashed, Final, Hung, Launched, ServerSpec, Spec, Status, StopReport
from .errors import FailureFacts, StageFailed
from .gpu import wait_gpu_release
from .hostio import fill_slots, http_url, run
from .link import Link
from .procs import TICK_S, group_members, listening_inodes, marked_pids, pids_holding, proc_stat, stop_group

# The controller strips colours with its own copy (harness.triage.classify); the agent ships alone, so it keeps one.
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
LOG_TAIL_LINES = 400


class LogFollower:
    """Reads the server's log file as it grows: lines (tqdm `\\r` redraws collapsed, ANSI stripped),
    fatal-pattern and ready-pattern matches, and the time of the last growth (for the hang timer)."""

    def __init__(self, path: str, fatal_patterns: list[str], ready_pattern: str,
                 prefix_pattern: Optional[str] = None, prefill_pattern: Optional[str] = None) -> None:
        self.path = path
        self.prefill_re = re.compile(prefill_pattern) if prefill_pattern else None
        self.prefill = [0, 0, 0]  # what every prefill line so far said: tokens computed, tokens cached, lines
        self.fatal = [re.compile(p) for p in fatal_patterns]
        self.prefix = re.compile(prefix_pattern) if prefix_pattern else None
        self.ready = re.compile(ready_pattern)
        self._f: Any = None
        self._partial = b""
        self.tail: list[str] = []
        self.last_growth = time.monotonic()
        self.first_fatal: Optional[tuple[float, str]] = None  # (monotonic time, line)
        self.ready_seen = False
        self._expected: dict[str, Any] = {}
        self.marks: dict[str, tuple[float, str]] = {}  # name → (monotonic time, line) of its first match

    def expect(self, name: str, pattern: str) -> None:
        """From now on, note the first line matching `pattern` under `name` (in `marks`)."""
        self.marks.pop(name, None)
        self._expected[name] = re.compile(pattern)

    def poll(self) -> None:
        if self._f is None:
            try:
                self._f = open(self.path, "rb")
            except OSError:
                return
        data = self._f.read()
        if not data:
            return
        self.last_growth = time.monotonic()
        pieces = (self._partial + data).split(b"\n")
        self._partial = pieces.pop()
        for raw in pieces:
            self._line(raw)

    def drain(self) -> None:
        self.poll()
        if self._partial:
            self._line(self._partial)
            self._partial = b""

    def _line(self, raw: bytes) -> None:
        text = ANSI_RE.sub("", raw.decode("utf-8", errors="replace")).rstrip("\r")
        if "\r" in text:
            text = text.rsplit("\r", 1)[-1]
        self.tail.append(text)
        if len(self.tail) > LOG_TAIL_LINES:
            del self.tail[: len(self.tail) - LOG_TAIL_LINES]
        message = self.prefix.sub("", text.lstrip(), count=1) if self.prefix else text
        if self.first_fatal is None and any(p.search(message) for p in self.fatal):
            self.first_fatal = (time.monotonic(), text)
        if not self.ready_seen and self.ready.search(text):
            self.ready_seen = True
        m = self.prefill_re.search(message) if self.prefill_re else None
        if m:
            self.prefill[0] += int(m.group("new"))
            self.prefill[1] += int(m.group("cached"))
            self.prefill[2] += 1
        for name, pattern in self._expected.items():
            if name not in self.marks and pattern.search(message):
                self.marks[name] = (time.monotonic(), text)

    def close(self) -> None:
        if self._f:
            self._f.close()


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via http_proxy


class HealthProbe:
    """Polls GET /health_generate in a thread until it answers 200 (or is told to stop)."""

    def __init__(self, url: str, wake: threading.Event) -> None:
        self.url = url
        self.ok = False
        self._stop = threading.Event()
        self._wake = wake
        threading.Thread(target=self._run, name="health", daemon=True).start()

    def _run(self) -> None:
        opener = _opener()
        while not self._stop.is_set():
            try:
                with opener.open(self.url, timeout=25) as r:
                    if r.status == 200:
                        self.ok = True
                        self._wake.set()
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()


class Liveness:
    """While the benchmark runs: GET /health every few seconds. A server that stops answering (frozen by
    SIGSTOP, deadlocked) is hung after `no_progress` seconds, not after the benchmark's own timeout."""

    PERIOD_S = 2.0

    def __init__(self, url: str) -> None:
        self.url = url
        self.last_ok = time.monotonic()
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="liveness", daemon=True).start()

    def _run(self) -> None:
        opener = _opener()
        while not self._stop.wait(self.PERIOD_S):
            try:
                with opener.open(self.url, timeout=self.PERIOD_S * 2) as r:
                    if r.status == 200:
                        self.last_ok = time.monotonic()
            except (urllib.error.URLError, OSError, ValueError):
                pass

    def silent_for(self) -> float:
        return time.monotonic() - self.last_ok

    def stop(self) -> None:
        self._stop.set()


class Server:
    """One launched server: its process group, log, readiness and end. `facts` collects what the final
    report says about it (exit code, death time, stack dump, stop, GPU memory left)."""

    def __init__(self, spec: Spec, link: Link, attempt_dir: str, env: dict[str, str], marker: str,
                 check_abort: Callable[[], None], facts: Final) -> None:
        self.spec = spec
        self.srv: ServerSpec = spec.server
        self.link = link
        self.attempt_dir = attempt_dir
        self.log_path = os.path.join(attempt_dir, "server.log")
        self.env = env
        self.marker = marker
        self.check_abort = check_abort
        self.facts = facts
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.pgid: Optional[int] = None
        self.start_time: Optional[int] = None
        self.t_launch = 0.0
        self.died_at: Optional[tuple[float, float]] = None  # (host clock, monotonic)
        self.log: Optional[LogFollower] = None
        self.liveness: Optional[Liveness] = None
        self.seen_pids: set[int] = set()  # every pid of the group seen alive: checked on the GPUs at the end

    # ------------------------------------------------------------------ launch and watch

    def launch(self, cwd: str, on_started: Callable[[int, int, Optional[int]], None]) -> None:
        logf = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(fill_slots(self.srv.argv, self.srv.port), cwd=cwd, env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as exc:
            raise StageFailed(Status.CRASHED, "cannot start the server: %s" % exc) from None
        finally:
            logf.close()
        self.t_launch = time.monotonic()
        self.pgid = self.proc.pid
        st = proc_stat(self.proc.pid)
        self.start_time = st[3] if st else None
        on_started(self.proc.pid, self.pgid, self.start_time)
        self.facts.server.pid = self.proc.pid
        self.link.send(Launched(pid=self.proc.pid, log=self.log_path))
        self.log = LogFollower(self.log_path, self.spec.fatal_patterns, self.spec.ready_pattern,
                               self.spec.line_prefix_pattern, self.spec.prefill_pattern)
        proc = self.proc

        def wait_exit() -> None:
            proc.wait()
            self.died_at = (time.time(), time.monotonic())
            self.link.wake.set()

        threading.Thread(target=wait_exit, name="waitpid", daemon=True).start()

    def _crash(self, phase: str) -> StageFailed:
        """The server died (or printed a fatal line and lingered): stop waiting and say so at once."""
        assert self.proc is not None and self.log is not None
        self.log.drain()
        died = self.died_at
        self.link.send(Crashed(exit_code=self.proc.returncode, died_at=died[0] if died else None,
                               since_death_s=(time.monotonic() - died[1]) if died else None,
                               fatal_line=self.log.first_fatal[1] if self.log.first_fatal else None,
                               log_tail="\n".join(self.log.tail), stage=phase))
        self.facts.server.exit_code = self.proc.returncode
        if died:
            self.facts.server.died_at = died[0]
        return StageFailed(Status.CRASHED, "server %s during %s" % (
            "exited with code %s" % self.proc.returncode if self.proc.returncode is not None
            else "printed a fatal error and did not exit", phase))

    def watch(self, phase: str) -> None:
        """One tick of watching: raise when the server died or printed a fatal line and lingered."""
        assert self.proc is not None and self.log is not None
        self.log.poll()
        if self.proc.poll() is not None:
            raise self._crash(phase)
        ff = self.log.first_fatal
        if ff and time.monotonic() - ff[0] > float(self.spec.timeouts.fatal_grace):
            raise self._crash(phase)
        if self.liveness is not None and self.liveness.silent_for() > float(self.spec.timeouts.no_progress):
            raise self.hung("no answer on /health for %.0fs during %s (no_progress timeout)"
                            % (self.liveness.silent_for(), phase))

    def url(self, path: str) -> str:
        return http_url(self.srv.host, self.srv.port, path)

    def wait_ready(self) -> float:
        """Ready = the ready line, then /health_generate 200 from a port this attempt's processes own.
        Returns seconds since launch; raises on crash, hang (timers) or a foreign server on the port."""
        assert self.log is not None
        t = self.spec.timeouts
        probe: Optional[HealthProbe] = None
        try:
            while True:
                self.check_abort()
                self.watch("startup")
                now = time.monotonic()
                if self.log.ready_seen and probe is None:
                    probe = HealthProbe(self.url("/health_generate"), self.link.wake)
                if probe is not None and probe.ok:
                    self._check_port_is_ours()
                    self.seen_pids.update(group_members(self.pgid))
                    self.liveness = Liveness(self.url("/health"))
                    return round(now - self.t_launch, 4)
                if now - self.t_launch > float(t.ready):
                    raise self.hung("not ready after the ready timeout of %ss" % t.ready)
                if now - self.log.last_growth > float(t.no_progress):
                    raise self.hung("no log output for %ss while starting (no_progress timeout)" % t.no_progress)
                self.link.wake.wait(TICK_S)
                self.link.wake.clear()
        finally:
            if probe is not None:
                probe.stop()

    def _check_port_is_ours(self) -> None:
        port = int(self.srv.port)
        if not pids_holding(listening_inodes(port), group_members(self.pgid) + marked_pids(self.marker)):
            raise StageFailed(Status.CRASHED, "the ready line appeared and port %s answers, but the process "
                              "listening there is not this attempt's server (stale server?)" % port,
                              FailureFacts(foreign_port=True))

    def hung(self, why: str) -> StageFailed:
        assert self.log is not None
        self.log.drain()
        self.stack_dump()
        self.link.send(Hung(reason=why, log_tail="\n".join(self.log.tail[-50:])))
        return StageFailed(Status.HUNG, "server hung: " + why)

    def stack_dump(self) -> None:
        """Where a hung server is stuck, from py-spy when the host has it (kept beside the record)."""
        exe = shutil.which("py-spy", path=self.env.get("PATH"))
        if not exe or self.proc is None:
            return
        path = os.path.join(self.attempt_dir, "stack-dump.txt")
        chunks = []
        for pid in [self.proc.pid] + [p for p in group_members(self.pgid) if p != self.proc.pid]:
            try:
                p = run([exe, "dump", "--pid", str(pid)], env=self.env, timeout=30)
                chunks.append("=== pid %d (exit %d)\n%s%s" % (pid, p.returncode, p.stdout.decode(errors="replace"),
                                                               p.stderr.decode(errors="replace")))
            except (OSError, subprocess.TimeoutExpired) as exc:
                chunks.append("=== pid %d: py-spy failed: %s\n" % (pid, exc))
        with open(path, "w") as f:
            f.write("\n".join(chunks))
        self.facts.server.stack_dump = path

    def post(self, path: str, body: Optional[dict[str, Any]] = None, timeout: float = 30) -> tuple[int, str]:
        req = urllib.request.Request(self.url(path), data=json.dumps(body or {}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with _opener().open(req, timeout=timeout) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    # ------------------------------------------------------------------ stop

    def stop(self) -> StopReport:
        """TERM, grace, KILL, stragglers; then wait for the GPU memory of every pid we saw to be freed."""
        assert self.proc is not None and self.pgid is not None
        if self.liveness is not None:
            self.liveness.stop()
        known = set(self.seen_pids) | set(group_members(self.pgid)) | set(marked_pids(self.marker))
        known.add(self.proc.pid)
        info = stop_group(self.proc, self.pgid, self.marker, float(self.spec.timeouts.stop_grace))
        self.facts.server.exit_code = self.proc.returncode
        held = wait_gpu_release(known, self.env, float(self.spec.timeouts.gpu_release))
        if held:
            info.gpu_dirty = held
            self.facts.gpu_dirty = held
        if self.log is not None:
            self.log.close()
        return info
