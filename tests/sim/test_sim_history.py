"""`sim init --history`: the commits a bisect is tried on — harmless ones, one that slows a backend's decode (a
constant in its source the model runner applies), one whose server cannot start, fixed by the next — with ids
that follow from the layout alone; layouts that cannot be made are refused."""

from __future__ import annotations

import os
import subprocess

import pytest
from typer.testing import CliRunner

from harness.cli.app import app
from harness.sim import Layout, init_target
from harness.sim.history import SERVER_ARGS

FI = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return init_target(tmp_path_factory.mktemp("hist") / "sim", history=Layout(commits=6, slow_at=4, broken_at=2))


def test_the_history_is_n_commits_on_main_with_the_slow_and_the_broken_one_where_asked(history):
    repo = history.repo
    assert git(repo, "rev-list", "--reverse", "main").split() == list(history.commits) and len(history.commits) == 7
    assert git(repo, "status", "--porcelain") == ""
    changed = {k: set(git(repo, "diff", "--name-only", f"{history.commits[k - 1]}..{history.commits[k]}").split())
               for k in range(1, 7)}
    assert changed[4] == {"CHANGELOG.md", FI, "python/sglang/srt/layers/attention/flashinfer_backend.py"}
    assert changed[2] == changed[3] == {"CHANGELOG.md", SERVER_ARGS}
    assert all(changed[k] == {"CHANGELOG.md"} for k in (1, 5, 6))
    assert "DECODE_COST_FACTOR = 1.15\n" in git(repo, "show", f"{history.commits[4]}:{FI}")
    assert "DECODE_COST_FACTOR" not in git(repo, "show", f"{history.commits[3]}:{FI}")
    # the fix gives server_args.py back byte for byte
    assert git(repo, "show", f"{history.commits[3]}:{SERVER_ARGS}") == git(repo, "show", f"{history.commits[1]}:{SERVER_ARGS}")
    subjects = git(repo, "log", "--reverse", "--format=%s", "main").splitlines()
    assert subjects[4].startswith("attention: flashinfer ") and subjects[2].startswith("server_args: ")


def test_the_broken_commits_server_args_does_not_import_and_the_next_one_does(history, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    results = []
    for k in (2, 3):
        tree = tmp_path / f"at{k}"
        git(history.repo, "worktree", "add", "-q", "--detach", str(tree), history.commits[k])
        p = subprocess.run([str(history.python), "-c", "import sys; sys.path.insert(0, 'python'); "
                            "import sglang.srt.server_args"], cwd=tree, env=env, capture_output=True, text=True)
        git(history.repo, "worktree", "remove", "--force", str(tree))
        results.append((p.returncode, p.stderr.strip().splitlines()[-1:] if p.returncode else []))
    assert results == [(1, ["ImportError: cannot import name 'resolve_served_model_name' from 'sglang.srt.utils' "
                            f"({tmp_path / 'at2'}/python/sglang/srt/utils.py)"]), (0, [])]


def test_the_same_layout_gives_the_same_ids(history, tmp_path):
    again = init_target(tmp_path / "again", history=Layout(commits=6, slow_at=4, broken_at=2))
    assert again.commits == history.commits
    other = init_target(tmp_path / "other", history=Layout(commits=6, slow_at=5, broken_at=2))
    assert other.commits[:5] == history.commits[:4] + (other.commits[4],) and other.commits[4] != history.commits[4]


@pytest.mark.parametrize(("layout", "says"), [
    (Layout(commits=5, slow_at=6), "slow_at must name one of the history's commits, 1 to 5"),
    (Layout(commits=5, broken_at=5), "broken_at must be 1 to 4"),
    (Layout(commits=5, slow_at=3, broken_at=3), "different commits"),
    (Layout(commits=5, slow_at=3, slow_backend="nope"), "unknown slow backend 'nope'"),
    (Layout(commits=5, slow_at=3, slow_factor=0.0), "slow_factor must be between"),
])
def test_a_layout_that_cannot_be_made_is_refused_before_anything_is_written(tmp_path, layout, says):
    with pytest.raises(ValueError, match=says):
        init_target(tmp_path / "t", history=layout)
    assert not (tmp_path / "t").exists()


def test_sim_init_takes_the_layout_and_says_where_the_commits_are(tmp_path):
    p = CliRunner().invoke(app, ["sim", "init", str(tmp_path / "t"), "--history", "4", "--slow-at", "3",
                                 "--slow-factor", "1.3", "--broken-at", "1"])
    assert p.exit_code == 0, p.output
    assert "history: 4 commits on main after " in p.output
    assert "  commit 3 " in p.output and "a decode step of flashinfer costs 1.3x" in p.output
    assert "the server dies at startup (ImportError); commit 2 fixes it" in p.output
    bad = CliRunner().invoke(app, ["sim", "init", str(tmp_path / "u"), "--history", "4", "--broken-at", "4"])
    assert bad.exit_code == 2 and "broken_at must be 1 to 3" in bad.output
