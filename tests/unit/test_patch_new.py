"""`harness patch new` / `harness patch check` against real git checkouts made here (a tiny SGLang layout).

The promise: the patch set made from a checkout's changes, applied by the agent's own apply path to the
checkout's base, gives the edited tree back byte for byte (modes included); making it changes nothing
in the checkout; a refused request leaves the patches folder as it was.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.agent.tree import Tree
from harness.cli.app import app
from harness.common.protocol import FileEntry, PatchEntry
from harness.errors import ConfigError
from harness.experiments.patchsets import PatchSet, load_patch_set
from harness.experiments.spec import patch_entries
from harness.patchtools.check import dry_check
from harness.patchtools.new import (
    make_patch_set,
    parse_target,
    patch_file_names,
    pyproject_version,
    slug,
    undecodable,
)
from tests.conftest import tree_snapshot

ROOT = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def make_checkout(tmp_path: Path, version: str | None = "0.5.23") -> Path:
    """A small SGLang-shaped repo: version.py, modules at two depths, a script, a binary, CRLF text."""
    r = tmp_path / "sglang"
    srt = r / "python" / "sglang" / "srt"
    srt.mkdir(parents=True)
    if version:
        (r / "python" / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    (r / "python" / "sglang" / "__init__.py").write_text("")
    (srt / "server.py").write_text("def serve():\n    return 'stock'\n")
    (srt / "old_name.py").write_text("".join(f"LINE_{i} = {i}\n" for i in range(30)))
    (srt / "gone.py").write_text("DELETE_ME = True\n")
    (r / "run.sh").write_text("#!/bin/sh\necho run\n")
    (r / "run.sh").chmod(0o755)
    (r / "tool.py").write_text("print('tool')\n")
    (r / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (r / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    (r / ".gitattributes").write_text("dos.txt -text\n")
    (r / ".gitignore").write_text("build/\n")
    (r / "was_empty.txt").write_bytes(b"")
    (r / "empty_gone.txt").write_bytes(b"")
    (r / "becomes_link.py").write_text("X = 1\n")
    subprocess.run(["git", "init", "-q", str(r)], check=True)
    commit(r, "base")
    (r / "build").mkdir()
    (r / "build" / "cache.bin").write_bytes(b"\x00ignored")  # ignored: never captured
    return r


def edit_everything(r: Path) -> None:
    """Every shape a change can take, staged and not, tracked and untracked."""
    srt = r / "python" / "sglang" / "srt"
    (srt / "server.py").write_text("def serve():\n    return 'patched'\n")
    (srt / "old_name.py").rename(srt / "new_name.py")  # an unstaged move: a deletion plus an untracked file
    (srt / "gone.py").unlink()
    (r / "run.sh").chmod(0o644)  # mode only
    (r / "tool.py").chmod(0o755)
    (r / "tool.py").write_text("print('tool 2')\n")
    git(r, "add", "tool.py")  # staged...
    (r / "tool.py").write_text("print('tool 3')\n")  # ...and changed again: the tree on disk counts
    (r / "blob.bin").write_bytes(bytes(range(255, -1, -1)) * 4)
    (r / "dos.txt").write_bytes(b"one\r\nTWO\r\n")
    (srt / "layers" / "deep").mkdir(parents=True)
    (srt / "layers" / "deep" / "kernel.py").write_text("def k():\n    return 42\n")
    (srt / "layers" / "empty.py").write_text("")
    (r / "new.bin").write_bytes(b"\x00\x01\x02\xff" * 64)
    (r / "latest.sh").symlink_to("run.sh")
    (srt / "café.py").write_text("NAME = 'café'\n")  # a non-ASCII path: unquoted in the patch headers
    (r / "with space & $sign.py").write_text("SPACE = 1\n")  # git adds a tab after such a header path
    (r / "-dash.txt").write_text("looks like an option\n")
    (r / 'tab\tquote"back\\slash\nnewline.py').write_text("Q = 1\n")  # C-quoted in the patch headers
    (r / "was_empty.txt").write_bytes(b"now\nfull")  # no newline at the end
    (r / "empty_gone.txt").unlink()
    (r / "becomes_link.py").unlink()
    (r / "becomes_link.py").symlink_to("tool.py")  # a type change: file -> link
    (srt / "to_layers").symlink_to("layers")  # links inside the tree, to a folder and up one level
    (srt / "up.sh").symlink_to("../../../run.sh")
    (r / "crlf_new.txt").write_bytes(b"a\r\nb\r\n")  # no autocrlf: the CR bytes travel as they are


def apply_as_agent(repo: Path, ps: PatchSet, tmp_path: Path) -> dict:
    """The agent's apply path (Tree.plan + Tree.apply, as an attempt runs it); returns the plan."""
    patches, files = patch_entries((ps,))
    tree = Tree(str(repo), str(tmp_path / "scratch"))
    tree.open()
    head = tree.head()
    dirty, _ = tree.dirty_paths([])
    plan = tree.plan([PatchEntry(**p) for p in patches], [FileEntry(**f) for f in files], dirty,
                     str(tmp_path / "patch-dir"), head)
    journal = tree.new_journal("r", "a", "r/a", head, dirty, plan)
    tree.apply(journal, plan)
    return journal


def reset(repo: Path, rev: str = "HEAD") -> None:
    git(repo, "reset", "-q", "--hard", rev)
    git(repo, "clean", "-qfd")  # not -x: the ignored build/ stays, as in the edited tree


def git_state(repo: Path) -> tuple[str, str, str]:
    """What `patch new` must not change: status, the index file's bytes, the object store."""
    objects = sorted(str(p.relative_to(repo)) for p in (repo / ".git" / "objects").rglob("*"))
    return git(repo, "status", "--porcelain=v1", "--untracked-files=all"), \
        (repo / ".git" / "index").read_bytes().hex(), "\n".join(objects)


def folder_state(folder: Path) -> dict:
    return tree_snapshot(folder) if folder.exists() else {}


# --------------------------------------------------------------------------- the round trip


def test_uncommitted_changes_round_trip_byte_for_byte(tmp_path):
    repo = make_checkout(tmp_path)
    base = tree_snapshot(repo)
    edit_everything(repo)
    edited = tree_snapshot(repo)
    before = git_state(repo)

    ps = make_patch_set("my_change", repo, tmp_path / "patches", description="everything at once")

    assert git_state(repo) == before and tree_snapshot(repo) == edited  # the checkout is only read
    assert sorted(p.name for p in (tmp_path / "patches" / "my_change").iterdir()) == \
        ["0001-my_change.patch", "README.md", "patchset.yaml"]
    assert ps.description == "everything at once" and ps.applies_to == ("sglang==0.5.23",)
    text = ps.variants[0].patches[0].text
    assert "rename from python/sglang/srt/old_name.py" in text and "GIT binary patch" in text
    assert "old mode 100755" in text and "build/" not in text and "+++ b/python/sglang/srt/café.py" in text
    assert "my_change" in (tmp_path / "patches" / "my_change" / "README.md").read_text()

    reset(repo)
    assert tree_snapshot(repo) == base
    assert dry_check(ps, repo) == []  # what `patch check` and `validate --against` run
    assert tree_snapshot(repo) == base
    apply_as_agent(repo, ps, tmp_path)
    assert tree_snapshot(repo) == edited


def test_sha256_is_stable(tmp_path):
    repo = make_checkout(tmp_path)
    edit_everything(repo)
    a = make_patch_set("s", repo, tmp_path / "p1", description="d")
    b = make_patch_set("s", repo, tmp_path / "p2", description="d")
    assert a.sha256 == b.sha256 == load_patch_set(tmp_path / "p1", "s").sha256


def test_range_gives_one_numbered_patch_per_commit_applied_in_order(tmp_path):
    repo = make_checkout(tmp_path)
    base = git(repo, "rev-parse", "HEAD").strip()
    srt = repo / "python" / "sglang" / "srt"
    (srt / "server.py").write_text("def serve():\n    return 'first'\n")
    commit(repo, "Serve: first change")
    (srt / "extra.py").write_text("EXTRA = 1\n")
    (srt / "gone.py").unlink()
    commit(repo, "Second change, with a new file!")
    tip = tree_snapshot(repo)
    (repo / "tool.py").write_text("uncommitted: not part of a range\n")

    ps = make_patch_set("series", repo, tmp_path / "patches", commit_range=f"{base[:10]}..HEAD")

    patches = ps.variants[0].patches
    assert [p.name for p in patches] == ["0001-Serve-first-change.patch", "0002-Second-change-with-a-new-file.patch"]
    assert "'first'" in patches[0].text and "extra.py" not in patches[0].text and "extra.py" in patches[1].text
    reset(repo, base)
    assert dry_check(ps, repo) == []
    apply_as_agent(repo, ps, tmp_path)
    assert tree_snapshot(repo) == tip


def test_range_whose_commits_change_one_path_is_refused_or_squashed(tmp_path):
    """The agent checks all patch files of a set in one `git apply --check` (each against the unpatched
    tree): a path two commits change would be refused on the host, so it is refused here, with --squash."""
    repo = make_checkout(tmp_path)
    base = git(repo, "rev-parse", "HEAD").strip()
    server = repo / "python" / "sglang" / "srt" / "server.py"
    for word in ("first", "second"):
        server.write_text(f"def serve():\n    return '{word}'\n")
        commit(repo, word)
    tip = tree_snapshot(repo)
    with pytest.raises(ConfigError) as exc:
        make_patch_set("series", repo, tmp_path / "patches", commit_range=f"{base}..")
    assert "0001-first.patch and 0002-second.patch both change python/sglang/srt/server.py" in exc.value.message
    assert "--squash" in (exc.value.hint or "") and not (tmp_path / "patches").exists()

    ps = make_patch_set("series", repo, tmp_path / "patches", commit_range=f"{base}..", squash=True)
    assert [p.name for p in ps.variants[0].patches] == ["0001-series.patch"]
    reset(repo, base)
    apply_as_agent(repo, ps, tmp_path)
    assert tree_snapshot(repo) == tip


# --------------------------------------------------------------------------- refusals


def _not_a_repo(tmp_path: Path) -> dict:
    plain = tmp_path / "plain"
    (plain / "python" / "sglang").mkdir(parents=True)
    return {"checkout": plain}


def _clean(tmp_path: Path) -> dict:
    return {"checkout": make_checkout(tmp_path)}


def _existing(tmp_path: Path) -> dict:
    repo = make_checkout(tmp_path)
    edit_everything(repo)
    (tmp_path / "patches" / "mine").mkdir(parents=True)
    (tmp_path / "patches" / "mine" / "0001-old.patch").write_text("--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+x\n")
    return {"checkout": repo}


def _bad_name(tmp_path: Path) -> dict:
    repo = make_checkout(tmp_path)
    edit_everything(repo)
    return {"checkout": repo, "name": "../escape"}


def _unknown_version(tmp_path: Path) -> dict:
    repo = make_checkout(tmp_path, version=None)
    edit_everything(repo)
    return {"checkout": repo}


def _subfolder(tmp_path: Path) -> dict:
    repo = make_checkout(tmp_path)
    edit_everything(repo)
    return {"checkout": repo / "python"}


def _bad_range(tmp_path: Path) -> dict:
    repo = make_checkout(tmp_path)
    return {"checkout": repo, "commit_range": "--all..HEAD"}


def _nested_repo(repo: Path, *, commit_it: bool = True) -> Path:
    """A git repository of its own inside the checkout (a clone, a vendored library)."""
    nested = repo / "third_party" / "lib"
    nested.mkdir(parents=True)
    (nested / "lib.py").write_text("LIB = 1\n")
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    if commit_it:
        commit(nested, "lib")
    return nested


def _edited(tmp_path: Path) -> Path:
    repo = make_checkout(tmp_path)
    edit_everything(repo)
    return repo


def _untracked_nested_repo(tmp_path: Path) -> dict:
    repo = _edited(tmp_path)
    _nested_repo(repo)
    return {"checkout": repo}


def _untracked_nested_repo_no_commit(tmp_path: Path) -> dict:
    repo = _edited(tmp_path)
    _nested_repo(repo, commit_it=False)
    return {"checkout": repo}


def _nested_gitfile(tmp_path: Path) -> dict:
    """A folder whose .git is a file (a worktree's or a submodule's `gitdir:` pointer), even a broken one."""
    repo = _edited(tmp_path)
    (repo / "wt").mkdir()
    (repo / "wt" / ".git").write_text("gitdir: ../../elsewhere/.git\n")
    (repo / "wt" / "code.py").write_text("CODE = 1\n")
    return {"checkout": repo}


def _force_over_existing(tmp_path: Path) -> dict:
    """--force replaces a set only once the new one is made: a refusal leaves the old one as it was."""
    kw = _existing(tmp_path)
    _nested_repo(kw["checkout"])
    return {**kw, "force": True}


def _submodule(tmp_path: Path) -> Path:
    repo = make_checkout(tmp_path)
    _nested_repo(repo)
    commit(repo, "a submodule")  # `git add` of a nested repository: a gitlink (mode 160000)
    return repo


def _submodule_moved(tmp_path: Path) -> dict:
    repo = _submodule(tmp_path)
    (repo / "third_party" / "lib" / "lib.py").write_text("LIB = 2\n")
    commit(repo / "third_party" / "lib", "lib 2")
    edit_everything(repo)
    return {"checkout": repo}


def _submodule_dirty(tmp_path: Path) -> dict:
    repo = _submodule(tmp_path)
    (repo / "third_party" / "lib" / "lib.py").write_text("LIB = 'edited, not committed'\n")
    edit_everything(repo)
    return {"checkout": repo}


def _link_to(target: str, at: str = "python/sglang/srt/link") -> Callable[[Path], dict]:
    def setup(tmp_path: Path) -> dict:
        repo = _edited(tmp_path)
        (repo / at).symlink_to(target)
        return {"checkout": repo}
    return setup


def _named(name: str | bytes) -> Callable[[Path], dict]:
    def setup(tmp_path: Path) -> dict:
        repo = _edited(tmp_path)
        path = os.fsencode(repo / "python") + b"/" + (name if isinstance(name, bytes) else name.encode())
        with open(path, "wb") as f:
            f.write(b"X = 1\n")
        return {"checkout": repo}
    return setup


def _autocrlf(tmp_path: Path) -> dict:
    repo = _edited(tmp_path)
    git(repo, "config", "core.autocrlf", "true")
    (repo / "python" / "windows.py").write_bytes(b"A = 1\r\nB = 2\r\n")  # git would store LF
    return {"checkout": repo}


def _range_with(change: Callable[[Path], object]) -> Callable[[Path], dict]:
    def setup(tmp_path: Path) -> dict:
        repo = make_checkout(tmp_path)
        base = git(repo, "rev-parse", "HEAD").strip()
        (repo / "tool.py").write_text("print('first')\n")
        commit(repo, "first")
        change(repo)
        commit(repo, "second")
        return {"checkout": repo, "commit_range": f"{base}..HEAD"}
    return setup


REFUSALS: dict[str, tuple[Callable[[Path], dict], str, str]] = {
    "not-a-repo": (_not_a_repo, "not a git repository", "root of a git checkout"),
    "empty-diff": (_clean, "no changes to capture", "--range"),
    "existing-name": (_existing, "already exists", "--force"),
    "bad-name": (_bad_name, "is not allowed", "letters, digits"),
    "unknown-version": (_unknown_version, "cannot read SGLang's version", "--applies-to"),
    "subfolder": (_subfolder, "a folder inside the repository", "root"),
    "bad-range": (_bad_range, "is not a revision", ""),
    # what a patch set cannot carry byte for byte
    "nested-repo": (_untracked_nested_repo, "third_party/lib/ holds its own git repository", ".gitignore"),
    "nested-repo-no-commit": (_untracked_nested_repo_no_commit, "third_party/lib/ holds its own git repository",
                              "move third_party/lib/.git out"),
    "force-over-existing": (_force_over_existing, "third_party/lib/ holds its own git repository", ".gitignore"),
    "nested-gitfile": (_nested_gitfile, "wt/ holds its own git repository", "wt/ to .gitignore"),
    "submodule-moved": (_submodule_moved, "submodule third_party/lib differs from HEAD", "git submodule update"),
    "submodule-dirty": (_submodule_dirty, "submodule third_party/lib differs from HEAD", "git submodule update"),
    "link-absolute": (_link_to("/etc/passwd"), "python/sglang/srt/link is a symbolic link to /etc/passwd, "
                      "an absolute path", "inside the checkout"),
    "link-outside": (_link_to("../../../../outside.py"), "link to ../../../../outside.py, outside the checkout",
                     "inside the checkout"),
    "link-into-git": (_link_to("../../../.git/config"), "link to ../../../.git/config, inside .git/", "not .git/"),
    "path-not-utf8": (_named(b"latin\xe9.py"), "path 'python/latin\\udce9.py' is not UTF-8", "UTF-8 name"),
    "crlf-under-autocrlf": (_autocrlf, "python/windows.py in another form than its bytes on disk",
                            "core.autocrlf false"),
    "range-link-outside": (_range_with(lambda r: (r / "escape").symlink_to("/tmp")),
                           "(second): escape is a symbolic link to /tmp, an absolute path", "inside the checkout"),
    "range-gitlink": (_range_with(_nested_repo), "(second): third_party/lib is a submodule or nested repository",
                      "checkout's own files"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_say_why_and_create_nothing(tmp_path, case):
    setup, message, hint = REFUSALS[case]
    kw = setup(tmp_path)
    checkout, name = kw.pop("checkout"), kw.pop("name", "mine")
    patches = tmp_path / "patches"
    before = folder_state(patches), folder_state(checkout)
    with pytest.raises(ConfigError) as exc:
        make_patch_set(name, checkout, patches, **kw)
    assert message in exc.value.message and hint in (exc.value.hint or "")
    assert (folder_state(patches), folder_state(checkout)) == before


def _make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()  # the socket file stays
    else:
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("no permission to make a device node here")


@pytest.mark.parametrize("kind, rel", [("fifo", "python/sglang/srt/pipe"), ("socket", "s.sock"),
                                       ("character device", "null"), ("fifo", "tool.py")])
def test_special_files_are_refused_by_name(tmp_path, kind, rel):
    """git skips a fifo, socket or device without a word (and fails on a tracked file turned fifo): the
    set would lack it. (No tree_snapshot here: it would read the fifo and wait.)"""
    repo = _edited(tmp_path)
    target = repo / rel
    if target.exists():
        target.unlink()
    _make_special(target, kind)
    before = git_state(repo)
    with pytest.raises(ConfigError) as exc:
        make_patch_set("mine", repo, tmp_path / "patches")
    assert f"{rel} (a {kind}) is no file git can store" in exc.value.message, exc.value.message
    assert ".gitignore" in (exc.value.hint or "")
    assert not (tmp_path / "patches").exists() and git_state(repo) == before


def test_ignored_nested_repo_and_special_files_are_left_out_and_a_clean_submodule_is_fine(tmp_path):
    """What .gitignore hides is no change, whatever it is; a submodule as HEAD has it is not captured."""
    repo = _submodule(tmp_path)
    edit_everything(repo)
    _nested_repo(repo / "build")
    os.mkfifo(repo / "build" / "pipe")
    (repo / ".gitignore").write_text("build/\n*.sock\n")
    _make_special(repo / "python" / "srv.sock", "socket")
    ps = make_patch_set("mine", repo, tmp_path / "patches")
    text = ps.variants[0].patches[0].text
    assert "+*.sock" in text and "server.py" in text
    assert "a/build/" not in text and "srv.sock\n" not in text and "third_party" not in text


def test_cli_refuses_a_nested_repository_without_traceback(tmp_path):
    repo = _edited(tmp_path)
    _nested_repo(repo, commit_it=False)  # `git add` itself fails on it
    r = CliRunner().invoke(app, ["patch", "new", "mine", "--from", str(repo), "--patches-dir",
                                 str(tmp_path / "patches")])
    assert r.exit_code == 2, r.output
    assert "third_party/lib/ holds its own git repository" in r.output and "hint:" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "patches").exists()


def test_applies_to_when_the_version_cannot_be_read_and_force_replaces(tmp_path):
    repo = make_checkout(tmp_path, version=None)
    edit_everything(repo)
    patches = tmp_path / "patches"
    make_patch_set("mine", repo, patches, applies_to="0.5.16")
    (patches / "mine" / "stale.patch").write_text("--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+x\n")
    ps = make_patch_set("mine", repo, patches, applies_to="sglang==0.5.16", force=True)
    assert ps.applies_to == ("sglang==0.5.16",)
    assert not (patches / "mine" / "stale.patch").exists()
    assert [p.name for p in patches.iterdir()] == ["mine"]  # no staging folder left behind


def test_version_from_pyproject_when_version_py_is_absent(tmp_path):
    repo = make_checkout(tmp_path, version=None)
    (repo / "python" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nversion = "9"\n\n[project]\nname = "sglang"\n'
        'version = "0.5.16"\n\n[tool.x]\nversion = "1"\n')
    commit(repo, "pyproject")
    edit_everything(repo)
    assert make_patch_set("p", repo, tmp_path / "patches").applies_to == ("sglang==0.5.16",)


# --------------------------------------------------------------------------- pure parts


def test_pure_helpers():
    assert slug("Fix: FP8 KV  cast (e4m3)!") == "Fix-FP8-KV-cast-e4m3"
    assert slug("...") == "change"
    assert patch_file_names(["a b", ""], "set") == ["0001-a-b.patch", "0002-set.patch"]
    assert parse_target("0.5.23") == parse_target("sglang==0.5.23") == "sglang==0.5.23"
    with pytest.raises(ConfigError):
        parse_target("vllm==1")
    assert pyproject_version('[project]\nname = "x"\nversion = "1.2"\n') == "1.2"
    assert pyproject_version('[project]\ndynamic = ["version"]\n') is None
    assert undecodable(b"diff --git a/x b/x\n+ok\ndiff --git a/y b/y\n+\xff\n") == ["diff --git a/y b/y"]


# --------------------------------------------------------------------------- the CLI


def test_cli_new_then_check(tmp_path):
    repo = make_checkout(tmp_path)
    base = tree_snapshot(repo)
    edit_everything(repo)
    patches = tmp_path / "patches"
    runner = CliRunner()
    r = runner.invoke(app, ["patch", "new", "cli_set", "--from", str(repo), "--patches-dir", str(patches),
                            "--description", "from the CLI"])
    assert r.exit_code == 0, r.output
    assert "created patch set cli_set" in r.output and "0001-cli_set.patch" in r.output
    r = runner.invoke(app, ["patch", "check", "cli_set", "--against", str(repo), "--patches-dir", str(patches)])
    assert r.exit_code == 2 and "does not apply" in r.output and "already exists" in r.output  # git's reason
    reset(repo)
    r = runner.invoke(app, ["patch", "check", "cli_set", "--against", str(repo), "--patches-dir", str(patches)])
    assert r.exit_code == 0 and "ok   patch set cli_set applies" in r.output, r.output
    assert tree_snapshot(repo) == base


def test_cli_check_picks_the_variant_for_the_checkouts_version(tmp_path):
    old = make_checkout(tmp_path / "old", version="0.5.16")
    (old / "python" / "sglang" / "srt" / "server.py").write_text("def serve():\n    return 'stock, older'\n")
    commit(old, "0.5.16's server")
    new = make_checkout(tmp_path / "new", version="0.5.23")
    for repo in (old, new):
        (repo / "python" / "sglang" / "srt" / "server.py").write_text("def serve():\n    return 'patched'\n")
    patches = tmp_path / "patches"
    make_patch_set("both", new, patches)
    make_patch_set("older", old, tmp_path / "staging")
    (patches / "both" / "sglang-0.5.16").mkdir()
    (tmp_path / "staging" / "older" / "0001-older.patch").rename(patches / "both" / "sglang-0.5.16" / "0001-both.patch")
    with open(patches / "both" / "patchset.yaml", "a") as f:
        f.write("variants: {sglang==0.5.16: sglang-0.5.16}\n")
    reset(old)
    reset(new)
    runner = CliRunner()
    for repo in (old, new):
        r = runner.invoke(app, ["patch", "check", "both", "--against", str(repo), "--patches-dir", str(patches)])
        assert r.exit_code == 0 and "ok   patch set both applies" in r.output, r.output
    (old / "python" / "sglang" / "version.py").write_text('__version__ = "0.4.0"\n')
    r = runner.invoke(app, ["patch", "check", "both", "--against", str(old), "--patches-dir", str(patches)])
    assert r.exit_code == 2 and "no variant for sglang==0.4.0" in r.output, r.output


def test_cli_refusal_exits_2_with_hint_in_a_subprocess(tmp_path):
    repo = make_checkout(tmp_path, version=None)
    edit_everything(repo)
    p = subprocess.run([sys.executable, "-m", "harness", "patch", "new", "mine", "--from", str(repo),
                        "--patches-dir", str(tmp_path / "patches")], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "cannot read SGLang's version" in p.stderr and "hint: say which SGLang" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "patches").exists()


def test_cli_check_unknown_set_names_the_available_ones(tmp_path):
    (tmp_path / "patches" / "one").mkdir(parents=True)
    r = CliRunner().invoke(app, ["patch", "check", "two", "--against", str(tmp_path), "--patches-dir",
                                 str(tmp_path / "patches")])
    assert r.exit_code == 2 and "available patch sets: one" in r.output


def test_cli_new_from_the_simulated_target_names_the_sglang_release_it_claims(tmp_path):
    """The simulated checkout claims a release (its version.py), as a real one does: `patch new` writes
    `applies_to: sglang==<that release>`, not the name `harness-sim` that only the simulator knows; the set
    then checks against the simulated checkout (and validates against it) without a "made for" note."""
    import yaml

    from harness.common.targetid import read_server_version
    from harness.sim import init_target

    target = init_target(tmp_path / "sim" / "sglang", arch="sm90", gpus=8)
    claimed = read_server_version(str(target.repo))
    assert claimed
    server = target.repo / "python" / "sglang" / "launch_server.py"
    stock = server.read_bytes()
    server.write_bytes(stock + b"# a local edit\n")
    patches = tmp_path / "patches"
    runner = CliRunner()
    r = runner.invoke(app, ["patch", "new", "sim_edit", "--from", str(target.repo), "--patches-dir", str(patches)])
    assert r.exit_code == 0, r.output
    meta = yaml.safe_load((patches / "sim_edit" / "patchset.yaml").read_text())
    assert meta["applies_to"] == f"sglang=={claimed}"
    assert f"SGLang {claimed}" in (patches / "sim_edit" / "README.md").read_text()
    server.write_bytes(stock)
    r = runner.invoke(app, ["patch", "check", "sim_edit", "--against", str(target.repo), "--patches-dir", str(patches)])
    assert r.exit_code == 0 and "ok   patch set sim_edit applies" in r.output and "note:" not in r.output, r.output
