"""Where the sweep scheduler puts attempts when hosts are of unknown arch, down from the start or dying:
nothing is pinned to a host of unknown arch, a down host gets no more work, and the sweep ends. The attempt
itself is a stand-in (tests/support/fake_runner.py): these are placement decisions, not SSH."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import yaml

from harness.cli.progress import SweepProgress
from harness.common.protocol import Status
from harness.experiments.config import HostConfig
from harness.experiments.files import read_sweep_file
from harness.experiments.plan import plan_sweep
from harness.results.store import ResultsStore
from harness.run.health import DownHost
from harness.run.scheduler import Scheduler
from tests.conftest import PATCHES
from tests.support.fake_runner import FakeRunner


class Log:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.totals_seen: list[tuple] = []
        self.down: dict[str, DownHost] = {}
        self.lock = threading.Lock()

    def stage(self, label, stage):
        pass

    def note(self, label, message):
        with self.lock:
            self.notes.append(f"{label}: {message}")

    def attempt_started(self, host, label):
        pass

    def attempt_finished(self, host, label, record):
        pass

    def totals(self, done, failed, left, eta_s):
        with self.lock:
            self.totals_seen.append((done, failed, left))

    def host_down(self, host, down):
        self.down[host] = down

    def host_up(self, host, since):
        with self.lock:
            self.notes.append(f"{host}: back up")


def _sweep(tmp_path: Path, backends: list[str], rounds: int = 2) -> Path:
    base = {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
            "server": {"port": "auto", "tp": 2, "kv_cache_dtype": "fp8_e4m3"},
            "bench": [{"name": "bs1", "num_prompts": 2, "input_len": 16, "output_len": 8, "max_concurrency": 1}]}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "matrix": {"backend": backends},
                                 "rounds": rounds, "budget": {"sweep": 60}}))
    return f


_repos = itertools.count()


def _host(arch: str | None) -> HostConfig:
    # A repo of its own: hosts sharing one are one worker.
    return HostConfig(address="local", repo=f"/nonexistent/repo{next(_repos)}", python="python3", gpus=8,
                      arch=arch, retry_after=0)


def _scheduler(tmp_path: Path, f: Path, hosts: dict[str, HostConfig], runner: FakeRunner, log: Log,
               run_id: str = "r1", **kw) -> Scheduler:
    plan = plan_sweep(read_sweep_file(f), PATCHES, hosts)
    return Scheduler(plan, hosts, ResultsStore(tmp_path / "results"), run_id, reporter=log, attempt_runner=runner,
                     **kw)


def test_a_dead_host_of_unknown_arch_pins_nothing_goes_down_and_the_sweep_ends(tmp_path):
    """The tester's night: `dead` (gpus, no arch) never answers, `good` is sm90. Every attempt that sm90 can
    run runs on `good`; the Blackwell-only ones are refused (cannot_run), not retried on the dead host; the
    dead host is down with its reason; nothing is left and the sweep does not wait for its budget."""
    hosts = {"dead": _host(None), "good": _host("sm90")}
    f = _sweep(tmp_path, ["flashinfer-mla", "flashinfer-mla-fp8", "trtllm_mla", "cutlass_mla"])
    runner = FakeRunner()
    runner.kill("dead", "connection timed out")
    log = Log()
    outcome = _scheduler(tmp_path, f, hosts, runner, log).run()

    assert set(outcome.down) == {"dead"} and "connection timed out" in outcome.down["dead"].reason
    assert outcome.left == []
    by_exp: dict[str, list[str]] = {}
    for r in outcome.done:
        by_exp.setdefault(r.experiment, []).append(r.status)
    assert by_exp["s-flashinfer-mla"] == [Status.OK] * 2
    assert by_exp["s-flashinfer-mla-fp8"] == [Status.OK] * 2
    for blackwell in ("s-trtllm_mla", "s-cutlass_mla"):
        assert by_exp[blackwell] == [Status.PREFLIGHT_FAILED] * 2
    refused = [r for r in outcome.done if r.status == Status.PREFLIGHT_FAILED]
    assert all(r.cannot_run and any("not in use" in c for c in r.cannot_run) for r in refused)
    assert sum(1 for h, _, _ in runner.runs if h == "dead") == 2  # down after two failures in a row
    assert all(h == "good" for h, _, s in runner.runs if s == "ok")


def test_a_host_dying_midway_leaves_its_work_to_the_others(tmp_path):
    hosts = {"a": _host("sm90"), "b": _host("sm90")}
    f = _sweep(tmp_path, ["flashinfer-mla", "triton", "flashmla"], rounds=3)
    runner = FakeRunner(duration=lambda key: 0.02)  # long enough that both hosts take work
    log = Log()

    def die_after_first(host, label, record):
        if host == "b":
            runner.kill("b", "connection lost: no word from the agent for 6 s")

    log.attempt_finished = die_after_first  # type: ignore[method-assign]
    outcome = _scheduler(tmp_path, f, hosts, runner, log).run()
    assert set(outcome.down) == {"b"} and "connection lost" in outcome.down["b"].reason
    assert outcome.left == []
    assert sorted(r.status for r in outcome.done) == [Status.OK] * 9
    assert log.totals_seen[-1] == (9, 0, 0)


def test_an_unforeseen_exception_is_the_hosts_failure_and_the_sweep_still_ends(tmp_path):
    """An attempt that raises what no one foresaw (the SSH transport once let paramiko's bare EOFError through
    when sshd hung up mid-handshake) must not kill its worker with the attempt still marked running: the other
    workers waited for it, and the sweep never ended. It is the host's failure: down after two in a row, saying
    why; what it could run goes elsewhere, and what only it could run is left for a resume, not lost."""
    hosts = {"a": _host("sm90"), "b": _host("sm100")}  # only `b` can run trtllm_mla: it must take work
    f = _sweep(tmp_path, ["flashinfer-mla", "trtllm_mla"])
    runner = FakeRunner()
    runner.unexpected["b"] = EOFError()
    sched = _scheduler(tmp_path, f, hosts, runner, Log())
    box = {}
    ended = threading.Event()
    threading.Thread(target=lambda: (box.update(outcome=sched.run()), ended.set()), daemon=True).start()
    if not ended.wait(30):
        sched.cancel.set()  # let the stuck sweep go, then fail
        ended.wait(30)
        raise AssertionError("the sweep never ended: a worker died with its attempt running")
    outcome = box["outcome"]
    assert set(outcome.down) == {"b"} and outcome.down["b"].reason.startswith("EOFError (2 failures in a row)")
    assert sorted((r.experiment, r.status, r.host) for r in outcome.done) == [("s-flashinfer-mla", Status.OK, "a")] * 2
    assert sorted((a.name, a.round) for a in outcome.left) == [("s-trtllm_mla", 1), ("s-trtllm_mla", 2)]


def test_work_only_down_hosts_could_run_is_left_for_a_resume(tmp_path):
    """Both sm90 hosts die at once: nothing is refused (a known sm90 host would run it), all is left, the sweep
    ends. At once: had one host failed an attempt and the other then failed the same attempt before either
    was down, Scheduler._may_retry charges it both tries and gives it up: no healthy host is left to try it."""
    hosts = {"a": _host("sm90"), "b": _host("sm90")}
    f = _sweep(tmp_path, ["flashinfer-mla", "triton"], rounds=2)
    runner = FakeRunner()
    runner.die_together = threading.Barrier(2)
    runner.kill("a")
    runner.kill("b")
    outcome = _scheduler(tmp_path, f, hosts, runner, Log()).run()
    assert set(outcome.down) == {"a", "b"}
    assert len(outcome.left) == 4 and outcome.done == []


def test_rounds_stay_on_one_kind_while_a_live_host_of_it_exists(tmp_path):
    hosts = {"h90": _host("sm90"), "h100": _host("sm100"), "unknown": _host(None)}
    f = _sweep(tmp_path, ["flashmla"], rounds=2)
    s = _scheduler(tmp_path, f, hosts, FakeRunner(), Log())
    s._pending = list(s.plan.attempts)
    first, second = s.plan.attempts
    s._took(first, "unknown")  # a host of unknown arch pins nothing
    assert s._next_for("h100") is first
    s._took(first, "h90")
    s._pending.remove(first)
    assert s._next_for("h100") is None and s._next_for("unknown") is None
    assert s._next_for("h90") is second
    s.down["h90"] = DownHost("connection timed out", 0.0)  # no live sm90 host: the rounds move
    assert s._next_for("h100") is second


def test_a_resumed_run_counts_what_it_already_holds(tmp_path):
    hosts = {"a": _host("sm90")}
    f = _sweep(tmp_path, ["flashinfer-mla", "triton"], rounds=2)
    _scheduler(tmp_path, f, hosts, FakeRunner(), Log()).run()
    log = Log()
    outcome = _scheduler(tmp_path, f, hosts, FakeRunner(), log).run()
    assert len(outcome.skipped) == 4
    assert log.totals_seen[0] == (4, 0, 0)


def test_the_progress_line_names_down_hosts():
    from rich.console import Console

    p = SweepProgress(Console(file=open("/dev/null", "w")), total=5)
    p.totals(2, 0, 3, 2.0)
    p.host_down("h2", DownHost("connection timed out (2 failures in a row)", 0.0))
    assert "waiting: h2 down since " in p.totals_line()
    assert "connection timed out" in p.totals_line()


def test_a_down_host_is_reprobed_and_comes_back_to_finish_the_sweep(tmp_path):
    """The only host drops off (two failures in a row: down) and is back by its first re-probe: it takes the
    work again and every attempt ends ok — nothing left for a resume, the host no longer down."""
    hosts = {"h2": _host("sm90")}
    f = _sweep(tmp_path, ["flashinfer-mla", "triton"], rounds=2)
    runner = FakeRunner()
    runner.kill("h2", "connection timed out")
    log = Log()

    def down_then_back(host, down):
        log.down[host] = down
        runner.revive(host)  # the host reboots while the sweep waits for its re-probe

    log.host_down = down_then_back  # type: ignore[method-assign]
    outcome = _scheduler(tmp_path, f, hosts, runner, log, probe=runner.probe, reprobe_after=0.01).run()
    assert outcome.left == [] and outcome.down == {}
    assert sorted(r.status for r in outcome.done) == [Status.OK] * 4
    assert set(outcome.back) == {"h2"} and "h2: back up" in log.notes
    assert runner.probes == [("h2", True)]


def test_a_host_that_stays_dead_is_probed_k_times_then_the_sweep_ends(tmp_path):
    """A permanently dead host costs the sweep its re-probes (3 by default, backoff doubling), not its budget:
    the work only it could run is left for a resume, and its reason says the probes failed."""
    hosts = {"a": _host("sm90")}
    f = _sweep(tmp_path, ["flashinfer-mla"], rounds=2)
    runner = FakeRunner()
    runner.kill("a", "connection timed out")
    outcome = _scheduler(tmp_path, f, hosts, runner, Log(), probe=runner.probe, reprobe_after=0.01).run()
    assert runner.probes == [("a", False)] * 3
    assert len(outcome.left) == 2 and outcome.back == {}
    assert "3 re-probes failed" in outcome.down["a"].reason


def test_a_down_host_is_not_probed_once_nothing_is_left_for_it(tmp_path):
    """`b` dies; `a` runs everything before b's re-probe is due (far off): the sweep ends at once, unprobed."""
    hosts = {"a": _host("sm90"), "b": _host("sm90")}
    f = _sweep(tmp_path, ["flashinfer-mla", "triton"], rounds=2)
    # a's attempts take 0.3 s, b's failures none: b fails twice (down) long before a could finish them all,
    # however loaded the machine (with no duration, a could take all four first and b never go down).
    runner = FakeRunner(duration=lambda key: 0.3)
    runner.kill("b")
    outcome = _scheduler(tmp_path, f, hosts, runner, Log(), probe=runner.probe, reprobe_after=3600).run()
    assert set(outcome.down) == {"b"} and outcome.left == [] and runner.probes == []
    assert sorted(r.status for r in outcome.done) == [Status.OK] * 4


def test_the_progress_line_drops_a_host_back_up():
    from rich.console import Console

    p = SweepProgress(Console(file=open("/dev/null", "w")), total=5)
    p.host_down("h2", DownHost("connection timed out (2 failures in a row)", 0.0))
    p.host_up("h2", 0.0)
    assert "waiting" not in p.totals_line()
