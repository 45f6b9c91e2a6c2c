"""Running a planned sweep over hosts: a worker per target repo, attempts taken in planned order by the
first host that fits them, infrastructure failures retried (later, or elsewhere), deterministic outcomes
never retried, and `results/<run-id>/run.json` kept so an interrupted sweep resumes where it stopped.

A host that fails again and again is DOWN (health.py: when, and when it is probed again). Given a `probe` (the
status/GPU question asked of hosts before a sweep), a down host's worker re-probes it, only while the sweep
budget lasts and some attempt not yet ended could run on it; an answer brings it back (its worker takes work
again). What only down hosts could run is left for a resume — so a sweep always ends."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..common.protocol import Status
from ..errors import AgentProtocolError, HostError, Interrupted, ResultsError
from ..experiments.config import ClusterHost, HostConfig
from ..experiments.plan import Plan, PlannedAttempt
from ..hosts.gpus import AskStatus, ask_host
from ..hosts.targets import connect
from ..hosts.transport import Transport
from ..results.schemas import Record, SweepAttempt
from ..results.store import ResultsStore
from .health import DOWN_AFTER, REPROBE_AFTER, REPROBE_TRIES, DownHost, HostHealth
from .placement import Placement
from .runner import AttemptOutcome, Reporter, run_attempt

MAX_INFRA_TRIES = 2  # an attempt hit by infrastructure failures runs at most this many times per sweep


@dataclass
class SweepOutcome:
    run_id: str
    done: list[Record] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # keys with a final record from before (resume)
    left: list[PlannedAttempt] = field(default_factory=list)  # not run: budget spent, interrupted, no host
    interrupted: bool = False
    down: dict[str, DownHost] = field(default_factory=dict)  # hosts the sweep stopped using, and why
    back: dict[str, float] = field(default_factory=dict)  # hosts that came back after being down: when (wall clock)


class SweepReporter(Reporter, Protocol):
    """What a sweep tells its display (beside each attempt's stages and notes)."""

    def attempt_started(self, host: str, label: str) -> None: ...

    def attempt_finished(self, host: str, label: str, record: Record) -> None: ...

    def totals(self, done: int, failed: int, left: int, eta_s: float | None) -> None: ...

    def host_down(self, host: str, down: DownHost) -> None: ...

    def host_up(self, host: str, since: float) -> None: ...


class Scheduler:
    def __init__(self, plan: Plan, hosts: dict[str, HostConfig], store: ResultsStore, run_id: str, *,
                 reporter: SweepReporter, transport_factory: Callable[[str, HostConfig], Transport] = connect,
                 unusable: Mapping[str, str] | None = None, down_after: int = DOWN_AFTER,
                 attempt_runner: Callable[..., AttemptOutcome] = run_attempt, probe: AskStatus | None = None,
                 reprobe_after: float = REPROBE_AFTER, reprobe_tries: int = REPROBE_TRIES) -> None:
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
        self._alive: set[str] = set()
        self.placement = Placement(hosts, plan.key_archs)
        self._failed = 0  # final records that are not ok, from before (resume) and of outcome.done[:_failed_upto]
        self._failed_upto = 0
        self._workers_done = threading.Event()
        self._live_workers = 0
        self.outcome = SweepOutcome(run_id)
        self.health = HostHealth(self.outcome.down, down_after=down_after, reprobe_after=reprobe_after,
                                 reprobe_tries=reprobe_tries)
        self.down = self.outcome.down  # host → why and since when this sweep stopped using it
        self._workers = self._worker_hosts()
        self._live: set[str] | None = None  # cache of _live_hosts(), valid while its stamp is _live_down's
        self._live_down = (0, 0)
        self.probe = probe  # None: a down host stays down for the rest of the sweep
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
        seen: dict[tuple[str, int | None, str | None, str], str] = {}
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
        only a host unusable for this sweep (or down) might take is no outcome: it is left, to run on resume
        (Placement.without_live_host says which)."""
        live = self._live_hosts()
        out = {n: self.unusable.get(n) or (self.down[n].reason if n in self.down else "no worker of its own")
               for n in self.hosts if n not in live}
        for a in list(self._pending):
            fate = self.placement.without_live_host(a, live, out)
            if fate is None:
                continue
            self._pending.remove(a)
            if fate.refused:
                self._record_unplaceable(a, fate.reasons)
            else:
                self._stranded.append(a)

    def _live_hosts(self) -> set[str]:
        """Called with the lock held: the hosts with a worker that are not down."""
        stamp = (self.health.changes, len(self.down))  # recomputed only when a host went down or came back
        if self._live is None or stamp != self._live_down:
            self._live = {self._host_of(w) for w in self._workers} - set(self.down)
            self._live_down = stamp
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
        return self.placement.first_for(self._pending, host, self._live_hosts(), self._avoid)

    def _took(self, a: PlannedAttempt, host: str) -> None:
        """Called with the lock held: `host` took `a` (which may pin, or move, its experiment's kind of GPU)."""
        move = self.placement.took(a, host)
        if move is not None:
            self.reporter.note(f"{a.name} r{a.round}", move)

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
            a = self._take(worker)
            if a is None:
                with self._cv:
                    down = host in self.down
                if down and self._await_back(worker):
                    continue
                return
            self._run_one(worker, a)
            with self._cv:
                self._running.pop(worker, None)
                self._cv.notify_all()
            self._report_totals()

    def _take(self, worker: str) -> PlannedAttempt | None:
        """The worker's next attempt, marked running; None when the sweep is over for it or its host is down."""
        host = self._host_of(worker)
        with self._cv:
            while True:
                if self.cancel.is_set() or self._budget_spent() or host in self.down:
                    return None
                if not self._pending and not self._running:
                    return None  # (while others run, one of their attempts may come back for a retry)
                a = self._next_for(worker)
                if a is not None:
                    self._pending.remove(a)
                    self._running[worker] = a
                    self._took(a, host)
                    return a
                self._cv.wait(1.0)

    # ------------------------------------------------------------------ re-probing down hosts

    def _await_back(self, worker: str) -> bool:
        """The worker's host is down: re-probe it when due (a cluster's other job slots wait for the first's
        probe). True once it is back; False when the sweep needs it no more — cancelled, budget spent, nothing
        left that could run on it — or it failed `reprobe_tries` probes in a row."""
        host = self._host_of(worker)
        while True:
            with self._cv:
                while True:
                    if (self.cancel.is_set() or self._budget_spent() or self.probe is None
                            or self.health.given_up(host) or not self._could_use(host)):
                        return False
                    if host not in self.down:
                        return True
                    wait = self.health.probe_wait(host, time.monotonic())
                    if worker == host and wait <= 0:
                        break
                    self._cv.wait(min(wait, 1.0) if wait > 0 else 1.0)  # woken early by any attempt's end
            answer = ask_host(self.probe, host, self.hosts[host])  # outside the lock: it may take a connect timeout
            with self._cv:
                self._probe_answered(host, answer)

    def _could_use(self, host: str) -> bool:
        """Called with the lock held: an attempt not yet ended might run on the host (a running one may come
        back for a retry). Stops at the first: in the common case that is the first pending one."""
        for a in itertools.chain(self._pending, self._stranded, self._running.values()):
            if self.placement.why(a, host) is None:
                return True
        return False

    def _probe_answered(self, host: str, answer: int | str) -> None:
        """Called with the lock held: a probe's answer (a GPU count, or why the host could not say)."""
        if self.health.probe_answered(host, answer, now=time.monotonic()):
            self._host_cool_until.pop(host, None)
            self.outcome.back[host] = time.time()
            self._pending += sorted(self._stranded, key=lambda a: a.order)  # what waited for it: placed again
            self._stranded = []
            self._refuse_unplaceable()
            self.reporter.host_up(host, self.outcome.back[host])
        self._cv.notify_all()

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
        except Exception as exc:  # unforeseen (a bug, a library's exception not caught below us): the host's failure,
            infra, reason = True, ": ".join(filter(None, (type(exc).__name__, str(exc))))  # not a dead worker
        with self._cv:
            if not infra:  # an infrastructure failure is quick: it would make the time left look short
                self._durations.append(time.monotonic() - t0)
                self._work_s += self._durations[-1]
            if infra:
                self._avoid.setdefault(a.key, set()).add(host)
                self._host_failed(host, reason or (record.error if record and record.error else "infra-error"))
            else:
                self.health.succeeded(host)
            if infra and self._may_retry(a):
                self._host_cool_until[host] = time.monotonic() + self.hosts[host].retry_after
                self._pending.insert(0, a)  # retried first, later or on another host
                self.reporter.note(label, f"infrastructure failure on {host}; will retry")
            elif record is not None:
                self.outcome.done.append(record)
            else:
                self._stranded.append(a)  # nothing on disk ends it: left for a resume, not lost
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
        healthy = [n for n in self._live_hosts() - avoid
                   if not self.health.has_failures_in_row(n) and self.placement.why(a, n) is None]
        return charged < 2 * MAX_INFRA_TRIES and bool(healthy)

    def _host_failed(self, host: str, reason: str) -> None:
        """Called with the lock held: one more infrastructure failure in a row; it may take the host down."""
        down = self.health.failed(host, reason, now=time.monotonic(), wall=time.time())
        if down is not None:
            self.reporter.host_down(host, down)

    def _latest_record(self, a: PlannedAttempt) -> Record | None:
        """The attempt's newest record: read from its experiment's folder only (not the whole run's, which
        grows with the sweep: a host going down must not cost a read of every record)."""
        try:
            recs = [r for r in self.store.experiment_records(self.run_id, a.name) if r.key == a.key]
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

