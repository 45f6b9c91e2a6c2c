"""Sweeps end to end: over several simulated hosts (local ones, and hosts in network namespaces reached
over real sshd), interrupted and resumed, with infrastructure failures retried and nothing duplicated."""

from __future__ import annotations

import builtins
import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness.experiments.config import HostConfig
from harness.experiments.files import read_sweep_file
from harness.experiments.plan import plan_sweep
from harness.results.store import ResultsStore, new_run_id
from harness.run.runfile import write_run_file
from harness.run.scheduler import Scheduler
from harness.sim import init_target
from tests.conftest import PATCHES, is_final_on_disk, marked_processes, records_on_disk
from tests.support import netns

pytestmark = pytest.mark.integration

HARNESS = [sys.executable, "-m", "harness"]
SIM_EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments" / "sim"


class Quiet:
    """A SweepReporter that remembers what happened instead of printing it."""

    def __init__(self):
        self.finished: list[tuple[str, str, str]] = []
        self.notes: list[str] = []

    def stage(self, label, stage):
        pass

    def note(self, label, message):
        self.notes.append(f"{label}: {message}")

    def attempt_started(self, host, label):
        pass

    def attempt_finished(self, host, label, record):
        self.finished.append((host, label, record.status))

    def totals(self, done, failed, left, eta_s):
        self.last_totals = (done, failed, left, eta_s)

    def host_down(self, host, down):
        self.notes.append(f"down: {down.describe(host)}")


def small_base(tmp_path: Path, **over) -> Path:
    doc = {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
           "server": {"port": "auto", "tp": 2, "kv_cache_dtype": "fp8_e4m3"},
           "bench": [{"name": "bs1", "num_prompts": 2, "input_len": 16, "output_len": 8, "max_concurrency": 1}],
           "timeouts": {"ready": 60, "no_progress": 30, "stop_grace": 5}}
    doc.update(over)
    f = tmp_path / "base.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f


def sweep_file(tmp_path: Path, **doc) -> Path:
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f


def local_hosts(tmp_path: Path, archs: dict[str, str]) -> dict[str, HostConfig]:
    hosts = {}
    for name, arch in archs.items():
        t = init_target(tmp_path / name, arch=arch)
        hosts[name] = HostConfig(address="local", repo=str(t.repo), python=str(t.python), gpus=8, arch=arch,
                                 workdir=str(tmp_path / f"{name}-work"))
    return hosts


def run_sweep(tmp_path, f, hosts, run_id=None, **kw):
    store = ResultsStore(tmp_path / "results")
    run_id = run_id or new_run_id()
    plan = plan_sweep(read_sweep_file(f), PATCHES, hosts)
    write_run_file(store, run_id, plan, hosts)
    reporter = Quiet()
    outcome = Scheduler(plan, hosts, store, run_id, reporter=reporter, **kw).run()
    return plan, outcome, reporter, store


def test_sweep_routes_by_arch_and_records_every_attempt_once(tmp_path):
    hosts = local_hosts(tmp_path, {"h200": "sm90", "b200": "sm100"})
    small_base(tmp_path)
    f = sweep_file(tmp_path, name="s", base="base.yaml",
                   matrix={"backend": ["flashinfer-mla", "trtllm_mla", "cutlass_mla"]}, rounds=2)
    plan, outcome, rep, store = run_sweep(tmp_path, f, hosts)
    assert [a.name for a in plan.attempts] == ["s-flashinfer-mla", "s-trtllm_mla", "s-cutlass_mla"] * 2
    by_key = records_on_disk(store.root, outcome.run_id)
    assert set(by_key) == {a.key for a in plan.attempts}
    assert all(len(v) == 1 for v in by_key.values()), "no attempt recorded twice"
    recs = {(r.experiment, r.round): r for v in by_key.values() for r in v}
    for rnd in (1, 2):
        assert recs[("s-flashinfer-mla", rnd)].status == "ok"
        trt = recs[("s-trtllm_mla", rnd)]
        assert trt.status == "ok" and trt.host == "b200"  # the Blackwell-only backend ran on the Blackwell host
        cut = recs[("s-cutlass_mla", rnd)]
        assert cut.status == "preflight-failed" and "does not accept --attention-backend cutlass_mla" in cut.error
    run = json.loads((store.root / outcome.run_id / "run.json").read_text())
    assert [a["key"] for a in run["attempts"]] == [a.key for a in plan.attempts]


def test_infrastructure_failure_is_retried_elsewhere_deterministic_outcomes_are_not(tmp_path):
    hosts = local_hosts(tmp_path, {"broken": "sm90", "good": "sm90"})
    # The broken host's Python is gone (a reinstall half done): nothing can run there.
    hosts["broken"] = hosts["broken"].model_copy(update={"python": "/nonexistent/python", "retry_after": 0.5})
    small_base(tmp_path)
    (tmp_path / "crash.yaml").write_text(yaml.safe_dump({
        "name": "crash", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
        "patches": ["sim_fp8_kv_into_mla_plan"], "expect": "crash",
        "server": {"port": "auto", "tp": 2, "kv_cache_dtype": "fp8_e4m3"}}))
    f = sweep_file(tmp_path, name="s", base="base.yaml", experiments=["crash.yaml"], rounds=2)
    plan, outcome, rep, store = run_sweep(tmp_path, f, hosts)
    by_key = records_on_disk(store.root, outcome.run_id)
    for a in plan.attempts:
        finals = [r for r in by_key[a.key] if is_final_on_disk(r)]
        assert len(finals) == 1 and finals[0].host == "good"
        infra = [r for r in by_key[a.key] if r.status == "infra-error"]
        assert all(r.host == "broken" for r in infra) and len(infra) <= 1
    crashes = [r for v in by_key.values() for r in v if r.experiment == "crash"]
    assert [r.status for r in crashes if r.status != "infra-error"] == ["crashed", "crashed"]  # never retried
    assert any("will retry" in n for n in rep.notes)


def interrupt_after_first_ok(proc: subprocess.Popen) -> str:
    """Let one attempt finish, SIGINT the next one mid-flight; everything the sweep printed."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if " → ok" in line:
            break
    for line in proc.stdout:
        lines.append(line)
        if ": start " in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(60) == 130, "".join(lines) + rest
    return "".join(lines) + rest


def test_sigint_leaves_a_resumable_run_and_resume_runs_only_the_rest(tmp_path):
    hosts = local_hosts(tmp_path, {"h": "sm90"})
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {n: h.model_dump(mode="json") for n, h in
                                                                   hosts.items()}}))
    small_base(tmp_path, bench=[{"name": "bs1", "num_prompts": 6, "input_len": 16, "output_len": 24,
                                 "max_concurrency": 1}])
    f = sweep_file(tmp_path, name="s", base="base.yaml", matrix={"server.mem_fraction_static": [0.8, 0.85]},
                   rounds=2)
    argv = HARNESS + ["sweep", str(f), "--results-dir", str(tmp_path / "results"), "--patches-dir", str(PATCHES)]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert "--resume" in interrupt_after_first_ok(proc)
    run_id = next(p.name for p in (tmp_path / "results").iterdir() if (p / "run.json").exists())
    by_key = records_on_disk(tmp_path / "results", run_id)
    assert sum(1 for v in by_key.values() for r in v if r.status == "ok") == 1
    assert any(r.status == "aborted" for v in by_key.values() for r in v)
    assert marked_processes(run_id) == []

    p = subprocess.run(argv + ["--resume", run_id], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 attempt(s) already had a final record" in p.stdout
    by_key = records_on_disk(tmp_path / "results", run_id)
    plan_keys = [a["key"] for a in json.loads((tmp_path / "results" / run_id / "run.json").read_text())["attempts"]]
    assert len(plan_keys) == 4
    for k in plan_keys:
        assert [r.status for r in by_key[k] if is_final_on_disk(r)] == ["ok"], "each attempt has exactly one result"


def test_edited_patch_changes_keys_so_resume_does_not_reuse_stale_results(tmp_path):
    hosts = local_hosts(tmp_path, {"h": "sm90"})
    pdir = tmp_path / "patches"
    (pdir / "p").mkdir(parents=True)
    patch = (PATCHES / "sim_fp8_kv_into_mla_plan" / "0001-pass-fp8-kv-dtype-to-mla-plan.patch").read_text()
    (pdir / "p" / "0001.patch").write_text(patch)
    small_base(tmp_path, patches=["p"], server={"port": "auto", "tp": 2, "kv_cache_dtype": "auto"})
    f = sweep_file(tmp_path, name="s", base="base.yaml")
    first = plan_sweep(read_sweep_file(f), pdir, hosts)
    (pdir / "p" / "0001.patch").write_text(patch.replace("# No full-pool cast", "# (edited) No full-pool cast"))
    second = plan_sweep(read_sweep_file(f), pdir, hosts)
    assert first.attempts[0].key != second.attempts[0].key
    assert plan_sweep(read_sweep_file(f), pdir, hosts).attempts[0].key == second.attempts[0].key  # stable otherwise


def test_cli_refuses_unknown_resume_other_sweeps_run_and_unknown_hosts(tmp_path):
    hosts = local_hosts(tmp_path, {"h": "sm90"})
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {n: h.model_dump(mode="json") for n, h in
                                                                   hosts.items()}}))
    small_base(tmp_path)
    f = sweep_file(tmp_path, name="s", base="base.yaml")
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"name": "o", "base": "base.yaml"}))
    base_argv = ["--results-dir", str(tmp_path / "results"), "--patches-dir", str(PATCHES)]
    p = subprocess.run(HARNESS + ["sweep", str(f), "--resume", "nope"] + base_argv, cwd=tmp_path, capture_output=True,
                       text=True)
    assert p.returncode == 2 and "no run 'nope'" in p.stderr
    p = subprocess.run(HARNESS + ["sweep", str(f), "--hosts", "h,ghost"] + base_argv, cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "ghost" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run(HARNESS + ["sweep", str(f)] + base_argv, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    run_id = next(d.name for d in (tmp_path / "results").iterdir() if (d / "run.json").exists())
    p = subprocess.run(HARNESS + ["sweep", str(other), "--resume", run_id] + base_argv, cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "belongs to another sweep file" in p.stderr
    p = subprocess.run(HARNESS + ["sweep", str(f), "--dry-run"] + base_argv, cwd=tmp_path, capture_output=True,
                       text=True)
    assert p.returncode == 0 and "s" in p.stdout and "plan of sweep" in p.stdout
    p = subprocess.run(HARNESS + ["compare", run_id, "--format", "json", "--results-dir", str(tmp_path / "results")],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    assert rows[0]["experiment"] == "base" and rows[0]["status"] == "ok"  # a base without a matrix keeps its name


@pytest.fixture
def four_netns_hosts(tmp_path):
    why = netns.available()
    if why:
        pytest.skip(why)
    with netns.sim_hosts_in_namespaces(4, tmp_path, uuid.uuid4().hex[:4]) as hosts:
        yield hosts


def test_sixteen_attempts_over_four_namespace_hosts(tmp_path, four_netns_hosts):
    small_base(tmp_path, server={"port": 30000, "tp": 2, "kv_cache_dtype": "fp8_e4m3"})
    f = sweep_file(tmp_path, name="s", base="base.yaml",
                   matrix={"server.mem_fraction_static": [0.80, 0.82, 0.84, 0.86]}, rounds=4)
    plan, outcome, rep, store = run_sweep(tmp_path, f, four_netns_hosts)
    by_key = records_on_disk(store.root, outcome.run_id)
    assert len(plan.attempts) == 16 and set(by_key) == {a.key for a in plan.attempts}
    assert all([r.status for r in v] == ["ok"] for v in by_key.values())
    used = {r.host for v in by_key.values() for r in v}
    assert used == set(four_netns_hosts), "every namespace host took work (same port 30000, separate loopbacks)"


def test_a_second_harness_on_the_same_run_is_refused_at_once_and_nothing_is_duplicated(tmp_path):
    """Two `--resume` of one run (two terminals, a cron job and a human) must not plan the same attempts
    twice: the second one says who holds the run and changes nothing."""
    hosts = local_hosts(tmp_path, {"h": "sm90"})
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {n: h.model_dump(mode="json") for n, h in
                                                                   hosts.items()}}))
    small_base(tmp_path, bench=[{"name": "bs1", "num_prompts": 6, "input_len": 16, "output_len": 24,
                                 "max_concurrency": 1}])
    f = sweep_file(tmp_path, name="s", base="base.yaml", matrix={"server.mem_fraction_static": [0.8, 0.85]})
    argv = HARNESS + ["sweep", str(f), "--results-dir", str(tmp_path / "results"), "--patches-dir", str(PATCHES)]
    first = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run_id = None
    for line in first.stdout:
        if line.startswith("run ") and run_id is None:
            run_id = line.split()[1].rstrip(":")
        if ": start " in line:
            break
    assert run_id is not None
    second = subprocess.run(argv + ["--resume", run_id], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert second.returncode != 0
    assert f"run {run_id} is being run by another harness (pid {first.pid}" in second.stderr
    rest = first.communicate(timeout=300)[0]
    assert first.returncode == 0, rest
    by_key = records_on_disk(tmp_path / "results", run_id)
    assert len(by_key) == 2 and all(len(v) == 1 for v in by_key.values()), "an attempt ran twice"


def test_a_sweep_in_which_nothing_ran_does_not_exit_0(tmp_path):
    hosts = local_hosts(tmp_path, {"h": "sm90"})
    (Path(hosts["h"].repo) / "my-notes.txt").write_text("the user's work in progress\n")  # a dirty tree
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {n: h.model_dump(mode="json") for n, h in
                                                                   hosts.items()}}))
    small_base(tmp_path)
    f = sweep_file(tmp_path, name="s", base="base.yaml", matrix={"server.mem_fraction_static": [0.8, 0.85]})
    p = subprocess.run(HARNESS + ["sweep", str(f), "--results-dir", str(tmp_path / "results"), "--patches-dir",
                                  str(PATCHES)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "nothing ran: all 2 attempt(s) were refused before launch" in p.stderr
    assert "my-notes.txt" in p.stderr


def test_start_within_leaves_what_it_did_not_start_for_the_resume_which_runs_each_cases_own_repeats(tmp_path):
    """`--start-within` ends a call's window (a lease, a night) without an attempt cut off half way; the
    resume runs the rest. A bench case's own `repeats` wins over the experiment's."""
    hosts = local_hosts(tmp_path, {"h": "sm90"})
    write_inventory(tmp_path, hosts)
    small_base(tmp_path, repeats=1, bench=[
        {"name": "bs1", "num_prompts": 2, "input_len": 16, "output_len": 8, "max_concurrency": 1, "repeats": 2},
        {"name": "once", "num_prompts": 2, "input_len": 16, "output_len": 8}])
    f = sweep_file(tmp_path, name="s", base="base.yaml", matrix={"server.mem_fraction_static": [0.8, 0.85]})
    argv = HARNESS + ["sweep", str(f), "--results-dir", str(tmp_path / "results"), "--patches-dir", str(PATCHES)]
    p = subprocess.run(argv + ["--start-within", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 3 and "2 attempt(s) not run" in p.stderr, p.stdout + p.stderr
    run_id = next(d.name for d in (tmp_path / "results").iterdir() if (d / "run.json").exists())
    assert records_on_disk(tmp_path / "results", run_id) == {}
    p = subprocess.run(argv + ["--resume", run_id], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    records = [r for v in records_on_disk(tmp_path / "results", run_id).values() for r in v]
    assert len(records) == 2 and all(r.status == "ok" for r in records)
    assert all((r.metrics["bs1"]["repeats"], r.metrics["once"]["repeats"]) == (2, 1) for r in records)
    p = subprocess.run(argv + ["--start-within", "-1"], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 2 and "--start-within" in p.stderr


# ---------------------------------------------------------------------------- resuming on the run's own hosts


def write_inventory(tmp_path: Path, hosts: dict[str, HostConfig], name: str = "hosts.yaml",
                    without_gpus: bool = False) -> Path:
    f = tmp_path / name
    entries = {n: h.model_dump(mode="json", exclude={"gpus"} if without_gpus else None) for n, h in hosts.items()}
    f.write_text(yaml.safe_dump({"hosts": entries}))
    return f


def test_the_printed_resume_command_resumes_on_the_runs_own_hosts(tmp_path):
    """`--hosts a` of an inventory of two, Ctrl-C, then exactly the command the harness printed: the
    resume plans the same keys, runs only what had no result, and never touches the other host."""
    hosts = local_hosts(tmp_path, {"a": "sm90", "b": "sm90"})
    (tmp_path / "inventory").mkdir()  # not where a default would find it
    inventory = write_inventory(tmp_path / "inventory", hosts)
    small_base(tmp_path, bench=[{"name": "bs1", "num_prompts": 6, "input_len": 16, "output_len": 24,
                                 "max_concurrency": 1}])
    f = sweep_file(tmp_path, name="s", base="base.yaml", matrix={"server.mem_fraction_static": [0.8, 0.85]},
                   rounds=2)
    results = tmp_path / "my results"
    argv = HARNESS + ["sweep", str(f), "--hosts", "a", "--hosts-file", str(inventory), "--results-dir", str(results),
                      "--patches-dir", str(PATCHES)]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    printed = interrupt_after_first_ok(proc)
    hint = next(line.strip() for line in printed.splitlines() if line.strip().startswith("harness sweep "))
    run_id = next(p.name for p in results.iterdir() if (p / "run.json").exists())
    before = json.loads((results / run_id / "run.json").read_text())
    assert before["hosts"] == ["a"] and before["hosts_file"] == str(inventory)
    assert before["patches_dir"] == str(PATCHES)
    assert shlex.split(hint) == ["harness", "sweep", str(f), "--resume", run_id, "--results-dir", str(results)]

    # From another folder, where neither the inventory nor the patch sets would be found by default.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run(HARNESS + shlex.split(hint)[1:], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 attempt(s) already had a final record" in p.stdout
    after = json.loads((results / run_id / "run.json").read_text())
    assert after["hosts"] == ["a"] and after["attempts"] == before["attempts"], "the same plan, the same keys"
    by_key = records_on_disk(results, run_id)
    assert set(by_key) == {a["key"] for a in before["attempts"]}
    for recs in by_key.values():
        assert [r.status for r in recs if is_final_on_disk(r)] == ["ok"], "a finished attempt ran again"
    assert {r.host for v in by_key.values() for r in v} == {"a"}, "the other host of the inventory was used"
    assert not (tmp_path / "b-work").exists(), "the other host was contacted"


def test_a_resume_on_other_hosts_keeps_the_runs_keys(tmp_path):
    """A run planned on `a`, resumed with `--hosts b`: its attempts run on b under the keys the run was
    planned with (none redone under new keys), and run.json keeps what the keys were made from."""
    hosts = local_hosts(tmp_path, {"a": "sm90", "b": "sm90"})
    inventory = write_inventory(tmp_path, hosts)
    small_base(tmp_path)
    f = sweep_file(tmp_path, name="s", base="base.yaml", rounds=2)
    results = tmp_path / "results"
    store = ResultsStore(results)
    run_id = new_run_id()
    plan = plan_sweep(read_sweep_file(f), PATCHES, {"a": hosts["a"]})
    write_run_file(store, run_id, plan, {"a": hosts["a"]}, hosts_file=inventory, patches_dir=PATCHES)
    base_argv = ["--resume", run_id, "--results-dir", str(results)]
    # The run's host left the inventory and no --hosts: said so, with the file and what to do.
    smaller = write_inventory(tmp_path, {"b": hosts["b"]}, name="smaller.yaml")
    p = subprocess.run(HARNESS + ["sweep", str(f), "--hosts-file", str(smaller)] + base_argv, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "not in this inventory: a" in p.stderr and str(smaller) in p.stderr, p.stderr
    assert "--hosts" in p.stderr and records_on_disk(results, run_id) == {}
    p = subprocess.run(HARNESS + ["sweep", str(f), "--hosts", "b", "--hosts-file", str(smaller)] + base_argv,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    by_key = records_on_disk(results, run_id)
    assert set(by_key) == {a.key for a in plan.attempts}
    assert {r.host for recs in by_key.values() for r in recs} == {"b"}
    run = store.read_run(run_id)
    assert run.hosts == ["b"] and run.key_signature == plan.key_signature
    assert not (tmp_path / "a-work").exists()


# ---------------------------------------------------------------------------- hosts without `gpus:`


def test_a_host_without_gpus_runs_what_its_gpus_allow_and_an_explicit_gpus_limits_it(tmp_path):
    """The sim reports its GPUs through nvidia-smi: an entry without `gpus:` on an 8-GPU sim runs a TP 2
    experiment; `gpus: 1` on the same kind of host is the user's limit, and refuses it."""
    hosts = local_hosts(tmp_path, {"eight": "sm90"})
    one = init_target(tmp_path / "one", arch="sm90", gpus=1)
    hosts["one"] = HostConfig(address="local", repo=str(one.repo), python=str(one.python), arch="sm90",
                              workdir=str(tmp_path / "one-work"))
    inventory = write_inventory(tmp_path, hosts, without_gpus=True)
    small_base(tmp_path)  # tp 2
    f = sweep_file(tmp_path, name="s", base="base.yaml", rounds=2)
    results = tmp_path / "results"
    argv = HARNESS + ["sweep", str(f), "--hosts-file", str(inventory), "--results-dir", str(results),
                      "--patches-dir", str(PATCHES)]
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    run_id = next(d.name for d in results.iterdir() if (d / "run.json").exists())
    by_key = records_on_disk(results, run_id)
    assert sorted((r.status, r.host) for v in by_key.values() for r in v) == [("ok", "eight"), ("ok", "eight")]
    run = json.loads((results / run_id / "run.json").read_text())
    assert run["host_gpus"] == {"eight": 8, "one": 1}
    keys = [a["key"] for a in run["attempts"]]

    # Resumed, the same keys (they do not depend on what the hosts said): nothing runs again.
    p = subprocess.run(HARNESS + ["sweep", str(f), "--resume", run_id, "--results-dir", str(results)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "2 attempt(s) already had a final record" in p.stdout, p.stdout + p.stderr
    assert [a["key"] for a in json.loads((results / run_id / "run.json").read_text())["attempts"]] == keys

    limited = write_inventory(tmp_path, {"eight": hosts["eight"].model_copy(update={"gpus": 1})}, name="limited.yaml")
    p = subprocess.run(HARNESS + ["sweep", str(f), "--hosts-file", str(limited), "--results-dir", str(results),
                                  "--patches-dir", str(PATCHES)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "nothing ran" in p.stderr and "needs 2 GPUs, has 1" in p.stderr


@pytest.mark.parametrize("python", ["/nonexistent/python", "a folder"])
def test_a_host_that_cannot_be_asked_for_its_gpus_is_not_used_and_its_work_is_left(tmp_path, python):
    hosts = local_hosts(tmp_path, {"good": "sm90", "down": "sm90"})
    python = str(tmp_path) if python == "a folder" else python
    hosts["down"] = hosts["down"].model_copy(update={"python": python})
    inventory = write_inventory(tmp_path, hosts, without_gpus=True)
    small_base(tmp_path)
    f = sweep_file(tmp_path, name="s", base="base.yaml")
    results = tmp_path / "results"
    base_argv = ["--hosts-file", str(inventory), "--results-dir", str(results), "--patches-dir", str(PATCHES)]
    p = subprocess.run(HARNESS + ["sweep", str(f), "--hosts", "down"] + base_argv, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "host down is not used in this sweep: could not ask how many GPUs it has" in p.stderr
    assert ("is a folder" if python == str(tmp_path) else "No such file") in p.stderr, p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert "1 attempt(s) not run" in p.stderr and "--resume" in p.stderr
    run_id = next(d.name for d in results.iterdir() if (d / "run.json").exists())
    assert records_on_disk(results, run_id) == {}, "an unreachable host is no result: nothing final recorded"

    p = subprocess.run(HARNESS + ["sweep", str(f)] + base_argv, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "host down is not used in this sweep" in p.stderr


# ---------------------------------------------------------------------------- hosts down from the start or dying


def test_a_sweep_with_a_hung_host_and_one_dying_midway_ends_and_a_resume_on_other_hosts_completes(tmp_path):
    """The tester's night, on real sshd: `hung` accepts TCP and never answers (`gpus:` but no `arch:`),
    `dying` (real sshd) dies after its first attempt, `good` stays. The sweep runs every attempt sm90 can run
    on the live hosts, refuses the Blackwell-only ones instead of waiting for `hung`, names both down hosts and
    exits 3 — without waiting for its budget. Then a run left unstarted resumes on `good` alone.

    Nothing in it races the sweep. `dying` is reached through a forwarder that takes one connection (its first
    attempt's) and refuses every later one, so no second attempt slips in before it dies. `good`'s agent waits at
    a gate the test opens once both others are reported down: `good` can neither take the work `dying` must fail
    on twice to be down, nor end the sweep before `hung` has failed twice."""
    from tests.support.gate import Gate
    from tests.support.sshd import SSHServer
    from tests.support.tcpproxy import CuttableProxy

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # the kernel completes the handshake; nobody ever says a word
    dying = SSHServer(tmp_path / "sshd-dying").start()
    one_login = CuttableProxy(dying.port, connections=1)
    gate = Gate(tmp_path / "good-gate")
    proc = None
    try:
        target = init_target(tmp_path / "dying", arch="sm90")
        hosts = local_hosts(tmp_path, {"good": "sm90"})
        held = gate.wrap(Path(hosts["good"].python), when="*.pyz")  # its agent waits; nothing has a timer on it
        hosts["good"] = hosts["good"].model_copy(update={"retry_after": 0.1, "python": str(held)})
        _, key_type, key = dying.known_hosts.read_text().split()[:3]
        known = tmp_path / "dying_known_hosts"  # dying's key, at the address the harness dials
        known.write_text(f"[127.0.0.1]:{one_login.port} {key_type} {key}\n")
        hosts["dying"] = HostConfig(**dying.host_entry(port=one_login.port, known_hosts=str(known)),
                                    repo=str(target.repo), python=str(target.python), gpus=8, arch="sm90",
                                    workdir=str(tmp_path / "dying-work"), retry_after=0.1)
        hosts["hung"] = HostConfig(address="127.0.0.1", port=hung.getsockname()[1], user=dying.user,
                                   key=str(dying.client_key), known_hosts=str(dying.known_hosts), connect_timeout=1,
                                   repo="/nonexistent/repo", gpus=8, retry_after=0.1)
        inventory = write_inventory(tmp_path, hosts)
        small_base(tmp_path)
        # 2 rounds, 4 attempts sm90 can run: `dying`'s first, the one `good` holds, two for `dying` to fail on.
        f = sweep_file(tmp_path, name="s", base="base.yaml", rounds=2, budget={"sweep": 600},
                       matrix={"backend": ["flashinfer-mla", "triton", "trtllm_mla"]})
        results = tmp_path / "results"
        proc = subprocess.Popen(HARNESS + ["sweep", str(f), "--hosts-file", str(inventory), "--results-dir",
                                           str(results)], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines = []
        down: set[str] = set()
        ended: Counter[str] = Counter()
        assert proc.stdout is not None
        for line in proc.stdout:  # the pipe's plain lines are the events we wait on
            lines.append(line)
            if m := re.match(r"host (\S+) is down ", line):
                down.add(m.group(1))
            elif m := re.match(r"(\S+): .* → ", line):
                ended[m.group(1)] += 1
            # Both down: `good` may go. (Or both ended as many attempts as it takes to be down — `dying`'s first is
            # ok — and one is not reported down: `good` goes too, not held forever, and the asserts say what broke.)
            if all(h in down or ended[h] >= n for h, n in (("hung", 2), ("dying", 3))):
                gate.open()
        stderr = proc.stderr.read() if proc.stderr else ""
        rc = proc.wait(60)
        out = "".join(lines)
        assert rc == 3, out + stderr
        good_ends = [i for i, line in enumerate(lines) if line.startswith("good: ") and " → " in line]
        downs = [i for i, line in enumerate(lines) if re.match(r"host (hung|dying) is down ", line)]
        assert len(downs) == 2 and max(downs) < min(good_ends, default=len(lines)), out  # `good` was held until both were down
        assert "host hung down since" in stderr and "host dying down since" in stderr, stderr
        assert "no SSH banner" in stderr and "not run" not in stderr
        run_id = re.search(r"^run (\S+):", out, re.M).group(1)
        by_key = records_on_disk(results, run_id)
        plan_keys = store_keys(results, run_id)
        assert set(by_key) == plan_keys  # every attempt has a record
        for recs in by_key.values():
            final = [r for r in recs if is_final_on_disk(r)]
            assert len(final) == 1, recs
            if final[0].experiment == "s-trtllm_mla":  # only `hung` (arch unknown) might have run it: refused
                assert final[0].status == "preflight-failed" and final[0].host == "-" and final[0].cannot_run
            else:
                assert final[0].status == "ok" and final[0].host in ("good", "dying")
        statuses = {h: sorted(r.status for recs in by_key.values() for r in recs if r.host == h)
                    for h in ("dying", "hung")}
        assert statuses == {"dying": ["infra-error", "infra-error", "ok"], "hung": ["infra-error"] * 2}, out
        assert one_login.accepted == 1  # the failures were refusals: no second login reached `dying`

        # A run stopped before anything started (a window that ended), resumed on `good` alone: it completes.
        f = tmp_path / "one.yaml"
        f.write_text(yaml.safe_dump({"name": "one", "base": "base.yaml", "rounds": 2}))
        p = subprocess.run(HARNESS + ["sweep", str(f), "--hosts-file", str(inventory), "--results-dir",
                                      str(results), "--patches-dir", str(PATCHES), "--start-within", "0"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert p.returncode == 3 and "not run" in p.stderr, p.stdout + p.stderr
        left_id = re.search(r"^run (\S+):", p.stdout, re.M).group(1)
        p = subprocess.run(HARNESS + ["sweep", str(f), "--resume", left_id, "--hosts", "good", "--results-dir",
                                      str(results)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        by_key = records_on_disk(results, left_id)
        assert set(by_key) == store_keys(results, left_id)
        assert {r.host for recs in by_key.values() for r in recs} <= {"good", "-"}
        assert f"-- {len(by_key)} done" in p.stdout  # the counters end at the whole run
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        gate.close()
        one_login.close()
        dying.stop()
        hung.close()


def store_keys(results: Path, run_id: str) -> set[str]:
    """The plan's keys, from run.json as it is on disk."""
    return {a["key"] for a in json.loads((results / run_id / "run.json").read_text())["attempts"]}


class Opens:
    """How often each of some files is opened, by any code in this process: pathlib's reads and the builtin
    open() both go through io.open."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *files: Path) -> None:
        self.counts = {os.path.realpath(f): 0 for f in files}
        real_open = io.open

        def counting_open(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)):
                key = os.path.realpath(file)
                if key in self.counts:
                    self.counts[key] += 1
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(io, "open", counting_open)
        monkeypatch.setattr(builtins, "open", counting_open)

    def of(self, f: Path) -> int:
        return self.counts[os.path.realpath(f)]

    def reset(self) -> None:
        self.counts = dict.fromkeys(self.counts, 0)


def test_each_command_reads_the_sweep_the_experiment_and_the_inventory_once(tmp_path, monkeypatch):
    """`sweep` (new, --dry-run and --resume) and `run` parse what they are given at the door and pass the models
    inward: the sweep file, its base experiment (expanded twice) and the inventory are each opened once."""
    from typer.testing import CliRunner

    from harness.cli.app import app

    hosts = local_hosts(tmp_path, {"h": "sm90"})
    inventory = write_inventory(tmp_path, hosts)
    base = small_base(tmp_path)
    f = sweep_file(tmp_path, name="s", base="base.yaml", matrix={"server.mem_fraction_static": [0.8, 0.85]})
    opens = Opens(monkeypatch, f, base, inventory)
    options = ["--hosts-file", str(inventory), "--results-dir", str(tmp_path / "results"), "--patches-dir",
               str(PATCHES)]
    runner = CliRunner()

    def harness_in_process(*argv: str) -> None:
        opens.reset()
        result = runner.invoke(app, list(argv) + options)
        assert result.exit_code == 0, result.output

    for argv in (["sweep", str(f), "--dry-run"], ["sweep", str(f)]):
        harness_in_process(*argv)
        assert (opens.of(f), opens.of(base), opens.of(inventory)) == (1, 1, 1), argv
    run_id = next(p.name for p in (tmp_path / "results").iterdir() if (p / "run.json").exists())
    harness_in_process("sweep", str(f), "--resume", run_id)
    assert (opens.of(f), opens.of(base), opens.of(inventory)) == (1, 1, 1), "--resume"
    harness_in_process("run", str(base))
    assert (opens.of(f), opens.of(base), opens.of(inventory)) == (0, 1, 1), "run"
