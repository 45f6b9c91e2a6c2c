"""Where records go by default: never the folder the user happens to stand in."""

from __future__ import annotations

from pathlib import Path

from harness.experiments.project import RESULTS_ENV, checkout_root, default_results_dir


def fake_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "harness").mkdir(parents=True)
    (root / "experiments").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'harness'\n")
    return root


def installed_package(tmp_path: Path) -> Path:
    pkg = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "harness"
    pkg.mkdir(parents=True)
    return pkg


def test_the_environment_variable_wins(tmp_path):
    env = {RESULTS_ENV: str(tmp_path / "mine"), "HOME": str(tmp_path / "home")}
    assert default_results_dir(env, fake_checkout(tmp_path) / "harness") == tmp_path / "mine"


def test_the_environment_variable_expands_home_and_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_results_dir({RESULTS_ENV: "~/runs"}, tmp_path / "x" / "harness") == tmp_path / "runs"
    assert default_results_dir({RESULTS_ENV: "rel"}, tmp_path / "x" / "harness").is_absolute()


def test_a_checkout_keeps_its_results_beside_it(tmp_path):
    root = fake_checkout(tmp_path)
    assert checkout_root(root / "harness") == root
    assert default_results_dir({"HOME": str(tmp_path / "home")}, root / "harness") == root / "results"


def test_an_installed_package_uses_the_xdg_data_folder(tmp_path):
    pkg = installed_package(tmp_path)
    assert checkout_root(pkg) is None
    home = tmp_path / "home"
    assert default_results_dir({"HOME": str(home)}, pkg) == home / ".local" / "share" / "harness" / "results"
    data = tmp_path / "data"
    assert default_results_dir({"HOME": str(home), "XDG_DATA_HOME": str(data)}, pkg) == data / "harness" / "results"
    # The XDG spec says a relative XDG_DATA_HOME is invalid: ignored, not resolved against the current folder.
    assert default_results_dir({"HOME": str(home), "XDG_DATA_HOME": "data"}, pkg) == (
        home / ".local" / "share" / "harness" / "results")


def test_the_default_does_not_depend_on_the_current_folder(tmp_path, monkeypatch):
    pkg = installed_package(tmp_path)
    env = {"HOME": str(tmp_path / "home")}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = default_results_dir(env, pkg)
    monkeypatch.chdir(tmp_path / "b")
    assert default_results_dir(env, pkg) == first and first.is_absolute()
