"""A newcomer's default path: no shipped inventory names a host that cannot be reached; without one, the
commands that need it say what to do."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.app import app
from harness.cli.sim import sim_host_entry
from harness.experiments.files import read_inventory_file
from harness.experiments.project import bundled_dir, default_patches_dir, missing_inventory_hint
from tests.conftest import write_experiment

ROOT = Path(__file__).resolve().parents[2]


def tracked(path: str) -> bool:
    p = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--error-unmatch", path], capture_output=True)
    return p.returncode == 0


def test_no_inventory_is_shipped_only_an_example_that_validates():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert not tracked("hosts.yaml")  # a default sweep would go to hosts nobody has
    assert tracked("hosts.example.yaml")
    example = read_inventory_file(ROOT / "hosts.example.yaml").inventory
    assert "gpu-box" in example.hosts
    assert "hosts.example.yaml" in (ROOT / "README.md").read_text()  # documented


@pytest.mark.parametrize("command", [["status"], ["recover", "box"]])
def test_a_command_without_an_inventory_says_what_to_do(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, command)
    assert res.exit_code == 2, res.output
    assert f"{tmp_path / 'hosts.yaml'}: no host inventory here" in res.output
    assert "hosts.example.yaml" in res.output and "harness demo" in res.output and "harness sim init" in res.output


def test_run_without_an_inventory_says_what_to_do(tmp_path, monkeypatch):
    (tmp_path / "patches").mkdir()
    exp = tmp_path / "e.yaml"
    exp.write_text("model: {path: /m}\n")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["run", str(exp)])
    assert res.exit_code == 2 and "no host inventory here" in res.output, res.output


def test_the_hint_without_a_checkout_points_at_the_readme(tmp_path):
    hint = missing_inventory_hint(tmp_path / "site-packages" / "harness")
    assert "README" in hint and "hosts.example.yaml" not in hint


def test_the_sim_init_entry_is_a_valid_inventory(tmp_path):
    f = tmp_path / "hosts.yaml"
    f.write_text(sim_host_entry("sim", "/tmp/harness-sim", "/tmp/harness-sim/.venv/bin/python", 8, "sm90") + "\n")
    host = read_inventory_file(f).inventory.hosts["sim"]
    assert (host.address, host.repo, host.gpus, host.arch) == ("local", "/tmp/harness-sim", 8, "sm90")


def test_the_default_patches_folder_follows_the_experiment_file_not_the_current_folder(tmp_path, monkeypatch):
    """`<project>/patches` of the experiment's project — the nearest folder above it with patches/ or
    hosts.yaml — and the patch sets the harness ships when it has none: the same from every folder."""
    project = tmp_path / "project"
    (project / "patches").mkdir(parents=True)
    (project / "exps").mkdir()
    in_project = write_experiment(project / "exps", "e", 30000)
    (tmp_path / "lone").mkdir()
    lone = write_experiment(tmp_path / "lone", "e", 30000, backend="flashinfer-mla-gather-cast")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "patches").mkdir(parents=True)  # a folder with patches of its own: never taken for them
    for cwd in (elsewhere, project, tmp_path / "lone"):
        monkeypatch.chdir(cwd)
        assert default_patches_dir(in_project) == project / "patches"
        assert default_patches_dir(lone) == bundled_dir("patches")
    monkeypatch.chdir(elsewhere)
    res = CliRunner().invoke(app, ["validate", str(lone)])  # the backend's patch set is found from here too
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("command", [["status"], ["recover", "box"], ["run", "e.yaml"], ["sweep", "e.yaml"]])
@pytest.mark.parametrize("what", ["missing", "folder"])
def test_a_hosts_file_given_that_is_not_there_is_named_as_such(tmp_path, monkeypatch, command, what):
    """`--hosts-file PATH` that does not exist (or is a folder): the message says so with the path and what to
    do — not "no host inventory here", whose hint is to pass the very option the user passed."""
    (tmp_path / "patches").mkdir()
    (tmp_path / "e.yaml").write_text("model: {path: /m}\n")
    given = tmp_path / "inventories" / "lab.yaml"
    if what == "folder":
        given.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, [*command, "--hosts-file", str(given)])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.split())
    said = "is a folder, not a file" if what == "folder" else "does not exist"
    assert f"{given}: the host inventory given with --hosts-file {said}" in flat, res.output
    assert "check the path" in flat and "no host inventory here" not in flat and "or pass --hosts-file" not in flat
