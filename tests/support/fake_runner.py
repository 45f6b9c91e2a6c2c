"""A stand-in for `runner.run_attempt`, injected into `Scheduler(attempt_runner=...)`: no SSH, no agent.
Each call writes one record the way run_attempt does; a host named in `dead` (from the start, or from a
moment on) fails the way an unreachable host does — an infra-error record, then HostUnreachable. `probe` stands
in for `runner.host_status` (the scheduler's re-probe of a down host): a dead host does not answer, a live one
reports `gpus` GPUs of its `arch` (or of `reported_arch`, for a host whose inventory has no arch). A host named in
`unexpected` raises that exception, no HostError, before any record: a bug, or a library's exception let through."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from harness.common.protocol import Final, GpuInfo, RepoStatus, Status
from harness.errors import HostUnreachable
from harness.results.schemas import Record, SweepAttempt
from harness.results.store import ResultsStore
from harness.run.runner import AttemptOutcome


class FakeRunner:
    def __init__(self, duration: Callable[[str], float] = lambda key: 0.0) -> None:
        self.duration = duration  # seconds a (live) attempt takes, by key
        self.dead: dict[str, str] = {}  # host → why it fails
        self.unexpected: dict[str, BaseException] = {}  # host → what its attempts raise, recording nothing
        self.runs: list[tuple[str, str, str]] = []  # (host, experiment, status), in the order they ended
        self.probes: list[tuple[str, bool]] = []  # (host, answered), in order
        self.reported_arch: dict[str, str] = {}  # host → the arch its probe reports when the inventory has none
        # Hosts that die at one moment: each one's first failure waits for the others' (a barrier), so that
        # a test of simultaneous deaths does not depend on which worker thread the machine starts first.
        self.die_together: threading.Barrier | None = None
        self._met: set[str] = set()
        self._lock = threading.Lock()

    def kill(self, host: str, why: str = "connection timed out") -> None:
        with self._lock:
            self.dead[host] = why

    def revive(self, host: str) -> None:
        with self._lock:
            self.dead.pop(host, None)

    def probe(self, host_name: str, host: Any) -> Final:
        with self._lock:
            why = self.dead.get(host_name)
            self.probes.append((host_name, not why))
            arch = host.arch or self.reported_arch.get(host_name)
        if why:
            raise HostUnreachable(host_name, why)
        cap = f"{arch[2:-1]}.{arch[-1]}" if arch else ""
        gpus = [GpuInfo(index=str(i), name="GPU", compute_cap=cap) for i in range(host.gpus or 8)]
        return Final(status=Status.OK, repo_status=RepoStatus(repo=host.repo, exists=True, git=True, gpus=gpus))

    def __call__(self, resolved: Any, host_name: str, host: Any, store: ResultsStore, run_id: str, *,
                 record_extra: SweepAttempt | None = None, **_: Any) -> AttemptOutcome:
        t0 = time.monotonic()
        directory = store.new_attempt_dir(run_id, resolved.name)
        with self._lock:
            unexpected = self.unexpected.get(host_name)
        if unexpected is not None:
            raise unexpected
        with self._lock:
            why = self.dead.get(host_name)
            barrier = self.die_together if why is not None and host_name not in self._met else None
            self._met.add(host_name)
        if barrier is not None:
            barrier.wait(timeout=30)
        extra = record_extra.model_dump(by_alias=True) if record_extra is not None else {}
        status = Status.INFRA_ERROR if why else Status.OK
        rec = Record(run_id=run_id, experiment=resolved.name, attempt=directory.name, host=host_name,
                     backend=resolved.backend_name, status=status, error=f"host {host_name!r}: {why}" if why else None,
                     arch=host.arch, **extra)
        store.write_record(directory, rec)
        if not why:  # the attempt takes its duration, writing its record included
            time.sleep(max(0.0, self.duration(extra.get("key", "")) - (time.monotonic() - t0)))
        with self._lock:
            self.runs.append((host_name, resolved.name, status.value))
        if why:
            raise HostUnreachable(host_name, why)
        return AttemptOutcome(rec, directory)
