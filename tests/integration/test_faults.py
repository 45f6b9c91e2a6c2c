"""Faults and bad input: the box is always left clean, nothing is lost, nothing from a file runs.

Each fault asserts the end state — tree byte-identical, no process of the attempt left, no record lost
or duplicated, a clear status — and measures the time to a clean state. With HARNESS_FAULT_REPORT=path
set, the figures are written there (scripts/fault_report renders docs/reliability.md from them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import yaml

from harness.experiments.config import HostConfig
from harness.experiments.files import read_sweep_file
from harness.experiments.plan import plan_sweep
from harness.experiments.resolve import resolve_file
from harness.results.store import ResultsStore, load_record, new_run_id
from harness.run.runfile import write_run_file
from harness.run.runner import host_status, recover_host, run_attempt
from harness.run.scheduler import Scheduler
from harness.sim import init_target
from tests.conftest import PATCHES, marked_processes, records_on_disk, tree_snapshot, wait_until, write_experiment
from tests.support import netns
from tests.support.figures import figure, write_figures
from tests.support.sshd import SSHServer, free_port

pytestmark = pytest.mark.integration
HARNESS = [sys.executable, "-m", "harness"]
LONG_BENCH = [{"name": "long", "num_prompts": 400, "input_len": 32, "output_len": 64, "max_concurrency": 1}]

@pytest.fixture(scope="module", autouse=True)
def _write_figures():
    yield
    write_figures()


def local(target, tmp_path, **over) -> tuple[str, HostConfig]:
    cfg = dict(address="local", repo=str(target.repo), python=str(target.python), gpus=8, arch="sm90",
               workdir=str(tmp_path / "work"))
    cfg.update(over)
    return "sim", HostConfig(**cfg)


def attempt(tmp_path, host, f, patches=PATCHES, **kw):
    name, cfg = host
    out = run_attempt(resolve_file(f, patches), name, cfg, ResultsStore(tmp_path / "results"),
                      new_run_id(), **kw)
    return load_record(out.directory / "record.json")


def clean(target, before, run_id) -> bool:
    return (tree_snapshot(target.repo) == before and not marked_processes(run_id)
            and not (target.repo / ".git" / "harness" / "journal.json").exists())


class StageTrigger:
    """A reporter that calls `action` the `nth` time (the first, by default) an attempt enters `stage`."""

    def __init__(self, stage, action, nth=1):
        self.stage_name, self.action, self.fired = stage, action, threading.Event()
        self.left = nth

    def stage(self, label, stage):
        if stage == self.stage_name and not self.fired.is_set():
            self.left -= 1
            if self.left == 0:
                self.fired.set()
                self.action()

    def note(self, label, message):
        pass

    def attempt_started(self, host, label):
        pass

    def attempt_finished(self, host, label, record):
        pass

    def host_down(self, *a):
        pass

    def totals(self, *a):
        pass


# ============================================================================ 1. connection cut


@pytest.fixture
def netns_host(tmp_path):
    why = netns.available()
    if why:
        pytest.skip(why)
    ns = netns.NetnsHost(f"hxf{uuid.uuid4().hex[:4]}", 60).create()
    server = None
    try:
        # sshd as a GPU box should be configured: drop a silent client after ~6 s.
        server = SSHServer(tmp_path / "sshd", address=ns.address, port=22,
                           extra_config="ClientAliveInterval 2\nClientAliveCountMax 3\n").start(netns=ns.name)
        target = init_target(tmp_path / "target", arch="sm90")
        host = HostConfig(**server.host_entry(), repo=str(target.repo), python=str(target.python), gpus=8,
                          arch="sm90", workdir=str(tmp_path / "work"), keepalive=2, retry_after=1.0)
        yield ns, host, target
    finally:
        if server:
            server.stop()
        ns.destroy()


def test_connection_cut_mid_benchmark_then_retried_once_when_the_link_returns(tmp_path, netns_host):
    ns, host, target = netns_host
    before = tree_snapshot(target.repo)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({
        "name": "cut", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
        "server": {"port": 30000, "tp": 2, "kv_cache_dtype": "fp8_e4m3"},
        "bench": [{"name": "b", "num_prompts": 60, "input_len": 16, "output_len": 32, "max_concurrency": 1}],
        "timeouts": {"ready": 60, "no_progress": 30, "stop_grace": 5}}))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"name": "cut", "base": "base.yaml"}))
    hosts = {"nshost": host}
    plan = plan_sweep(read_sweep_file(tmp_path / "sweep.yaml"), PATCHES, hosts)
    store = ResultsStore(tmp_path / "results")
    run_id = new_run_id()
    write_run_file(store, run_id, plan, hosts)
    marks: dict[str, float] = {}

    class Cutter(StageTrigger):
        def stage(self, label, stage):
            if stage == "bench" and "cut" not in marks:
                marks["cut"] = time.monotonic()
                ns.link(False)

        def attempt_finished(self, host_name, label, record):
            if record.status == "infra-error" and "infra" not in marks:
                marks["infra"] = time.monotonic()
                # The host cleans up by itself: watch it happen, then give the link back.
                marks["host_clean"] = wait_until(lambda: clean(target, before, run_id), 60) or -1
                ns.link(True)

    Scheduler(plan, hosts, store, run_id, reporter=Cutter("bench", None)).run()
    recs = records_on_disk(store.root, run_id)[plan.attempts[0].key]
    assert [r.status for r in recs] == ["infra-error", "ok"], "marked infra-error, then retried once, and it worked"
    detect = marks["infra"] - marks["cut"]
    assert detect <= 30, f"connection loss noticed after {detect:.1f} s"
    host_clean = marks["infra"] - marks["cut"] + marks["host_clean"]
    assert marks["host_clean"] >= 0, "the agent did not stop the server and revert after losing the link"
    assert clean(target, before, run_id)
    figure("connection cut mid-benchmark (link down)", survived=True, time_to_clean_s=round(host_clean, 1), lost=0,
           note=f"controller: infra-error after {detect:.1f} s; retried once when the link returned: ok")


# ============================================================================ 2. the agent killed


def _run_in_background(tmp_path, f, host_file_entry, extra=()):
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": host_file_entry}}))
    return subprocess.Popen(HARNESS + ["run", str(f), "--results-dir", str(tmp_path / "results"), "--patches-dir",
                                       str(PATCHES), *extra], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for_stage(proc, stage):
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.rstrip().endswith(f": {stage}"):
            return seen
    raise AssertionError("never reached " + stage + ":\n" + "".join(seen))


def _host_entry(target, tmp_path):
    # retry_after: a retried attempt waits 1 s, not the production 30 s (the tests prove the retry, not its wait)
    return {"address": "local", "repo": str(target.repo), "python": str(target.python), "gpus": 8,
            "workdir": str(tmp_path / "work"), "retry_after": 1}


@pytest.mark.parametrize("controller", ["alive", "killed-too"])
def test_agent_sigkilled_mid_benchmark_its_watchdog_cleans_the_host_within_10s(tmp_path, sim_target, controller):
    """SIGKILL of the agent (the OOM killer, a careless kill -9): nothing on the host may keep running or
    stay patched until some later harness command happens to touch the host. The agent's watchdog stops
    the server and restores the tree by itself; a controller that is still alive recovers at once and
    records what happened (and, when the controller died too, nobody is needed at all)."""
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "victim", free_port(), backend="flashinfer-mla", patches=["sim_fp8_kv_into_mla_plan"],
                         server={"kv_cache_dtype": "auto"}, bench=LONG_BENCH, timeouts={"stop_grace": 5})
    proc = _run_in_background(tmp_path, f, _host_entry(sim_target, tmp_path))
    _wait_for_stage(proc, "bench")
    journal = json.loads((sim_target.repo / ".git" / "harness" / "journal.json").read_text())
    assert tree_snapshot(sim_target.repo) != before and marked_processes(journal["run_id"])
    if controller == "killed-too":
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    t_kill = time.monotonic()
    os.kill(journal["agent_pid"], signal.SIGKILL)
    took = wait_until(lambda: clean(sim_target, before, journal["run_id"]), 10)
    assert took is not None, "10 s after the agent's death the server still runs or the tree is still patched"
    if controller == "alive":
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 3, out
        rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
        assert rec["status"] == "infra-error" and "without a final report" in rec["error"]
        # Whoever took the lock first did it: the watchdog, or the controller's own recovery racing it.
        assert rec["recovered"]["by"] in ("watchdog", "recover") and rec["recovered"]["revert"]["verified"]
        assert rec["recovered"]["stop"]["state"] == "stopped"
        # The record says what became of the tree, as the recovery found it: restored and verified.
        assert rec["revert"] == rec["recovered"]["revert"], rec["revert"]
        assert rec["revert"]["tree_after"] == rec["revert"]["tree_before"] and not rec["revert"]["diff"]
        assert tree_snapshot(sim_target.repo) == before
    status = host_status("box", HostConfig(**_host_entry(sim_target, tmp_path)))
    seen = status.repo_status
    assert seen is not None and seen.journal is None and seen.lock is not None and not seen.lock.held
    figure(f"agent SIGKILLed mid-benchmark (controller {controller})", survived=True,
           time_to_clean_s=round(time.monotonic() - t_kill if took is None else took, 1), lost=0,
           note="the agent's watchdog stopped the server and restored the tree; no harness command needed")


def test_recovery_never_kills_a_reused_pid(tmp_path, sim_target):
    # A journal whose server pid now belongs to someone else's process (different start time, no marker).
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        gitdir = sim_target.repo / ".git" / "harness"
        gitdir.mkdir(exist_ok=True)
        base = subprocess.run(["git", "-C", str(sim_target.repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        tree = subprocess.run(["git", "-C", str(sim_target.repo), "write-tree"], capture_output=True,
                              text=True).stdout.strip()
        (gitdir / "journal.json").write_text(json.dumps({
            "version": 1, "run_id": "old", "attempt_id": "old-01", "agent_pid": 1, "marker": "old/old-01",
            "repo": str(sim_target.repo), "base_commit": base, "tree_before": tree, "dirty_before": [], "restore": [],
            "delete": [], "created_dirs": [], "state": "running",
            "server": {"pid": bystander.pid, "pgid": bystander.pid, "start": 1}}))
        res = recover_host("sim", local(sim_target, tmp_path)[1])
        assert res.recovered.stop.state in ("already-gone", "killed-marked")
        assert bystander.poll() is None, "recovery killed a process that was not the attempt's"
    finally:
        bystander.kill()
        bystander.wait()


# ============================================================================ 3. two controllers


def test_second_controller_fails_at_once_naming_the_holder_or_waits(tmp_path, sim_target):
    f = write_experiment(tmp_path, "first", free_port(), backend="flashinfer-mla",
                         bench=[{"name": "b", "num_prompts": 30, "input_len": 16, "output_len": 32,
                                 "max_concurrency": 1}])
    first = _run_in_background(tmp_path, f, _host_entry(sim_target, tmp_path))
    _wait_for_stage(first, "bench")
    holder = json.loads((sim_target.repo / ".git" / "harness" / "lock.json").read_text())
    g = write_experiment(tmp_path, "second", free_port(), backend="flashinfer-mla")
    t0 = time.monotonic()
    p = subprocess.run(HARNESS + ["run", str(g), "--results-dir", str(tmp_path / "results")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 10, "the second controller must not wait without --wait"
    assert p.returncode == 3
    assert f"locked by run {holder['run_id']}" in p.stdout + p.stderr and holder["since"] in p.stdout + p.stderr
    waiter = subprocess.run(HARNESS + ["run", str(g), "--results-dir", str(tmp_path / "results"), "--wait", "120"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=180)
    first.communicate(timeout=120)
    assert first.returncode == 0 and waiter.returncode == 0, waiter.stdout + waiter.stderr
    recs = [load_record(r) for r in (tmp_path / "results").rglob("record.json")]
    assert sorted(r.status for r in recs) == ["infra-error", "ok", "ok"]
    figure("second controller on the same host", survived=True, time_to_clean_s=0.0, lost=0,
           note="refused at once naming the holder; with --wait it ran after the first")


# ============================================================================ 4. port taken


def test_foreign_process_on_the_port_refused_or_avoided_with_port_auto(tmp_path, sim_target):
    import socket

    port = free_port()
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    try:
        f = write_experiment(tmp_path, "fixed", port, backend="flashinfer-mla")
        rec = attempt(tmp_path, local(sim_target, tmp_path), f)
        assert rec.status == "preflight-failed" and f"port {port} is already in use" in rec.error
        assert "port: auto" in rec.error
        f = write_experiment(tmp_path, "auto", "auto", backend="flashinfer-mla",
                             bench=[{"name": "b", "num_prompts": 2, "input_len": 8, "output_len": 8}])
        rec = attempt(tmp_path, local(sim_target, tmp_path), f)
        assert rec.status == "ok" and rec.server is not None and rec.server.port != port
    finally:
        s.close()
    figure("foreign process on the server's port", survived=True, time_to_clean_s=0.0, lost=0,
           note="refused in preflight; `port: auto` picks a free one")


# ============================================================================ 5. SIGTERM ignored, GPU memory


def test_server_ignoring_sigterm_is_killed_and_gpu_release_awaited(tmp_path, sim_target):
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "stubborn", free_port(), backend="flashinfer-mla",
                         server={"env": {"SGLANG_SIM_IGNORE_SIGTERM": "1"}},
                         bench=[{"name": "b", "num_prompts": 2, "input_len": 8, "output_len": 8}],
                         timeouts={"stop_grace": 1.5})
    t0 = time.monotonic()
    rec = attempt(tmp_path, local(sim_target, tmp_path), f)
    assert rec.status == "ok"
    assert rec.server is not None and rec.server.stop is not None
    stop = rec.server.stop
    assert stop.signal == "KILL" and stop.left == [] and stop.gpu_dirty is None
    assert 1.5 <= rec.timings["stop_s"] < 10
    assert clean(sim_target, before, rec.run_id)
    apps = subprocess.run([str(sim_target.python.parent / "nvidia-smi"), "--query-compute-apps=pid,used_memory",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout
    assert apps.strip() == "", "GPU memory still held after the attempt"
    figure("server ignores SIGTERM", survived=True, time_to_clean_s=round(rec.timings["stop_s"], 1), lost=0,
           note=f"KILLed after the {1.5} s grace; GPU memory released (attempt {time.monotonic() - t0:.1f} s)")


def test_gpu_memory_that_stays_held_is_recorded_as_gpu_dirty(tmp_path, sim_target):
    f = write_experiment(tmp_path, "leaky", free_port(), backend="flashinfer-mla",
                         server={"env": {"SGLANG_SIM_LEAK_GPU_MEMORY": "1"}},
                         timeouts={"gpu_release": 1.0})
    rec = attempt(tmp_path, local(sim_target, tmp_path), f)
    dirty = rec.gpu_dirty
    assert dirty and all(int(mib) > 0 for mib in dirty.values())
    assert rec.server is not None and rec.server.stop is not None
    assert rec.server.stop.left == []  # the processes are gone; the memory is not
    figure("GPU memory stays held after the server is gone", survived=True, time_to_clean_s=None, lost=0,
           note="recorded as gpu_dirty with the pids and MiB still held")


# ============================================================================ 6. Ctrl-C at every stage


@pytest.mark.parametrize("stage", ["lock", "preflight", "patch", "launch", "wait", "bench"])
def test_cancel_during_each_stage_stops_reverts_and_records_aborted(tmp_path, sim_target, stage):
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "cancelled", free_port(), backend="flashinfer-mla",
                         patches=["sim_fp8_kv_into_mla_plan"], server={"kv_cache_dtype": "auto"}, bench=LONG_BENCH)
    cancel = threading.Event()
    trigger = StageTrigger(stage, cancel.set)
    t0 = time.monotonic()
    from harness.errors import Interrupted

    with pytest.raises(Interrupted):
        attempt(tmp_path, local(sim_target, tmp_path), f, reporter=trigger, cancel=cancel)
    rec = load_record(next((tmp_path / "results").rglob("record.json")))
    assert rec.status == "aborted"
    # Once the patch stage has run (the journal is written there, even for a patch-less backend), the record
    # must show a revert that happened and was verified; before it, there was nothing to revert.
    if stage in ("patch", "launch", "wait", "bench") or "patch_s" in rec.timings:
        assert rec.revert is not None and rec.revert.verified, rec.revert
        assert rec.revert.tree_before == rec.revert.tree_after
    else:
        assert rec.revert is None, rec.revert
    assert clean(sim_target, before, rec.run_id)
    figure(f"Ctrl-C during {stage}", survived=True, time_to_clean_s=round(time.monotonic() - t0, 1), lost=0,
           note="recorded as aborted; a sweep reruns it on --resume")


# ============================================================================ 7. no room for results


def test_no_room_left_for_results_is_a_clear_error_and_no_partial_record(tmp_path, sim_target):
    before = tree_snapshot(sim_target.repo)
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root and mount permission)")
    try:
        filler = mnt / "filler"
        with open(filler, "wb", buffering=0) as w:  # fill the disk, then leave one page: the run starts, the record cannot fit
            try:
                while True:
                    w.write(b"\0" * 4096)
                    w.flush()
            except OSError:
                pass
        os.truncate(filler, max(0, filler.stat().st_size - 4096))
        f = write_experiment(tmp_path, "big", free_port(), backend="flashinfer-mla",
                             bench=[{"name": "b", "num_prompts": 2, "input_len": 8, "output_len": 8}])
        (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": _host_entry(sim_target, tmp_path)}}))
        p = subprocess.run(HARNESS + ["run", str(f), "--results-dir", str(mnt)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode != 0 and "Traceback" not in p.stderr
        assert "no space left" in p.stderr.lower()
        assert not list(mnt.rglob("record.json")), "no partial record"
        assert not list(mnt.rglob(".record.json*")), "no temp file left behind"
        assert tree_snapshot(sim_target.repo) == before, "the host was reverted all the same"
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
    figure("no room left for results", survived=True, time_to_clean_s=None, lost=0,
           note="clear error, exit non-zero, no partial record (the host was still reverted)")


# ============================================================================ 9. shell metacharacters


def test_shell_metacharacters_never_execute(tmp_path, sshd):
    canary = tmp_path / "CANARY"
    hostile = f"x; touch {canary}; $(touch {canary}) `touch {canary}` | touch {canary} && touch {canary}"
    weird_dir = tmp_path / f"sim $(touch {canary}) ;`touch {canary}`"
    target = init_target(weird_dir, arch="sm90")
    host = HostConfig(**sshd.host_entry(), repo=str(target.repo), python=str(target.python), gpus=8,
                      workdir=str(tmp_path / f"work;touch {canary}"))
    f = write_experiment(tmp_path, "hostile", free_port(), backend="flashinfer-mla",
                         model={"path": f"/models/{hostile}", "served_name": hostile},
                         server={"env": {"HOSTILE": hostile}},
                         bench=[{"name": "b", "num_prompts": 2, "input_len": 8, "output_len": 8,
                                 "extra_args": ["--tag", hostile]}])
    rec = attempt(tmp_path, ("ssh", host), f)
    assert rec.status == "ok", rec.error
    g = write_experiment(tmp_path, "hostile-flags", free_port(), backend="flashinfer-mla",
                         server={"extra_args": [hostile, f"$(touch {canary})"]})
    rec2 = attempt(tmp_path, ("ssh", host), g)
    assert rec2.status == "crashed" and rec2.verdict.category == "config-error"  # argparse saw them as arguments
    assert not canary.exists(), "a string from YAML was executed by a shell"
    figure("shell metacharacters in every string that reaches the host", survived=True, time_to_clean_s=None,
           lost=0, note="canary file never created (over SSH)")


# ============================================================================ 10. names


def test_names_with_dot_dot_or_absolute_paths_are_refused(tmp_path):
    for bad in ("../../escape", "/etc/passwd", "a/b"):
        f = tmp_path / "e.yaml"
        f.write_text(yaml.safe_dump({"name": bad, "model": {"path": "/m"}}, sort_keys=False))
        (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {address: local, repo: /nonexistent}\n")
        p = subprocess.run(HARNESS + ["run", str(f), "--results-dir", str(tmp_path / "results")], cwd=tmp_path,
                           capture_output=True, text=True)
        assert p.returncode == 2 and f"{f}:1:" in p.stderr and "letters, digits" in p.stderr
        assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*"))
    figure("experiment names with ../ or absolute paths", survived=True, time_to_clean_s=None, lost=0,
           note="refused by the schema (file:line), nothing written")


# ============================================================================ 12. secrets


def test_secret_values_masked_in_records_logs_and_terminal(tmp_path, sim_target):
    """Secrets from three places: the server's environment (HF_TOKEN), its command line (`--api-key V`,
    `--hf-token=V` in `extra_args`) and the controller's own environment (a local agent and its server inherit
    it). The server prints them all; none is in any byte kept on disk, on the terminal, or on the page."""
    secret, api_key, hf_flag = "hf_" + uuid.uuid4().hex, "sk-" + uuid.uuid4().hex, "hf_" + uuid.uuid4().hex
    controller_secret = "ctl_" + uuid.uuid4().hex
    (tmp_path / "patches" / "leaky_server").mkdir(parents=True)
    scratch = init_target(tmp_path / "scratch")
    ls = scratch.repo / "python/sglang/launch_server.py"
    text = ls.read_text()
    ls.write_text("import os, sys\nprint('token in env:', os.environ.get('HF_TOKEN'), flush=True)\n"
                  "print('controller token:', os.environ.get('MY_HUB_TOKEN'), flush=True)\n"
                  "print('argv:', sys.argv, flush=True)\n" + text)
    diff = subprocess.run(["git", "-C", str(scratch.repo), "diff"], capture_output=True, text=True).stdout
    (tmp_path / "patches" / "leaky_server" / "0001.patch").write_text(diff)
    # `--hf-token` is no flag of SGLang's: its argparse refuses it, echoing it, and the server exits.
    f = write_experiment(tmp_path, "secretive", free_port(), backend="flashinfer-mla", patches=["leaky_server"],
                         server={"env": {"HF_TOKEN": secret},
                                 "extra_args": ["--api-key", api_key, f"--hf-token={hf_flag}"]},
                         timeouts={"ready": 3}, expect="crash")
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": _host_entry(sim_target, tmp_path)}}))
    p = subprocess.run(HARNESS + ["run", str(f), "--results-dir", str(tmp_path / "results"), "--patches-dir",
                                  str(tmp_path / "patches")], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "MY_HUB_TOKEN": controller_secret})
    assert p.returncode == 0, p.stdout + p.stderr
    rec_dir = next((tmp_path / "results").rglob("record.json")).parent
    log = (rec_dir / "server.log").read_text()
    # The server printed each; the copy we keep does not hold it.
    assert "token in env: <redacted>" in log and "controller token: <redacted>" in log
    assert "'--api-key', '<redacted>', '--hf-token=<redacted>'" in log
    rec = json.loads((rec_dir / "record.json").read_text())
    assert rec["status"] == "crashed" and rec["server"]["env"]["HF_TOKEN"] == "<redacted>"
    assert rec["server"]["argv"][-3:] == ["--api-key", "<redacted>", "--hf-token=<redacted>"]
    # The page, made without the controller's secret in the environment: it holds what the disk holds.
    page = subprocess.run(HARNESS + ["report", rec["run_id"], "--html", str(tmp_path / "page"), "--results-dir",
                                     str(tmp_path / "results")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "MY_HUB_TOKEN"})
    assert page.returncode == 0, page.stdout + page.stderr
    kept = [x for x in [*rec_dir.rglob("*"), *(tmp_path / "page").rglob("*")] if x.is_file()]
    assert {x.name for x in kept} >= {"record.json", "server.log", "index.html"}
    assert any(x.name.endswith(".log.txt") for x in kept)  # the page's log excerpt
    for value in (secret, api_key, hf_flag, controller_secret):
        for path in kept:
            assert value.encode() not in path.read_bytes(), path
        assert value not in p.stdout + p.stderr + page.stdout + page.stderr
    figure("secret environment values", survived=True, time_to_clean_s=None, lost=0,
           note="masked in the record, the fetched logs, the terminal and the page: the server's and the "
                "controller's secret-named variables and secret server flags (--api-key)")


# ============================================================================ 13. patch paths


def test_patch_set_writing_outside_the_repo_is_refused_before_anything_applies(tmp_path, sim_target):
    before = tree_snapshot(sim_target.repo)
    (tmp_path / "patches" / "escape").mkdir(parents=True)
    (tmp_path / "patches" / "escape" / "0001.patch").write_text(
        "--- a/../../outside.txt\n+++ b/../../outside.txt\n@@ -0,0 +1 @@\n+gotcha\n")
    f = write_experiment(tmp_path, "escape", free_port(), patches=["escape"])
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": _host_entry(sim_target, tmp_path)}}))
    p = subprocess.run(HARNESS + ["run", str(f), "--patches-dir", str(tmp_path / "patches")], cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "outside the target repo" in p.stderr
    assert tree_snapshot(sim_target.repo) == before and not (tmp_path / "outside.txt").exists()
    figure("patch set touching paths outside the repo or in .git/", survived=True, time_to_clean_s=None, lost=0,
           note="refused when the patch set is read, before any host is contacted")


def test_no_record_lost_or_duplicated_over_a_resumed_sweep(tmp_path):
    """The bookkeeping promise on its own: every planned key ends with exactly one final record."""
    target = init_target(tmp_path / "t")
    hosts = {"h": local(target, tmp_path)[1]}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({
        "name": "b", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
        "server": {"port": "auto", "tp": 2}, "bench": [{"name": "b", "num_prompts": 2, "input_len": 8,
                                                       "output_len": 8}]}))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": "base.yaml",
                                                     "matrix": {"server.mem_fraction_static": [0.8, 0.85]},
                                                     "rounds": 2}))
    plan = plan_sweep(read_sweep_file(tmp_path / "s.yaml"), PATCHES, hosts)
    store = ResultsStore(tmp_path / "results")
    run_id = new_run_id()
    write_run_file(store, run_id, plan, hosts)
    stopper = StageTrigger("bench", None, nth=3)
    sched = Scheduler(plan, hosts, store, run_id, reporter=stopper)
    stopper.action = sched.cancel.set  # stop the sweep during the third attempt's benchmark
    first = sched.run()
    # Judged from the files on disk by the rules of docs/sweeps.md: `--resume` reruns only attempts without a final
    # record; `infra-error` is retried and `aborted` (Ctrl-C, a stopped sweep) reruns on resume; every other
    # status is a result.
    final_statuses = {"ok", "crashed", "hung", "apply-failed", "preflight-failed", "bench-failed"}

    def on_disk():
        return [json.loads(p.read_text()) for p in sorted((store.root / run_id).glob("*/*/record.json"))]

    assert first.left and len([r for r in on_disk() if r["status"] in final_statuses]) == 2  # two results to keep
    Scheduler(plan, hosts, store, run_id, reporter=StageTrigger("never", None)).run()
    records = on_disk()
    planned = sorted(a.key for a in plan.attempts)
    assert sorted(r["key"] for r in records if r["status"] in final_statuses) == planned  # one each, no more
    not_final = [r for r in records if r["status"] not in final_statuses]
    assert [r["status"] for r in not_final] == ["aborted"] and not_final[0]["key"] in planned  # the one stopped
    figure("sweep stopped mid-benchmark, then resumed", survived=True, time_to_clean_s=None, lost=0,
           note=f"{len(plan.attempts)} planned, each with exactly one final record")


def test_gpu_memory_a_recovered_server_still_holds_refuses_the_next_attempt_instead_of_a_false_oom(tmp_path,
                                                                                                  sim_target):
    f = write_experiment(tmp_path, "stuck", free_port(), backend="flashinfer-mla", bench=LONG_BENCH,
                         server={"env": {"SGLANG_SIM_LEAK_GPU_MEMORY": "1"}},
                         timeouts={"stop_grace": 3, "gpu_release": 1.0})
    proc = _run_in_background(tmp_path, f, _host_entry(sim_target, tmp_path))
    _wait_for_stage(proc, "bench")
    journal = json.loads((sim_target.repo / ".git" / "harness" / "journal.json").read_text())
    os.kill(journal["agent_pid"], signal.SIGKILL)
    proc.communicate(timeout=120)
    rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
    # The watchdog or the controller's own recovery, whichever took the lock first: either waits for the GPU
    # memory, then records what stays held.
    held = rec["recovered"]["stop"]["gpu_dirty"]
    assert held and rec["recovered"]["by"] in ("watchdog", "recover"), rec["recovered"]
    f2 = write_experiment(tmp_path, "next", free_port(), backend="flashinfer-mla", timeouts={"gpu_release": 1.0})
    rec = attempt(tmp_path, local(sim_target, tmp_path), f2)
    assert rec.status == "preflight-failed" and "still held" in (rec.error or "")
    assert rec.gpu_dirty and set(rec.gpu_dirty) >= set(held)
    figure("recovered server's GPU memory still held", survived=True, time_to_clean_s=None, lost=0,
           note="the next attempt is refused (gpu_dirty) instead of dying of a false out-of-memory")
