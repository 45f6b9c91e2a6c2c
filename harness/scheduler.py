"""Running a planned sweep over hosts: a worker per target repo, attempts taken in planned order by the
first host that fits them, infrastructure failures retried (later, or elsewhere), deterministic outcomes
never retried, and `results/<run-id>/run.json` kept so an interrupted sweep resumes where it stopped.

A host that fails `down_after` times in a row (unreachable, link lost, agent gone) is DOWN for the rest of
the sweep: no more work goes to it, and what only down hosts could run is left for a resume — so a sweep
always ends when nothing left can run on a live host, instead of idling to its budget."""

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
from .results import ResultsStore, load_record
from .runner import AttemptOutcome, Reporter, run_attempt
from .schemas import PlannedEntry, Record, RunInfo, SweepAttempt
from .targets import connect
from .transport import Transport

MAX_INFRA_TRIES = 2  # an attempt hit by infrastructure failures runs at most this many times per sweep
DOWN_AFTER = 2  # infrastructure failures in a row after which a host is down for the rest of the sweep
# (failures on a host that is then down are the host's: they do not count against the attempt's tries)


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
        key_signature=plan.key_signature or None, key_archs=list(plan.key_archs),
        attempts=[PlannedEntry(key=a.key, experiment=a.name, round=a.round, order=a.order,
                               backend=a.resolved.backend_name, arch=a.arch) for a in plan.attempts]))


# ============================================================================ the scheduler


@dataclass(frozen=True)
class DownHost:
    """A host this sweep stopped using: why, and since when (wall clock)."""

    reason: str
    since: float

    def describe(self, name: str) -> str:
        return f"{name} down since {time.strftime('%H:%M', time.localtime(self.since))}: {self.reason}"


@dataclass
class SweepOutcome:
    run_id: str
    done: list[Record] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # keys with a final record from before (resume)
    left: list[PlannedAttempt] = field(default_factory=list)  # not run: budget spent, interrupted, no host
    interrupted: bool = False
    down: dict[str, DownHost] = field(default_factory=dict)  # hosts the sweep stopped using, and why


class SweepReporter(Reporter, Protocol):
    """What a sweep tells its display (beside each attempt's stages and notes)."""

    def attempt_started(self, host: str, label: str) -> None: ...

    def attempt_finished(self, host: str, label: str, record: Record) -> None: ...

    def totals(self, done: int, failed: int, left: int, eta_s: float | None) -> None: ...

    def host_down(self, host: str, down: DownHost) -> None: ...


class Scheduler:
    def __init__(self, plan: Plan, hosts: dict[str, HostConfig], store: ResultsStore, run_id: str, *,
                 reporter: SweepReporter, transport_factory: Callable[[str, HostConfig], Transport] = connect,
                 unusable: Mapping[str, str] | None = None, down_after: int = DOWN_AFTER,
                 attempt_runner: Callable[..., AttemptOutcome] = run_attempt):
        self.plan = plan
        self.hosts = hosts
        self.unusable = dict(unusable or {})  # host → why this sweep cannot use it (no worker runs there)
        self.store = store
        self.run_id = run_id
        self.reporter = reporter
        self.transport_factory = transport_factory
        self.attempt_runner = attempt_runner  # `run_attempt`; a stand-in in benchmarks and placement tests
        self.cancel = threading.Event()
        self._cv = threading.Condition()
        self._pending: list[PlannedAttempt] = []
        self._stranded: list[PlannedAttempt] = []  # only an unusable host might take them: left for a resume
        self._running: dict[str, PlannedAttempt] = {}
        self._tries: dict[str, int] = {}
        self._avoid: dict[str, set[str]] = {}  # key → hosts where it hit an infrastructure failure
        self._host_cool_until: dict[str, float] = {}
        self._durations: list[float] = []
        self._kind: dict[str, str] = {}  # experiment → the GPU arch its rounds run on (only a KNOWN arch pins)
        self._alive: set[str] = set()
        self.down_after = max(1, down_after)
        self._fails_in_row: dict[str, int] = {}  # host → infrastructure failures since its last good attempt
        self._fit: dict[tuple[str, str], str | None] = {}  # (key, host) → why_host_does_not_fit, memoised
        self._failed = 0  # final records that are not ok, from before (resume) and of outcome.done[:_failed_upto]
        self._failed_upto = 0
        self._workers_done = threading.Event()
        self._live_workers = 0
        self.outcome = SweepOutcome(run_id)
        self.down = self.outcome.down  # host → why and since when this sweep stopped using it
        self._workers = self._worker_hosts()
        self._live: set[str] | None = None  # cache of _live_hosts(), valid while len(self.down) == _live_down
        self._live_down = 0
        self._work_s = 0.0  # sum of _durations, kept as they come (the totals are reported after every attempt)

    # ------------------------------------------------------------------ public

    def run(self) -> SweepOutcome:
        prior = self.store.records_by_key(self.run_id)
        for a in self.plan.attempts:
            finals = [r for r in prior.get(a.key, []) if r.is_final()]
            if finals:
                self.outcome.skipped.append(a.key)
                self._failed += int(finals[-1].status != Status.OK)
            else:
                self._pending.append(a)
        self._refuse_unplaceable()
        self._t0 = time.monotonic()
        self._report_totals()  # a resumed run's counters go on from what it already holds
        workers = [threading.Thread(target=self._worker, args=(name,), name=f"host-{name}", daemon=True)
                   for name in self._workers]
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
        only a host unusable for this sweep (or down) might take is no outcome: it is left, to run on resume —
        unless its backend runs on no arch known here and only hosts of unknown arch, all out of use, remain:
        that is refused (a host's unknown arch is no reason to wait for it)."""
        live = self._live_hosts()
        out = {n: self.unusable.get(n) or (self.down[n].reason if n in self.down else "no worker of its own")
               for n in self.hosts if n not in live}
        for a in list(self._pending):
            if any(self._why(a, n) is None for n in live):
                continue  # the common case, and cheap: a live host can take it
            reasons = {n: self._why(a, n) for n in self.hosts}
            if all(reasons.values()) and self._another_kind_could(a):
                self._pending.remove(a)
                self._stranded.append(a)
            elif all(reasons.values()):
                self._pending.remove(a)
                self._record_unplaceable(a, reasons)
            elif all(reasons[n] or n in out for n in self.hosts):
                self._pending.remove(a)
                backend = a.resolved.backend
                only_unknown = all(reasons[n] or self.hosts[n].arch is None for n in self.hosts)
                if backend is not None and backend.archs and only_unknown:
                    self._record_unplaceable(a, {n: r or f"arch unknown and not in use: {out[n]}"
                                                 for n, r in reasons.items()})
                else:
                    self._stranded.append(a)

    def _another_kind_could(self, a: PlannedAttempt) -> bool:
        """On a resume over other hosts: a GPU arch the run was planned with that none of these hosts has might
        run it — no outcome, left for a resume there (a new run's plan has no such arch)."""
        missing = set(self.plan.key_archs) - {h.arch for h in self.hosts.values()}
        backend = a.resolved.backend
        if a.arch:
            return a.arch in missing
        return backend is not None and bool(backend.archs) and any(backend.fits_arch(x) for x in missing)

    def _why(self, a: PlannedAttempt, host: str) -> str | None:
        """`why_host_does_not_fit`, memoised: the answer for a key and a host does not change in a sweep."""
        k = (a.key, host)
        if k not in self._fit:
            self._fit[k] = why_host_does_not_fit(a, self.hosts[host])
        return self._fit[k]

    def _live_hosts(self) -> set[str]:
        """Called with the lock held: the hosts with a worker that are not down."""
        if self._live is None or len(self.down) != self._live_down:  # recomputed only when a host went down
            self._live = {self._host_of(w) for w in self._workers} - set(self.down)
            self._live_down = len(self.down)
        return self._live

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
        if host in self.down or time.monotonic() < self._host_cool_until.get(host, 0.0):
            return None
        live = self._live_hosts()
        for a in self._pending:
            if self._why(a, host) is not None or not self._kind_allows(a, host, live):
                continue
            avoid = self._avoid.get(a.key, set())
            if host in avoid and any(n != host and n not in avoid and self._why(a, n) is None for n in live):
                continue  # it failed here for infrastructure reasons: let another host try first
            return a
        return None

    def _kind_allows(self, a: PlannedAttempt, host: str, live: set[str]) -> bool:
        """Keep an experiment's rounds on one kind of GPU, so its samples pool: another kind (or a host of
        unknown arch) takes them only when no live host of the experiment's kind could."""
        kind = None if a.arch else self._kind.get(a.name)
        if kind is None or self.hosts[host].arch == kind:
            return True
        return not any(self.hosts[n].arch == kind and self._why(a, n) is None for n in live)

    def _took(self, a: PlannedAttempt, host: str) -> None:
        """Called with the lock held: the experiment's kind of GPU is the KNOWN arch of the host that took it
        (a host of unknown arch pins nothing); a move to another kind is said."""
        arch = self.hosts[host].arch
        kind = self._kind.get(a.name)
        if a.arch or arch is None or arch == kind:
            return
        if kind is not None:
            self.reporter.note(f"{a.name} r{a.round}", f"moves from {kind} to {arch} ({host}): no live {kind} "
                                                       f"host can take it; later rounds stay on {arch}")
        self._kind[a.name] = arch

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
                    if self.cancel.is_set() or self._budget_spent() or host in self.down:
                        return
                    if not self._pending and not self._running:
                        return  # (while others run, one of their attempts may come back for a retry)
                    a = self._next_for(worker)
                    if a is not None:
                        self._pending.remove(a)
                        self._running[worker] = a
                        self._took(a, host)
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
        reason = ""
        try:
            outcome = self.attempt_runner(a.resolved, host, self.hosts[host], self.store, self.run_id,
                                          reporter=self.reporter, transport_factory=self.transport_factory,
                                          cancel=self.cancel, attempt_budget_s=self.plan.budget.attempt,
                                          record_extra=placement)
            record = outcome.record
            infra = record.status == Status.INFRA_ERROR
        except (HostError, AgentProtocolError) as exc:
            infra = True
            reason = exc.message
            record = self._latest_record(a)
        except Interrupted:
            record = self._latest_record(a)
            with self._cv:
                self._pending.append(a)  # not a result: stays pending, runs on resume
            if record is not None:
                self.reporter.attempt_finished(worker, label, record)
            return
        with self._cv:
            if not infra:  # an infrastructure failure is quick: it would make the time left look short
                self._durations.append(time.monotonic() - t0)
                self._work_s += self._durations[-1]
            if infra:
                self._avoid.setdefault(a.key, set()).add(host)
                self._host_failed(host, reason or (record.error if record and record.error else "infra-error"))
            else:
                self._fails_in_row[host] = 0
            if infra and self._may_retry(a):
                self._host_cool_until[host] = time.monotonic() + self.hosts[host].retry_after
                self._pending.insert(0, a)  # retried first, later or on another host
                self.reporter.note(label, f"infrastructure failure on {host}; will retry")
            elif record is not None:
                self.outcome.done.append(record)
            if infra and host in self.down:
                self._refuse_unplaceable()  # what only down hosts could run is left (or refused), not waited for
            self._cv.notify_all()
        if record is not None:
            self.reporter.attempt_finished(worker, label, record)

    def _may_retry(self, a: PlannedAttempt) -> bool:
        """Called with the lock held, after an infrastructure failure: tries on hosts now down were the
        host's fault, not the attempt's, so they are not counted; and while a live host with no failure in a
        row has not tried it, it gets up to twice the tries (the hosts that failed it may be dying, not down yet)."""
        if self.cancel.is_set():
            return False
        avoid = self._avoid.get(a.key, set())
        charged = self._tries[a.key] - len(avoid & set(self.down))
        if charged < MAX_INFRA_TRIES:
            return True
        healthy = [n for n in self._live_hosts() - avoid if not self._fails_in_row.get(n) and self._why(a, n) is None]
        return charged < 2 * MAX_INFRA_TRIES and bool(healthy)

    def _host_failed(self, host: str, reason: str) -> None:
        """Called with the lock held: one more infrastructure failure in a row; at `down_after` the host is down."""
        self._fails_in_row[host] = self._fails_in_row.get(host, 0) + 1
        if self._fails_in_row[host] < self.down_after or host in self.down:
            return
        first = reason.strip().splitlines()[0] if reason.strip() else "infra-error"
        down = DownHost(f"{first} ({self._fails_in_row[host]} failures in a row)", time.time())
        self.down[host] = down
        self.reporter.host_down(host, down)

    def _latest_record(self, a: PlannedAttempt) -> Record | None:
        """The attempt's newest record: read from its experiment's folder only (not the whole run's, which
        grows with the sweep: a host going down must not cost a read of every record)."""
        folder = self.store.run_path(self.run_id) / a.name
        try:
            recs = [r for r in (load_record(p) for p in sorted(folder.glob("*/record.json"))) if r.key == a.key]
        except ResultsError:  # in a worker thread: the caller goes on without it (the sweep's own records)
            return None
        return recs[-1] if recs else None

    def _report_totals(self) -> None:
        with self._cv:
            done = len(self.outcome.done) + len(self.outcome.skipped)
            fresh = self.outcome.done[self._failed_upto:]  # counted as they come: a sweep has thousands
            self._failed += sum(1 for r in fresh if r.status != Status.OK)
            self._failed_upto += len(fresh)
            failed = self._failed
            left = len(self._pending) + len(self._running)
            live = self._live_hosts()
            workers = max(1, sum(1 for w in self._workers if self._host_of(w) in live))
            eta = (self._work_s / len(self._durations)) * left / workers if self._durations else None
        self.reporter.totals(done, failed, left, eta)

