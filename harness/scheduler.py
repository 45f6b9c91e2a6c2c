"""Running a planned sweep over hosts: a worker per target repo, attempts taken in planned order by the
first host that fits them, infrastructure failures retried (later, or elsewhere), deterministic outcomes
never retried, and `results/<run-id>/run.json` kept so an interrupted sweep resumes where it stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .config import ClusterHost, HostConfig
from .errors import AgentProtocolError, HostError, Interrupted, ResultsError
from .plan import Plan, PlannedAttempt
from .protocol import Status
from .results import ResultsStore
from .runner import Reporter, run_attempt
from .schemas import PlannedEntry, Record, RunInfo, SweepAttempt
from .targets import connect
from .transport import Transport

MAX_INFRA_TRIES = 2  # an attempt hit by infrastructure failures runs at most this many times per sweep


def why_host_does_not_fit(a: PlannedAttempt, host: HostConfig) -> str | None:
    """Pure: the reason this host cannot take the attempt, or None. Arch (and, before a sweep asks the host,
    the GPU count) is only known when the inventory says it; otherwise the agent checks on the host (nvidia-smi)."""
    exp = a.resolved.experiment
    if a.arch and host.arch != a.arch:
        return f"this run of the baseline is for {a.arch} hosts"
    if host.gpus is not None and exp.gpus_needed > host.gpus:
        return f"needs {exp.gpus_needed} GPUs, has {host.gpus}"
    backend = a.resolved.backend
    if backend and not backend.fits_arch(host.arch) and exp.expect != "crash":
        return f"backend {backend.name} needs {'/'.join(backend.archs or ())}, host is {host.arch}"
    return None


# ============================================================================ run.json


def write_run_file(store: ResultsStore, run_id: str, plan: Plan, hosts: Mapping[str, HostConfig], *,
                   hosts_file: Path | None = None, patches_dir: Path | None = None,
                   host_gpus: Mapping[str, int] | None = None) -> Path:
    """The run's plan and what `--resume` needs to plan it again alike (its hosts, their inventory, the
    patch sets), so a resume runs what has no final record (replaced on resume: the newest plan counts)."""
    return store.write_run(RunInfo(
        run_id=run_id, sweep=plan.name, sweep_file=str(plan.file.resolve()), baseline=plan.baseline,
        hosts=sorted(hosts), hosts_file=str(hosts_file.resolve()) if hosts_file else None,
        patches_dir=str(patches_dir.resolve()) if patches_dir else None, host_gpus=dict(host_gpus or {}),
        attempts=[PlannedEntry(key=a.key, experiment=a.name, round=a.round, order=a.order,
                               backend=a.resolved.backend_name, arch=a.arch) for a in plan.attempts]))


# ============================================================================ the scheduler


@dataclass
class SweepOutcome:
    run_id: str
    done: list[Record] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # keys with a final record from before (resume)
    left: list[PlannedAttempt] = field(default_factory=list)  # not run: budget spent, interrupted, no host
    interrupted: bool = False


class SweepReporter(Reporter, Protocol):
    """What a sweep tells its display (beside each attempt's stages and notes)."""

    def attempt_started(self, host: str, label: str) -> None: ...

    def attempt_finished(self, host: str, label: str, record: Record) -> None: ...

    def totals(self, done: int, failed: int, left: int, eta_s: float | None) -> None: ...


class Scheduler:
    def __init__(self, plan: Plan, hosts: dict[str, HostConfig], store: ResultsStore, run_id: str, *,
                 reporter: SweepReporter, transport_factory: Callable[[str, HostConfig], Transport] = connect,
                 unusable: Mapping[str, str] | None = None):
        self.plan = plan
        self.hosts = hosts
        self.unusable = dict(unusable or {})  # host → why this sweep cannot use it (no worker runs there)
        self.store = store
        self.run_id = run_id
        self.reporter = reporter
        self.transport_factory = transport_factory
        self.cancel = threading.Event()
        self._cv = threading.Condition()
        self._pending: list[PlannedAttempt] = []
        self._stranded: list[PlannedAttempt] = []  # only an unusable host might take them: left for a resume
        self._running: dict[str, PlannedAttempt] = {}
        self._tries: dict[str, int] = {}
        self._avoid: dict[str, set[str]] = {}  # key → hosts where it hit an infrastructure failure
        self._host_cool_until: dict[str, float] = {}
        self._durations: list[float] = []
        self._first_host: dict[str, str] = {}  # experiment → host that ran its first round
        self._alive: set[str] = set()
        self._workers_done = threading.Event()
        self._live_workers = 0
        self.outcome = SweepOutcome(run_id)

    # ------------------------------------------------------------------ public

    def run(self) -> SweepOutcome:
        prior = self.store.records_by_key(self.run_id)
        for a in self.plan.attempts:
            if any(r.is_final() for r in prior.get(a.key, [])):
                self.outcome.skipped.append(a.key)
            else:
                self._pending.append(a)
        self._refuse_unplaceable()
        self._t0 = time.monotonic()
        workers = [threading.Thread(target=self._worker, args=(name,), name=f"host-{name}", daemon=True)
                   for name in self._worker_hosts()]
        self._live_workers = len(workers)
        if not workers:
            self._workers_done.set()
        for w in workers:
            w.start()
        # Wait on an event, not Thread.join: a Ctrl-C landing inside join() can leave CPython believing
        # the thread has stopped (bpo-45274), and the process would then exit mid-revert.
        try:
            while not self._workers_done.wait(0.2):
                pass
        except KeyboardInterrupt:
            self.outcome.interrupted = True
            self.cancel.set()
            with self._cv:
                self._cv.notify_all()
            while not self._workers_done.wait(0.2):
                pass
        with self._cv:
            self.outcome.left = sorted(self._pending + self._stranded + list(self._running.values()),
                                       key=lambda a: a.order)
        return self.outcome

    # ------------------------------------------------------------------ internals

    def _worker_hosts(self) -> list[str]:
        """One worker per target repo: two inventory names for the same repo would race for its lock. A cluster
        has `max_jobs` workers (`NAME`, `NAME#2`, ...): that many jobs queued, Slurm runs one per repo at a time."""
        seen: dict[tuple, str] = {}
        for name, h in self.hosts.items():
            if name in self.unusable:
                continue
            seen.setdefault((h.address, h.port, h.user, h.repo), name)
        workers = []
        for name in seen.values():
            host = self.hosts[name]
            slots = host.cluster.max_jobs if isinstance(host, ClusterHost) else 1
            workers += [name] + [f"{name}#{i}" for i in range(2, slots + 1)]
        return workers

    @staticmethod
    def _host_of(worker: str) -> str:
        return worker.split("#", 1)[0]  # inventory names cannot hold '#'

    def _refuse_unplaceable(self) -> None:
        """An attempt no host can take is a deterministic outcome: record it, do not wait for it. One that
        only a host unusable for this sweep might take is no outcome: it is left, to run on resume."""
        for a in list(self._pending):
            reasons = {n: why_host_does_not_fit(a, h) for n, h in self.hosts.items()}
            if all(reasons.values()):
                self._pending.remove(a)
                self._record_unplaceable(a, reasons)
            elif all(reasons[n] or n in self.unusable for n in self.hosts):
                self._pending.remove(a)
                self._stranded.append(a)

    def _record_unplaceable(self, a: PlannedAttempt, reasons: dict[str, str | None]) -> None:
        directory = self.store.new_attempt_dir(self.run_id, a.name)
        why = "; ".join(f"{n}: {r}" for n, r in reasons.items())
        rec = Record(run_id=self.run_id, experiment=a.name, attempt=directory.name, host="-",
                     backend=a.resolved.backend_name, status=Status.PREFLIGHT_FAILED,
                     error=f"no host in the inventory can run it ({why})", key=a.key, round=a.round,
                     sweep=self.plan.name, expect=a.resolved.experiment.expect,
                     expectation_met=False, cannot_run=[r for r in reasons.values() if r])
        self.store.write_record(directory, rec)
        self.outcome.done.append(rec)
        self.reporter.attempt_finished("-", a.name, rec)

    def _next_for(self, worker: str) -> PlannedAttempt | None:
        """Called with the lock held: the first pending attempt this worker's host can take now."""
        host = self._host_of(worker)
        if time.monotonic() < self._host_cool_until.get(host, 0.0):
            return None
        for a in self._pending:
            if why_host_does_not_fit(a, self.hosts[host]) is not None:
                continue
            first = None if a.arch else self._first_host.get(a.name)
            if first and first != host and self.hosts[first].arch != self.hosts[host].arch and \
                    any(self._host_of(w) == first for w in self._alive):
                continue  # keep an experiment's rounds on one kind of GPU, so its samples pool
            others = [n for n in {self._host_of(w) for w in self._worker_hosts()} if n != host
                      and why_host_does_not_fit(a, self.hosts[n]) is None and n not in self._avoid.get(a.key, set())]
            if host in self._avoid.get(a.key, set()) and others:
                continue  # it failed here for infrastructure reasons: let another host try first
            return a
        return None

    def _budget_spent(self) -> bool:
        b = self.plan.budget.sweep
        return b is not None and time.monotonic() - self._t0 > b

    def _worker(self, host: str) -> None:
        with self._cv:
            self._alive.add(host)
        try:
            self._work(host)
        finally:
            with self._cv:
                self._alive.discard(host)
                self._live_workers -= 1
                if self._live_workers == 0:
                    self._workers_done.set()
                self._cv.notify_all()

    def _work(self, worker: str) -> None:
        host = self._host_of(worker)
        while True:
            with self._cv:
                while True:
                    if self.cancel.is_set() or self._budget_spent():
                        return
                    if not self._pending and not self._running:
                        return  # (while others run, one of their attempts may come back for a retry)
                    a = self._next_for(worker)
                    if a is not None:
                        self._pending.remove(a)
                        self._running[worker] = a
                        self._first_host.setdefault(a.name, host)
                        break
                    self._cv.wait(1.0)
            self._run_one(worker, a)
            with self._cv:
                self._running.pop(worker, None)
                self._cv.notify_all()
            self._report_totals()

    def _run_one(self, worker: str, a: PlannedAttempt) -> None:
        """Run `a` on the worker's host; the display names the worker (a cluster's jobs run side by side)."""
        host = self._host_of(worker)
        label = f"{a.name} r{a.round}"
        self.reporter.attempt_started(worker, label)
        self._tries[a.key] = self._tries.get(a.key, 0) + 1
        t0 = time.monotonic()
        placement = SweepAttempt(key=a.key, round=a.round, sweep=self.plan.name, try_=self._tries[a.key])
        record: Record | None = None
        infra = False
        try:
            outcome = run_attempt(a.resolved, host, self.hosts[host], self.store, self.run_id, reporter=self.reporter,
                                  transport_factory=self.transport_factory, cancel=self.cancel,
                                  attempt_budget_s=self.plan.budget.attempt, record_extra=placement)
            record = outcome.record
            infra = record.status == Status.INFRA_ERROR
        except (HostError, AgentProtocolError):
            infra = True
            record = self._latest_record(a)
        except Interrupted:
            record = self._latest_record(a)
            with self._cv:
                self._pending.append(a)  # not a result: stays pending, runs on resume
            if record is not None:
                self.reporter.attempt_finished(worker, label, record)
            return
        self._durations.append(time.monotonic() - t0)
        with self._cv:
            if infra and self._tries[a.key] < MAX_INFRA_TRIES and not self.cancel.is_set():
                self._avoid.setdefault(a.key, set()).add(host)
                self._host_cool_until[host] = time.monotonic() + self.hosts[host].retry_after
                self._pending.insert(0, a)  # retried first, later or on another host
                self.reporter.note(label, f"infrastructure failure on {host}; will retry")
            elif record is not None:
                self.outcome.done.append(record)
            self._cv.notify_all()
        if record is not None:
            self.reporter.attempt_finished(worker, label, record)

    def _latest_record(self, a: PlannedAttempt) -> Record | None:
        try:
            recs = self.store.records_by_key(self.run_id).get(a.key, [])
        except ResultsError:  # in a worker thread: the caller goes on without it (the sweep's own records)
            return None
        return recs[-1] if recs else None

    def _report_totals(self) -> None:
        with self._cv:
            done = len(self.outcome.done) + len(self.outcome.skipped)
            failed = sum(1 for r in self.outcome.done if r.status != Status.OK)
            left = len(self._pending) + len(self._running)
            workers = max(1, len(self._worker_hosts()))
            eta = (sum(self._durations) / len(self._durations)) * left / workers if self._durations else None
        self.reporter.totals(done, failed, left, eta)

