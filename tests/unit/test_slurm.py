"""Slurm as the harness uses it, without a cluster: the inventory's `cluster:` entries, the job's sbatch words
and script, and Slurm's answers read (the cluster itself: tests/integration/test_slurm.py)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from harness.common.protocol import BenchCase, ServerSpec, Spec, Timeouts
from harness.errors import ConfigError
from harness.experiments.config import ClusterConfig, ClusterHost
from harness.experiments.files import read_inventory_file
from harness.hosts.slurm import (
    MEANING,
    TERMINAL,
    batch_script,
    describe,
    final_without_report,
    job_name,
    parse_job_id,
    parse_sacct,
    parse_squeue,
    parse_time_minutes,
    sbatch_argv,
    time_limit_minutes,
)


def cluster(**over) -> ClusterConfig:
    return ClusterConfig(**{"kind": "slurm", "workdir": "/shared/w", "repo": "/shared/sglang", **over})


def spec(**over) -> Spec:
    return Spec(run_id="r", attempt_id="a", repo="/shared/sglang", server=ServerSpec(argv=["python"]), **over)


def test_a_cluster_in_the_inventory_is_a_target_by_name_beside_the_hosts(tmp_path):
    f = tmp_path / "hosts.yaml"
    f.write_text("hosts:\n  box: {address: local, repo: /r}\ncluster:\n  h200s:\n    kind: slurm\n"
                 "    workdir: /shared/w\n    repo: /shared/sglang\n    gpus_per_node: 4\n    max_jobs: 3\n")
    inv = read_inventory_file(f).inventory
    assert set(inv.hosts) == {"box", "h200s"}
    c = inv.hosts["h200s"]
    assert isinstance(c, ClusterHost) and c.gpus == 4 and c.repo == "/shared/sglang" and c.cluster.max_jobs == 3
    assert c.cluster.login_host.is_local  # no `login:`: Slurm's commands run on this machine


@pytest.mark.parametrize("body, words", [
    ("cluster:\n  c:\n    kind: pbs\n    workdir: /w\n    repo: /r\n", ["kind", "slurm"]),
    ("cluster:\n  c:\n    kind: slurm\n    repo: /r\n", ["workdir"]),
    ("cluster:\n  c:\n    kind: slurm\n    workdir: /w\n    repo: /r\n    time: 2 hours\n", ["time"]),
    ("cluster:\n  c:\n    kind: slurm\n    workdir: /w\n    repo: /r\n    partiton: gpu\n", ["did you mean 'partition'"]),
    ("hosts:\n  c: {address: local, repo: /r}\ncluster:\n  c:\n    kind: slurm\n    workdir: /w\n    repo: /r\n",
     ["both a host and a cluster"]),
])
def test_a_bad_cluster_entry_is_refused_naming_the_line_and_the_key(tmp_path, body, words):
    f = tmp_path / "hosts.yaml"
    f.write_text(body)
    msg = str(pytest.raises(ConfigError, read_inventory_file, f).value)
    assert str(f) in msg and all(w in msg for w in words), msg


def test_the_login_node_can_be_a_destination_or_ssh_settings():
    assert cluster(login="login01").login_host.address == "login01"
    h = cluster(login={"address": "10.0.0.5", "port": 2222, "user": "me", "python": "/usr/bin/python3"}).login_host
    assert (h.address, h.port, h.user, h.python, h.is_local) == ("10.0.0.5", 2222, "me", "/usr/bin/python3", False)


def test_sbatch_gets_every_option_as_its_own_word_and_the_script_only_execs_the_agent(tmp_path):
    c = cluster(partition="gpu h200", account="team;rm -rf /", exclusive=True, sbatch_extra=("--qos=high",))
    argv = sbatch_argv(c, name="harness-x", job_dir="/shared/w/jobs/r/a b", script="/shared/w/jobs/r/a b/job.sh",
                       gpus=8, minutes=42)
    for word in ("--parsable", "--job-name=harness-x", "--dependency=singleton", "--time=42",
                 "--signal=B:USR1@120", "--requeue", "--exclusive", "--gres=gpu:8", "--partition=gpu h200",
                 "--account=team;rm -rf /", "--qos=high", "--output=/shared/w/jobs/r/a b/slurm-%j.out"):
        assert word in argv
    assert argv[0] == "sbatch" and argv[-1] == "/shared/w/jobs/r/a b/job.sh"
    assert "--exclusive" not in sbatch_argv(cluster(exclusive=False), name="n", job_dir="/d", script="/d/s", gpus=0,
                                            minutes=1)
    # The script, run by a real shell, passes each path to the agent as one word, unchanged.
    odd = str(tmp_path / "it's a \"dir\" $HOME")
    script = batch_script("echo", "/a/agent $(x).pyz", odd)
    out = subprocess.run(["sh", "-c", script.replace("exec ", "printf '%s\\n' ", 1)], capture_output=True,
                         text=True).stdout.splitlines()
    assert out == ["echo", "/a/agent $(x).pyz", "--job", odd]
    assert script.startswith("#!/bin/sh\nexec ") and shlex.split(script.splitlines()[1])[0] == "exec"


def test_one_job_name_per_repo():
    assert job_name("/shared/a") == job_name("/shared/a") != job_name("/shared/b")


def test_the_time_limit_covers_the_budget_and_the_stop_or_the_timeouts():
    assert time_limit_minutes(spec(deadline_s=600), cluster()) == 10 + 3 + 2
    assert time_limit_minutes(spec(), cluster(time="1-00:00:00")) == 24 * 60
    s = spec(timeouts=Timeouts(ready=600, bench=300), bench=[BenchCase(name="a", argv=["x"], repeats=2)])
    assert time_limit_minutes(s, cluster()) == (600 + 2 * 300 + 300) // 60


@pytest.mark.parametrize("text, minutes", [("30", 30), ("5:30", 6), ("2:00:00", 120), ("1-12", 36 * 60),
                                           ("1-0:30", 24 * 60 + 30), ("2-01:00:01", 49 * 60 + 1)])
def test_slurm_time_formats(text, minutes):
    assert parse_time_minutes(text) == minutes


def test_slurms_answers_are_read():
    assert parse_job_id("1234\n") == "1234" and parse_job_id("77;cluster2\n") == "77"
    with pytest.raises(ValueError, match="job id"):
        parse_job_id("sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    info = parse_squeue("12|PENDING|Dependency|\n13|RUNNING|None|node07\n", "13")
    assert (info.state, info.reason, info.node, info.ended) == ("RUNNING", None, "node07", False)
    pending = parse_squeue("12|PENDING|Dependency|\n", "12")
    assert describe(pending) == "PENDING (Dependency)" and describe(info) == "RUNNING on node07"
    assert parse_squeue("", "12") is None
    done = parse_sacct("12|CANCELLED by 0|node07\n12.batch|CANCELLED|node07\n", "12")
    assert (done.state, done.node, done.ended) == ("CANCELLED", "node07", True)


def test_every_state_the_harness_ends_on_has_a_meaning_for_users():
    assert TERMINAL <= set(MEANING) | {"REVOKED"}


def test_a_job_without_the_agents_report_gets_one_from_its_state():
    pending = parse_squeue("5|CANCELLED|None|\n", "5")
    mine = final_without_report(pending, started=False, cancelled=True, output_tail="")
    assert mine.status == "aborted" and "nothing ran" in mine.error
    theirs = final_without_report(pending, started=False, cancelled=False, output_tail="slurmstepd: error: x\n")
    assert theirs.status == "infra-error" and "slurmstepd: error: x" in theirs.error
    late = final_without_report(parse_squeue("5|TIMEOUT|None|n1\n", "5"), started=True, cancelled=False,
                                output_tail="")
    assert late.status == "aborted" and late.budget_exceeded is True
    killed = final_without_report(parse_squeue("5|FAILED|None|n1\n", "5"), started=True, cancelled=False,
                                  output_tail="")
    assert killed.status == "infra-error" and "recovers the tree first" in killed.error
