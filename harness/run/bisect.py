"""`harness bisect`'s work on the host: its history read through the agent (mode history), then one attempt after
another — each an ordinary attempt through the runner (over SSH, locally or as a Slurm job: whatever the host
is), at one commit, recorded in the run — until analysis/bisection.py names the first bad commit. Resumable:
the decisions are made again from the run's records, so a resumed bisect goes on where it stopped."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..analysis import bisection as b
from ..common.outcome import HistoryReport, HistoryRequest
from ..common.protocol import Mode, Status
from ..errors import ConfigError, HostError
from ..experiments.config import ClusterHost, HostConfig
from ..experiments.resolve import Resolved
from ..hosts.targets import connect
from ..hosts.transport import Transport
from ..results.schemas import BisectInfo, Record
from ..results.store import ResultsStore
from .runner import AttemptOutcome, Reporter, SilentReporter, run_attempt_in_foreground, service

TransportFactory = Callable[[str, HostConfig], Transport]


def read_history(host_name: str, host: HostConfig, good: str, bad: str, allow_dirty: Sequence[str], *,
                 transport_factory: TransportFactory = connect) -> HistoryReport:
    """The commits from `good` to `bad` on the host (a cluster's: as its login node sees the shared repo), refused
    — changing nothing — when they cannot be bisected or the tree is not as a bisect needs it."""
    target = host.cluster.login_host if isinstance(host, ClusterHost) else host
    final = service(host_name, target, Mode.HISTORY.value, transport_factory,
                    history=HistoryRequest(good=good, bad=bad), allow_dirty=list(allow_dirty))
    if final.history is None:
        if final.status == Status.PREFLIGHT_FAILED:
            raise ConfigError(f"host {host_name!r}: {final.error}", hint="--good and --bad name commits of the "
                              f"target repo ({host.repo}), good an ancestor of bad on its first-parent line")
        raise HostError(host_name, final.error or "no answer about the target repo's history")
    history = final.history
    if history.journal:
        raise HostError(host_name, f"an interrupted attempt's journal ({history.journal}) is in {host.repo}",
                        hint=f"`harness recover {host_name}` restores the tree first; nothing was changed")
    if history.dirty:
        raise HostError(host_name, f"the target tree {host.repo} is not clean: {', '.join(history.dirty[:10])}"
                        + (f" and {len(history.dirty) - 10} more" if len(history.dirty) > 10 else ""),
                        hint="a bisect checks out other commits: commit or stash these changes first (untracked "
                             "files an allow_dirty glob covers may stay); nothing was changed")
    return history


def new_bisect(run_id: str, resolved: Resolved, host_name: str, history: HistoryReport, *, good: str, bad: str,
               case: str, metric: str, max_attempts: int, hosts_file: Path | None, patches_dir: Path | None
               ) -> BisectInfo:
    return BisectInfo(
        run_id=run_id, experiment=resolved.name, experiment_file=str(resolved.file.resolve()), host=host_name,
        hosts_file=str(hosts_file.resolve()) if hosts_file else None,
        patches_dir=str(patches_dir.resolve()) if patches_dir else None, good_ref=good, bad_ref=bad,
        commits=history.commits, case=case, metric=metric,
        max_attempts=max_attempts, head=history.head, branch=history.branch)


def step_experiment(resolved: Resolved, sha: str) -> Resolved:
    """The experiment at one commit: checked out first, its records under `<name>.<commit>` (one row per commit
    in `harness compare`)."""
    exp = resolved.experiment.model_copy(update={"name": f"{resolved.name}.{sha[:10]}"})
    return dataclasses.replace(resolved, experiment=exp, checkout=sha)


@dataclass
class BisectOutcome:
    decision: b.Decision  # Found or Stuck: the bisect ended
    records: list[Record]  # the run's, this call's included
    ran: int  # attempts this call made


class Bisector:
    """One bisect run, from its records so far to its answer. `say` gets a line as each attempt starts (which
    commit, as what) and ends (its verdict); `reporter` the attempt's stages, as for `harness run`."""

    def __init__(self, info: BisectInfo, resolved: Resolved, host: HostConfig, store: ResultsStore, *,
                 say: Callable[[str], None], reporter: Reporter | None = None,
                 attempt_runner: Callable[..., AttemptOutcome] = run_attempt_in_foreground,
                 transport_factory: TransportFactory = connect, lock_wait_s: float = 60.0) -> None:
        self.info, self.resolved, self.host, self.store = info, resolved, host, store
        self.say, self.reporter = say, reporter or SilentReporter()
        self.attempt_runner, self.transport_factory, self.lock_wait_s = attempt_runner, transport_factory, lock_wait_s
        self.shas = [c.sha for c in info.commits]

    def run(self) -> BisectOutcome:
        records = list(self.store.iter_records(self.info.run_id))
        ran = 0
        while True:
            obs = b.observations(records, self.shas, self.info.case, self.info.metric)
            trials = b.trials_of(obs)
            decision = b.decide(trials, len(self.shas), self.info.metric, self.info.max_attempts)
            if not isinstance(decision, b.Measure):
                return BisectOutcome(decision, records, ran)
            self.say(self._starting(decision, trials))
            outcome = self.attempt_runner(step_experiment(self.resolved, self.shas[decision.index]), self.info.host,
                                          self.host, self.store, self.info.run_id, reporter=self.reporter,
                                          transport_factory=self.transport_factory, lock_wait_s=self.lock_wait_s)
            records.append(outcome.record)
            ran += 1
            self._check(outcome.record)
            self.say(self._ended(decision.index, records))

    def _starting(self, d: b.Measure, trials: dict[int, b.Trial]) -> str:
        n = len(self.shas)
        c = self.info.commits[d.index]
        tried = {i for i in trials if 0 < i < n - 1}
        if d.index in (0, n - 1):
            what = "good end" if d.index == 0 else "bad end"
        else:
            verdicts = b.step_verdicts(trials, n, self.info.metric)
            verdicts.pop(d.index, None)  # this step's own, when it is measured again
            step = len(tried | {d.index})
            what = f"step {step} (of at most {step - 1 + b.steps_left(verdicts, n)})"
        again = f", attempt {trials[d.index].attempts + 1}" if d.again else ""
        return f"{what}: {c.sha[:10]} (commit {d.index} of {n - 1}) {c.subject}{again}"

    def _ended(self, index: int, records: list[Record]) -> str:
        """The commit's verdict so far, from every record of it."""
        obs = b.observations(records, self.shas, self.info.case, self.info.metric)
        trials = b.trials_of(obs)
        t = trials.get(index, b.Trial())
        n = len(self.shas)
        if t.skip is not None:
            return f"  → skip: {t.skip}"
        if index in (0, n - 1):
            return f"  → {len(t.samples)} samples of {self.info.case}:{self.info.metric}"
        j = b.judge_step(trials.get(0, b.Trial()), trials.get(n - 1, b.Trial()), t, self.info.metric)
        return f"  → {j.verdict}: {b.ratio_words(j.vs_good)} of good, {b.ratio_words(j.vs_bad)} of bad"

    def _check(self, rec: Record) -> None:
        """An attempt that is no verdict on its commit (the host refused it, or it did not finish) stops the bisect:
        a resume tries that commit again."""
        if b.host_problem(rec) or not rec.is_final():
            raise HostError(self.info.host, f"the attempt at {(rec.checkout or '?')[:10]} ended {rec.status}: "
                            f"{(rec.error or '').strip().splitlines()[0] if rec.error else 'no reason given'}",
                            hint="fix the host, then resume the bisect (it tries that commit again)")
