"""What a sweep runs on when resumed (pure): the run's own hosts, inventory and patch sets; a resume
hint that is a command to paste; run.json files from before these were recorded still resume."""

import json
import shlex
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.experiments.config import HostConfig
from harness.experiments.plan import key_basis
from harness.results.schemas import RunInfo
from harness.results.store import ResultsStore
from harness.run.resume import parse_host_list, recorded_path, resume_command, run_key_basis, sweep_host_names

INVENTORY = {n: HostConfig(address="local", repo=f"/r/{n}") for n in ("a", "b", "c")}
HOSTS_FILE = Path("/cfg/hosts.yaml")


def run_on(*hosts: str) -> RunInfo:
    return RunInfo(run_id="20260101-000000-abcd", sweep="s", sweep_file="/x/s.yaml", hosts=list(hosts))


def test_a_resume_takes_the_runs_own_hosts_not_the_whole_inventory():
    assert sweep_host_names(None, (), INVENTORY, HOSTS_FILE, run_on("b")) == ["b"]
    assert sweep_host_names(None, ("a", "c"), INVENTORY, HOSTS_FILE, run_on("b")) == ["b"]  # not the sweep's


def test_a_resume_accepts_hosts_that_repeat_the_runs():
    assert sweep_host_names(["c", "a"], (), INVENTORY, HOSTS_FILE, run_on("a", "c")) == ["c", "a"]


def test_a_resume_may_run_on_other_hosts_a_subset_or_others():
    """The night's dead host left out, or other hosts: keys come from the run's run.json, not from these."""
    assert sweep_host_names(["a"], (), INVENTORY, HOSTS_FILE, run_on("a", "b")) == ["a"]
    assert sweep_host_names(["c"], (), INVENTORY, HOSTS_FILE, run_on("a", "b")) == ["c"]
    with pytest.raises(ConfigError, match="not in the inventory: ghost"):
        sweep_host_names(["ghost"], (), INVENTORY, HOSTS_FILE, run_on("a"))
    # the run's own host is gone from the inventory, but --hosts names the ones to use: fine
    assert sweep_host_names(["a"], (), INVENTORY, HOSTS_FILE, run_on("a", "gone")) == ["a"]


def test_a_resumes_keys_are_made_from_the_runs_own_hosts_whatever_it_resumes_on():
    own = {n: INVENTORY[n] for n in ("a", "b")}
    recorded = run_on("a", "b").model_copy(update={"key_signature": "SIG", "key_archs": ["sm90"]})
    assert run_key_basis(recorded, {"c": INVENTORY["c"]}, HOSTS_FILE) == ("SIG", ("sm90",))
    # a run.json from before the basis was recorded: made again from the run's hosts, as they were planned
    assert run_key_basis(run_on("a", "b"), INVENTORY, HOSTS_FILE) == key_basis(own)
    with pytest.raises(ConfigError) as exc:
        run_key_basis(run_on("a", "gone"), INVENTORY, HOSTS_FILE)
    assert "not in this inventory: gone" in str(exc.value) and str(HOSTS_FILE) in str(exc.value)


def test_a_resume_whose_host_left_the_inventory_is_refused():
    with pytest.raises(ConfigError) as exc:
        sweep_host_names(None, (), INVENTORY, HOSTS_FILE, run_on("a", "gone"))
    msg = str(exc.value)
    assert str(HOSTS_FILE) in msg and "not in this inventory: gone" in msg and "--hosts-file" in msg
    assert "--hosts" in msg


def test_a_new_sweep_takes_hosts_option_then_sweep_file_then_inventory():
    assert sweep_host_names(["b"], ("a",), INVENTORY, HOSTS_FILE) == ["b"]
    assert sweep_host_names(None, ("a",), INVENTORY, HOSTS_FILE) == ["a"]
    assert sweep_host_names(None, (), INVENTORY, HOSTS_FILE) == ["a", "b", "c"]
    with pytest.raises(ConfigError, match="not in the inventory: ghost"):
        sweep_host_names(["a", "ghost"], (), INVENTORY, HOSTS_FILE)
    # a run recorded without hosts (none is written so, but keep it harmless): like a new sweep
    assert sweep_host_names(["b"], (), INVENTORY, HOSTS_FILE, run_on()) == ["b"]


def test_parse_host_list():
    assert parse_host_list(None) is None and parse_host_list(" , ") is None
    assert parse_host_list("a, b,") == ["a", "b"]


def test_recorded_paths_are_used_unless_given_and_a_vanished_one_is_a_clear_error(tmp_path):
    assert recorded_path(Path("given.yaml"), str(tmp_path), "host inventory", "r") == Path("given.yaml")
    assert recorded_path(None, str(tmp_path), "host inventory", "r") == tmp_path
    assert recorded_path(None, None, "host inventory", "r") is None  # an older run.json: the default
    with pytest.raises(ConfigError) as exc:
        recorded_path(None, str(tmp_path / "gone.yaml"), "host inventory", "r")
    assert "gone.yaml, which no longer exists" in str(exc.value) and "--hosts-file" in str(exc.value)


def test_resume_hint_is_a_command_to_paste_with_the_results_dir_when_one_was_given():
    assert resume_command(Path("exp/s.yaml"), "R1", None) == "harness sweep exp/s.yaml --resume R1"
    cmd = resume_command(Path("my sweeps/s.yaml"), "R1", Path("/tmp/res ults"))
    assert shlex.split(cmd) == ["harness", "sweep", "my sweeps/s.yaml", "--resume", "R1", "--results-dir",
                                "/tmp/res ults"]
    relative = shlex.split(resume_command(Path("s.yaml"), "R1", Path("res")))
    assert relative[-1] == str(Path("res").absolute())  # pasted in another folder, it still names the same one


def test_an_older_run_file_without_the_resume_fields_still_reads(tmp_path):
    store = ResultsStore(tmp_path)
    (tmp_path / "R1").mkdir()
    (tmp_path / "R1" / "run.json").write_text(json.dumps({
        "schema": 1, "run_id": "R1", "sweep": "s", "sweep_file": "/x/s.yaml", "created": "2026-01-01T00:00:00+0000",
        "baseline": None, "hosts": ["a"], "attempts": [{"key": "k", "experiment": "e", "round": 1, "order": 0}]}))
    run = store.read_run("R1")
    assert run.hosts == ["a"] and run.hosts_file is None and run.patches_dir is None and run.host_gpus == {}
