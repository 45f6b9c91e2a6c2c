"""Any diff `git apply` accepts is a patch set: pure renames, mode-only changes, CRLF content — read,
applied through the agent (local transport, the apply-revert mode) and reverted byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.experiments.config import HostConfig
from harness.experiments.patchsets import load_patch_set
from harness.experiments.resolve import resolve_file
from harness.run.runner import check_patches
from tests.conftest import tree_snapshot

pytestmark = pytest.mark.integration


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    r = tmp_path / "target"
    (r / "pkg").mkdir(parents=True)
    (r / "pkg" / "old.py").write_text("".join(f"V{i} = {i}\n" for i in range(20)))
    (r / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (r / "run.sh").chmod(0o755)
    (r / "dos.txt").write_bytes(b"line one\r\nline two\r\n")  # CRLF content, stored as is
    (r / ".gitattributes").write_text("dos.txt -text\n")
    git(tmp_path, "init", "-q", str(r))
    git(r, "add", "-A")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    return r


def make_patch(repo: Path, tmp_path: Path, name: str, edit) -> Path:
    scratch = tmp_path / f"scratch-{name}"
    subprocess.run(["git", "clone", "-q", str(repo), str(scratch)], check=True)
    edit(scratch)
    git(scratch, "add", "-A")
    folder = tmp_path / "patches" / name
    folder.mkdir(parents=True)
    (folder / "0001.patch").write_bytes(git(scratch, "diff", "--cached", "-M"))
    return folder / "0001.patch"


SHAPES = {
    "pure-rename": lambda s: (s / "pkg" / "old.py").rename(s / "pkg" / "new.py"),
    "mode-only": lambda s: (s / "run.sh").chmod(0o644),
    "crlf-content": lambda s: (s / "dos.txt").write_bytes(b"line one\r\nline 2\r\n"),
    "symlink-to-a-folder": lambda s: (s / "pkg-link").symlink_to("pkg"),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_patch_set_of_each_shape_is_read_applied_and_reverted(tmp_path, repo, shape):
    patch = make_patch(repo, tmp_path, shape, SHAPES[shape])
    text = patch.read_bytes()
    if shape in ("pure-rename", "mode-only"):
        assert b"+++ " not in text  # these shapes really have no '+++' header
    ps = load_patch_set(tmp_path / "patches", shape)
    assert ps.variants[0].patches[0].text.encode() == text, "the patch must travel byte for byte (CRLF included)"
    before = tree_snapshot(repo)
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "shape", "model": {"path": "/m"}, "patches": [shape],
                                    "server": {"port": "auto"}}))
    host = HostConfig(address="local", repo=str(repo), python="python3", workdir=str(tmp_path / "work"))
    result = check_patches(resolve_file(exp, tmp_path / "patches"), "local", host)
    assert result.status == "ok", result.error
    assert result.revert.verified is True
    changed = set(result.patch.changed_paths.restore) | set(result.patch.changed_paths.delete)
    expected = {"pure-rename": {"pkg/old.py", "pkg/new.py"}, "mode-only": {"run.sh"},
                "crlf-content": {"dos.txt"}, "symlink-to-a-folder": {"pkg-link"}}[shape]
    assert changed == expected
    assert tree_snapshot(repo) == before


def test_text_that_is_no_diff_at_all_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "patches" / "junk"
    folder.mkdir(parents=True)
    (folder / "0001.patch").write_text("just some notes\n--- not really\n")
    with pytest.raises(ConfigError, match="not a diff") as exc:
        load_patch_set(tmp_path / "patches", "junk")
    assert "0001.patch" in str(exc.value)


def test_autocrlf_on_the_host_does_not_fool_the_revert_check(tmp_path, repo):
    """With core.autocrlf=true on an LF checkout, `git checkout` writes the restored file back with CRLF,
    and git's own hash of it does not change. The revert restores the bytes saved before applying and
    compares raw bytes: the tree is byte-identical, and the record says so only because it is."""
    git(repo, "config", "core.autocrlf", "true")
    make_patch(repo, tmp_path, "lf-edit", lambda s: (s / "pkg" / "old.py").write_text(
        "".join(f"V{i} = {i * 2}\n" for i in range(20))))
    before = tree_snapshot(repo)
    assert b"\r\n" not in (repo / "pkg" / "old.py").read_bytes()
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "crlf", "model": {"path": "/m"}, "patches": ["lf-edit"],
                                    "server": {"port": "auto"}}))
    host = HostConfig(address="local", repo=str(repo), python="python3", workdir=str(tmp_path / "work"))
    result = check_patches(resolve_file(exp, tmp_path / "patches"), "local", host)
    assert result.status == "ok", result.error
    assert b"\r\n" not in (repo / "pkg" / "old.py").read_bytes()
    assert tree_snapshot(repo) == before and result.revert.verified is True


def test_an_unverifiable_revert_is_never_reported_verified_whatever_git_config_says(tmp_path, repo):
    """The check itself: bytes that differ (CRLF written into an LF file while patched) change the
    manifest, even where git's filters normalise them to the same blob."""
    from harness.agent.tree import Git, digest

    git(repo, "config", "core.autocrlf", "true")
    g = Git(str(repo))
    before = digest(g.manifest())
    old = repo / "pkg" / "old.py"
    old.write_bytes(old.read_bytes().replace(b"\n", b"\r\n"))
    assert digest(g.manifest()) != before


def test_an_experiment_whose_plain_diff_names_an_absolute_path_is_refused_when_read_and_changes_nothing(
        tmp_path, repo):
    """#48: a plain unified diff creating `/abs/path` ran to `status: ok` (git strips it to a folder inside
    the tree). `harness run` and `harness validate` refuse it when they read the set, before any host is
    contacted: exit 2, the patch file and its line named, nothing applied, no record written."""
    folder = tmp_path / "patches" / "hostile"
    folder.mkdir(parents=True)
    (folder / "0001.patch").write_text(f"--- /dev/null\n+++ {tmp_path}/escaped.txt\n@@ -0,0 +1 @@\n+x\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "hostile", "model": {"path": "/m"}, "patches": ["hostile"],
                                   "server": {"port": "auto"}}))
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": {
        "address": "local", "repo": str(repo), "python": "python3", "workdir": str(tmp_path / "work")}}}))
    before = tree_snapshot(repo)
    for argv in (["run", str(exp), "--host", "box", "--results-dir", str(tmp_path / "results")],
                 ["validate", str(exp)]):
        p = subprocess.run([sys.executable, "-m", "harness", *argv], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        out = p.stdout + p.stderr
        assert p.returncode == 2, out
        assert f"{folder / '0001.patch'}:2: " in out and f"{tmp_path}/escaped.txt is an absolute path" in out
    assert tree_snapshot(repo) == before and not (tmp_path / "work").exists()
    assert not list(tmp_path.rglob("record.json")) and not (tmp_path / "escaped.txt").exists()
