"""The bisect's controller loop (harness/run/bisect.py) with a stand-in for `runner.run_attempt`: histories of
several layouts, a Slurm cluster as the host (the same attempt path as a sweep's: the runner gets the cluster's
entry as it is), an interrupted run resumed from its records, a host that refuses an attempt; and the command's
own checks of what it is given."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.bisection import Found
from harness.cli.bisect import check_same, parse_metric
from harness.common.outcome import CommitInfo, HistoryReport
from harness.common.protocol import Final, Status
from harness.errors import ConfigError, HostError, Interrupted
from harness.experiments.config import ClusterConfig, ClusterHost, HostConfig
from harness.experiments.files import read_experiment_file
from harness.experiments.resolve import resolve_file
from harness.results.schemas import Record
from harness.results.store import ResultsStore
from harness.run import bisect as bisect_run
from harness.run.bisect import Bisector, new_bisect, read_history
from harness.run.runner import AttemptOutcome
from harness.triage.verdict import Verdict
from tests.conftest import PATCHES, write_experiment

BENCH = [{"name": "dec", "num_prompts": 2, "input_len": 8, "output_len": 8}]
HOST = HostConfig(address="local", repo="/srv/sglang", python="/usr/bin/python3", allow_dirty=("notes.txt",))


class FakeTarget:
    """Stands in for run_attempt on a history of `n` commits: from `slow_at` on, decode 15 % slower; `broken_at`
    does not start. Writes each attempt's record as run_attempt does; `interrupt_at`: that call is Ctrl-C'd."""

    def __init__(self, commits: list[str], slow_at: int, broken_at: int | None = None, seed: int = 0,
                 interrupt_at: int | None = None, refuse_at: int | None = None) -> None:
        self.commits, self.slow_at, self.broken_at = commits, slow_at, broken_at
        self.rng = random.Random(seed)
        self.interrupt_at, self.refuse_at = interrupt_at, refuse_at
        self.calls: list[tuple[str, Any, str]] = []

    def __call__(self, resolved: Any, host_name: str, host: Any, store: ResultsStore, run_id: str,
                 **kw: Any) -> AttemptOutcome:
        assert set(kw) == {"reporter", "transport_factory", "lock_wait_s"}
        self.calls.append((resolved.checkout, host, resolved.name))
        k = self.commits.index(resolved.checkout)
        directory = store.new_attempt_dir(run_id, resolved.name)
        common = dict(run_id=run_id, experiment=resolved.name, attempt=directory.name, host=host_name,
                      checkout=resolved.checkout)
        if len(self.calls) == self.interrupt_at:
            store.write_record(directory, Record(status=Status.ABORTED, **common))
            raise Interrupted("interrupted")
        if len(self.calls) == self.refuse_at:
            rec = Record(status=Status.PREFLIGHT_FAILED, error="target tree not clean", dirty=["x.py"], **common)
        elif k == self.broken_at:
            rec = Record(status=Status.CRASHED, verdict=Verdict(category="import-error", key_line="ImportError: x"),
                         revert={"verified": True}, **common)
        else:
            median = 8.0 * (1.15 if k >= self.slow_at else 1.0)
            samples = [median * (1 + self.rng.gauss(0, 0.02)) for _ in range(5)]
            rec = Record(status=Status.OK, metrics={"dec": {"samples": {"median_itl_ms": samples}}},
                         revert={"verified": True}, **common)
        store.write_record(directory, rec)
        return AttemptOutcome(rec, directory)


def setup(tmp_path: Path, n: int, host: HostConfig = HOST, name: str = "box") -> tuple[Any, Any, ResultsStore]:
    exp = write_experiment(tmp_path, "decode", 30000, bench=BENCH)
    resolved = resolve_file(exp, PATCHES)
    commits = [f"{i:02d}" + "c" * 38 for i in range(n)]
    history = HistoryReport(head=commits[-1], branch="refs/heads/main",
                            commits=[CommitInfo(sha=c, subject=f"change {i}") for i, c in enumerate(commits)])
    info = new_bisect("run1", resolved, name, history, good="main~%d" % (n - 1), bad="main", case="dec",
                      metric="median_itl_ms", max_attempts=3, hosts_file=None, patches_dir=PATCHES)
    store = ResultsStore(tmp_path / "results")
    store.write_bisect(info)
    return info, resolved, store


def bisector(info: Any, resolved: Any, store: ResultsStore, target: FakeTarget, host: HostConfig = HOST,
             lines: list[str] | None = None) -> Bisector:
    return Bisector(info, resolved, host, store, attempt_runner=target,
                    say=(lines if lines is not None else []).append)


@pytest.mark.parametrize(("n", "slow_at", "broken_at", "seed"), [(31, 17, 9, 1), (31, 3, 15, 2), (12, 11, 4, 3),
                                                                (20, 1, 10, 4), (40, 25, 24, 5)])
def test_layouts_are_bisected_to_their_slow_commit(tmp_path, n, slow_at, broken_at, seed):
    info, resolved, store = setup(tmp_path, n)
    target = FakeTarget([c.sha for c in info.commits], slow_at, broken_at, seed)
    lines: list[str] = []
    outcome = bisector(info, resolved, store, target, lines=lines).run()
    assert isinstance(outcome.decision, Found) and outcome.decision.first_bad == slow_at
    checked_out = [c for c, _, _ in target.calls]
    assert checked_out[:2] == [info.commits[0].sha, info.commits[-1].sha] and len(set(checked_out)) == len(checked_out)
    assert all(name == f"decode.{c[:10]}" for c, _, name in target.calls)  # one folder (and compare row) per commit
    if broken_at in [int(c[:2]) for c in checked_out]:
        assert "  → skip: crashed (import-error): ImportError: x" in lines
    assert lines[0].startswith("good end: ") and lines[2].startswith("bad end: ")
    assert lines[4].startswith(f"step 1 (of at most {math.ceil(math.log2(n - 1))}): ")


def test_a_cluster_is_bisected_through_the_same_attempt_path_and_its_history_read_on_the_login_node(tmp_path,
                                                                                                     monkeypatch):
    cluster = ClusterConfig(kind="slurm", partition="gpu", workdir="/shared/work", repo="/shared/sglang", gpus_per_node=8)
    host = ClusterHost.of("hpc", cluster)
    asked: list[tuple[str, Any, str, dict]] = []

    def service(name: str, target: HostConfig, mode: str, transport_factory: Any, **fields: Any) -> Final:
        asked.append((name, target, mode, fields))
        return Final(status=Status.OK, history=HistoryReport(head="b" * 40, commits=[
            CommitInfo(sha="a" * 40), CommitInfo(sha="b" * 40)]))

    monkeypatch.setattr(bisect_run, "service", service)
    history = read_history("hpc", host, "v1", "main", ["notes.txt"])
    assert history.head == "b" * 40
    [(name, target, mode, fields)] = asked
    assert (name, mode, target.address, target.repo) == ("hpc", "history", "local", "/shared/sglang")
    assert fields["history"].good == "v1" and fields["allow_dirty"] == ["notes.txt"]

    info, resolved, store = setup(tmp_path, 9, host, "hpc")
    target = FakeTarget([c.sha for c in info.commits], slow_at=5)
    outcome = bisector(info, resolved, store, target, host=host).run()
    assert isinstance(outcome.decision, Found) and outcome.decision.first_bad == 5
    assert all(h is host for _, h, _ in target.calls)  # the cluster's entry, as the scheduler hands it on


def test_an_interrupted_bisect_resumes_from_its_records_and_redoes_nothing_finished(tmp_path):
    info, resolved, store = setup(tmp_path, 31)
    shas = [c.sha for c in info.commits]
    whole = FakeTarget(shas, 17, 9, seed=7)
    bisector(info, resolved, store, whole).run()
    store2 = ResultsStore(tmp_path / "results2")
    store2.write_bisect(info)
    first = FakeTarget(shas, 17, 9, seed=7, interrupt_at=4)
    with pytest.raises(Interrupted):
        bisector(info, resolved, store2, first).run()
    second = FakeTarget(shas, 17, 9, seed=7)
    second.rng = first.rng  # the same measurements go on
    lines: list[str] = []
    outcome = bisector(info, resolved, store2, second, lines=lines).run()
    assert isinstance(outcome.decision, Found) and outcome.decision.first_bad == 17
    assert [c for c, _, _ in first.calls] + [c for c, _, _ in second.calls][1:] == [c for c, _, _ in whole.calls]
    assert second.calls[0][0] == first.calls[-1][0]  # the interrupted commit, tried again first
    assert outcome.ran == len(second.calls) and len(outcome.records) == len(whole.calls) + 1


def test_an_attempt_the_host_refuses_stops_the_bisect_and_a_resume_tries_that_commit_again(tmp_path):
    info, resolved, store = setup(tmp_path, 9)
    shas = [c.sha for c in info.commits]
    refused = FakeTarget(shas, 5, refuse_at=3)
    with pytest.raises(HostError, match="ended preflight-failed: target tree not clean"):
        bisector(info, resolved, store, refused).run()
    again = FakeTarget(shas, 5)
    outcome = bisector(info, resolved, store, again).run()
    assert again.calls[0][0] == refused.calls[-1][0]
    assert isinstance(outcome.decision, Found) and outcome.decision.first_bad == 5


@pytest.mark.parametrize(("history", "error", "says"), [
    (HistoryReport(head="h", dirty=["pkg/a.py"]), HostError, "is not clean: pkg/a.py"),
    (HistoryReport(head="h", journal="r1-a1"), HostError, "journal (r1-a1)"),
    (None, ConfigError, "the good end 'x' is not a commit"),
])
def test_a_history_that_cannot_be_bisected_is_refused_saying_why(monkeypatch, history, error, says):
    final = Final(status=Status.OK, history=history) if history else \
        Final(status=Status.PREFLIGHT_FAILED, error="the good end 'x' is not a commit of /srv/sglang")
    monkeypatch.setattr(bisect_run, "service", lambda *a, **k: final)
    with pytest.raises(error) as caught:
        read_history("box", HOST, "x", "HEAD", [])
    assert says in str(caught.value)


def test_the_metric_option_names_a_case_and_a_metric_that_exist(tmp_path):
    exp = read_experiment_file(write_experiment(tmp_path, "decode", 30000, bench=BENCH)).experiment
    only = exp.bench[0].name
    assert parse_metric("median_itl_ms", exp, tmp_path) == (only, "median_itl_ms")
    assert parse_metric(f"{only}:output_throughput", exp, tmp_path) == (only, "output_throughput")
    with pytest.raises(ConfigError, match="no bench case 'nope'"):
        parse_metric("nope:median_itl_ms", exp, tmp_path)
    with pytest.raises(ConfigError, match="unknown metric 'speed'"):
        parse_metric(f"{only}:speed", exp, tmp_path)


def test_a_resume_refuses_options_that_say_otherwise_than_the_run(tmp_path):
    info, _, _ = setup(tmp_path, 5)
    check_same(info, good=info.good_ref, bad=None, metric="median_itl_ms", host="box")
    for given in ({"good": "v2"}, {"metric": "dec:output_throughput"}, {"host": "other"}):
        with pytest.raises(ConfigError, match="leave the option out"):
            check_same(info, **{"good": None, "bad": None, "metric": None, "host": None, **given})
