"""The path rule for patch sets, checked when a set is read (before any host is contacted): every path
it writes is inside the work tree and outside .git/ — names read as `git apply` reads them, git's quoted
form included — and nothing is written through a symbolic link the set itself creates, nor may such a
link point outside the tree or into .git/. (The agent checks the same on the real tree: test_agent_tree.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.agent.tree import numstat_paths
from harness.common.diffheaders import diff_files
from harness.common.patchpaths import name_refusals
from harness.errors import ConfigError
from harness.experiments.patchsets import diff_paths, load_patch_set


def new_file(name: str, body: str = "+x\n") -> str:
    return f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n{body}"


def quoted_new_file(quoted: str) -> str:
    """A new file whose name git writes quoted: `quoted` is the name after `b/`, escapes as git writes them."""
    return (f'diff --git "a/{quoted}" "b/{quoted}"\nnew file mode 100644\n--- /dev/null\n+++ "b/{quoted}"\n'
            "@@ -0,0 +1 @@\n+x\n")


def link(name: str, target: str) -> str:
    return (f"diff --git a/{name} b/{name}\nnew file mode 120000\n--- /dev/null\n+++ b/{name}\n"
            f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")


def make_set(tmp_path: Path, patches: list[str], files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "patches"
    folder = root / "hostile"
    folder.mkdir(parents=True)
    for i, text in enumerate(patches):
        (folder / f"{i + 1:04d}.patch").write_text(text)
    for rel, content in (files or {}).items():
        (folder / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / "files" / rel).write_text(content)
    return root


def refusal(tmp_path: Path, patches: list[str], files: dict[str, str] | None = None) -> ConfigError:
    root = make_set(tmp_path, patches, files)
    with pytest.raises(ConfigError) as exc:
        load_patch_set(root, "hostile")
    return exc.value


@pytest.mark.parametrize("quoted", [r"\056git/hooks/post-checkout", r".gi\164/config", r"\056\056/evil",
                                    r"\056git/hooks/a\tb"])
def test_a_quoted_name_into_git_or_outside_is_refused_naming_the_patch_and_the_decoded_path(tmp_path, quoted):
    err = refusal(tmp_path, [quoted_new_file(quoted)])
    assert err.file is not None and err.file.name == "0001.patch"
    assert ".git/" in str(err) or "'..'" in str(err), str(err)


def test_a_quoted_rename_into_git_is_refused(tmp_path):
    text = ('diff --git a/pkg/x.py "b/\\056git/config"\nsimilarity index 100%\nrename from pkg/x.py\n'
            'rename to "\\056git/config"\n')
    err = refusal(tmp_path, [text])
    assert ".git/config" in str(err) and err.file is not None and err.file.name == "0001.patch"


def test_an_upper_case_git_folder_is_refused(tmp_path):
    err = refusal(tmp_path, [new_file(".GIT/hooks/pre-commit")])
    assert ".GIT/hooks/pre-commit" in str(err)


def test_a_diff_writing_through_a_link_an_earlier_patch_creates_is_refused_naming_that_patch(tmp_path):
    err = refusal(tmp_path, [link("lnk", "pkg"), new_file("lnk/evil.py")])
    assert err.file is not None and err.file.name == "0002.patch"
    assert "lnk/evil.py" in str(err) and "symbolic link lnk" in str(err)


@pytest.mark.parametrize("entry", ["lnk/post-checkout", "LNK/post-checkout", "lnk"])
def test_a_whole_file_written_through_a_link_the_set_creates_is_refused_naming_the_file(tmp_path, entry):
    err = refusal(tmp_path, [link("lnk", "pkg")], {entry: "#!/bin/sh\n"})
    assert str(err.file).endswith("hostile/files/" + entry)
    assert f"files/{entry}" in str(err) and "symbolic link" in str(err)


@pytest.mark.parametrize("target", ["/tmp/outside", "../outside", "pkg/../../outside", ".git/hooks",
                                    "pkg/../.Git"])
def test_a_link_pointing_outside_the_tree_or_into_git_is_refused(tmp_path, target):
    err = refusal(tmp_path, [link("lnk", target)])
    assert "lnk" in str(err) and target in str(err)


def test_a_link_reaching_outside_only_through_another_link_of_the_set_is_refused(tmp_path):
    """`a/b/up -> ../..` is the tree's root; `l1 -> a/b/up/..` reads as `a/b` but is the root's parent."""
    err = refusal(tmp_path, [link("a/b/up", "../.."), link("l1", "a/b/up/..")])
    assert err.file is not None and err.file.name == "0002.patch" and "l1" in str(err)


def test_a_removed_line_that_looks_like_a_header_is_content_not_a_path(tmp_path):
    """In a hunk, `--- a/.git/x` is the removed line `-- a/.git/x`: git reads it as content, so must we."""
    text = "--- a/notes.md\n+++ b/notes.md\n@@ -1,2 +1 @@\n keep\n--- a/.git/x\n"
    root = make_set(tmp_path, [text])
    assert load_patch_set(root, "hostile").variants[0].patches[0].text == text
    assert diff_paths(text) == {"notes.md"}


@pytest.mark.parametrize("entry", [".Git/config", "pkg/.GIT/x"])
def test_a_whole_file_inside_git_in_any_case_is_refused_naming_it(tmp_path, entry):
    err = refusal(tmp_path, [], {entry: "#!/bin/sh\n"})
    assert f"files/{entry} is inside .git/" in str(err) and str(err.file).endswith("hostile/files/" + entry)


def test_a_tracked_link_given_a_target_outside_is_refused(tmp_path):
    """No mode line: the link's mode is only on git's `index` line."""
    text = ("diff --git a/lnk b/lnk\nindex 1111111..2222222 120000\n--- a/lnk\n+++ b/lnk\n@@ -1 +1 @@\n-pkg\n"
            "\\ No newline at end of file\n+/etc\n\\ No newline at end of file\n")
    err = refusal(tmp_path, [text], {"lnk/passwd": "x\n"})
    assert "lnk" in str(err) and "/etc" in str(err) and err.file is not None and err.file.name == "0001.patch"


# ------------------------------------------------------------------ every form of diff `git apply` reads (#48)

NEW = "@@ -0,0 +1 @@\n+x\n"
STAMP = "\t2026-01-01 10:00:00.000000000 +0000"
# (the patch, the line that names the path, the path as the patch writes it)
HOSTILE = {
    "plain diff, absolute target": ("--- /dev/null\n+++ /tmp/harness-48\n" + NEW, 2, "/tmp/harness-48"),
    "plain diff, timestamps": (f"--- /dev/null{STAMP}\n+++ /tmp/harness-48{STAMP}\n" + NEW, 2, "/tmp/harness-48"),
    "plain diff, --- fine and +++ absolute": ("--- a/pkg/x.py\n+++ /tmp/harness-48\n@@ -1 +1 @@\n-a\n+b\n", 2,
                                              "/tmp/harness-48"),
    "plain diff, --- absolute and +++ fine": ("--- /etc/passwd\n+++ b/pkg/x.py\n@@ -1 +1 @@\n-a\n+b\n", 1,
                                              "/etc/passwd"),
    "plain diff, trailing spaces": ("--- /dev/null\n+++ /tmp/harness-48  \n" + NEW, 2, "/tmp/harness-48  "),
    "plain diff, CRLF line ends": ("--- /dev/null\r\n+++ /tmp/harness-48\r\n@@ -0,0 +1 @@\r\n+x\r\n", 2,
                                   "/tmp/harness-48"),
    "plain diff, /dev/null on both sides": ("--- /dev/null\n+++ /dev/null\n" + NEW, 2, "/dev/null"),
    "plain diff, quoted absolute": ('--- /dev/null\n+++ "/tmp/harness-\\064\\070"\n' + NEW, 2, "/tmp/harness-48"),
    "plain diff, quote never closed": ('--- /dev/null\n+++ "/tmp/harness-48\n' + NEW, 2, '"/tmp/harness-48'),
    "plain diff, b//abs": ("--- /dev/null\n+++ b//tmp/harness-48\n" + NEW, 2, "b//tmp/harness-48"),
    "plain diff, b/../../": ("--- /dev/null\n+++ b/../../etc/x\n" + NEW, 2, "b/../../etc/x"),
    "plain diff, octal dots": ('--- /dev/null\n+++ "b/\\056\\056/x"\n' + NEW, 2, "b/../x"),
    "plain diff, backslash dots": ("--- /dev/null\n+++ b/..\\..\\x\n" + NEW, 2, "b/..\\..\\x"),
    "plain diff, drive letter": ("--- /dev/null\n+++ b/C:\\Windows\\x\n" + NEW, 2, "b/C:\\Windows\\x"),
    "plain diff, '..' before a space-separated timestamp": (
        "--- /dev/null\n+++ b/sp ace/.. 2026-01-01 10:00:00.000000000 +0000\n" + NEW, 2, "b/sp ace/.."),
    "plain diff, -p0 guessed from an earlier name": (
        "--- /dev/null\n+++ notes\n" + NEW + "--- /dev/null\n+++ ../outside\n" + NEW, 6, "../outside"),
    "plain diff, header after a hunk git never opens": (
        "--- a/x\n@@ -1,3 +1,3 @@\n--- /dev/null\n+++ /tmp/harness-48\n" + NEW, 4, "/tmp/harness-48"),
    "git diff, +++ absolute": ("diff --git a/tmp/harness-48 b/tmp/harness-48\nnew file mode 100644\n"
                               "--- /dev/null\n+++ /tmp/harness-48\n" + NEW, 4, "/tmp/harness-48"),
    "git diff, absolute header": ("diff --git /tmp/harness-48 /tmp/harness-48\nnew file mode 100644\n"
                                  "index 0000000..e69de29\n", 1, "/tmp/harness-48"),
    "git diff, '..' header": ("diff --git a/../x b/../x\nnew file mode 100644\nindex 0000000..e69de29\n", 1,
                              "a/../x"),
    "git diff, /dev/null without new file mode": ("diff --git a/x b/x\n--- /dev/null\n+++ b/x\n" + NEW, 2,
                                                  "/dev/null"),
    "git diff, rename to absolute": ("diff --git a/pkg/x.py b/tmp/y.py\nsimilarity index 100%\n"
                                     "rename from pkg/x.py\nrename to /tmp/y.py\n", 4, "/tmp/y.py"),
    "git diff, rename old/new absolute": ("diff --git a/pkg/x.py b/pkg/y.py\nold mode 100644\nnew mode 100755\n"
                                          "similarity index 100%\nrename old /tmp/x.py\nrename new pkg/y.py\n", 5,
                                          "/tmp/x.py"),
    "git diff, copy to '..'": ("diff --git a/pkg/x.py b/y.py\nsimilarity index 100%\ncopy from pkg/x.py\n"
                               "copy to ../y.py\n", 4, "../y.py"),
    "git diff, quoted rename into .git": ('diff --git a/pkg/x.py "b/\\056git/config"\nsimilarity index 100%\n'
                                          'rename from pkg/x.py\nrename to "\\056git/config"\n', 1, "b/.git/config"),
}


@pytest.mark.parametrize("form", sorted(HOSTILE))
def test_every_form_of_diff_naming_a_path_outside_the_tree_is_refused_at_its_line(tmp_path, form):
    text, line, path = HOSTILE[form]
    err = refusal(tmp_path, [text])
    assert err.file is not None and err.file.name == "0001.patch" and err.line == line, str(err)
    assert f"0001.patch:{line}: " in str(err) and path in str(err), str(err)
    assert "relative to the repo root" in str(err.hint)


def test_the_issues_patch_set_is_refused_with_the_file_line_and_what_to_do(tmp_path):
    err = refusal(tmp_path, [HOSTILE["plain diff, absolute target"][0]])
    assert str(err).startswith(f"{tmp_path}/patches/hostile/0001.patch:2: ")
    assert "/tmp/harness-48 is an absolute path" in str(err)
    assert "hint: name files relative to the repo root as `git diff` does" in str(err)


BENIGN = {
    "git diff, quoted names with a space and a tab": (
        'diff --git "a/sp ace\\tx" "b/sp ace\\tx"\nnew file mode 100644\nindex 0000000..587be6b\n--- /dev/null\n'
        '+++ "b/sp ace\\tx"\n' + NEW),
    "plain diff, tab timestamps": f"--- a/pkg/x.py{STAMP}\n+++ b/pkg/x.py{STAMP}\n@@ -1 +1 @@\n-a\n+b\n",
    "plain diff, space timestamps": "--- a/pkg/x.py 2026-01-01 10:00:00\n+++ b/pkg/x.py 2026-01-01 10:00:00\n"
                                    "@@ -1 +1 @@\n-a\n+b\n",
    "plain diff, names without a folder (-p0)": "--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n",
    "plain diff, a deletion": "--- a/pkg/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
    "plain diff, CRLF": "--- /dev/null\r\n+++ b/pkg/new.py\r\n@@ -0,0 +1 @@\r\n+x\r\n",
    "plain diff, a backslash in a name": "--- /dev/null\n+++ b/pkg/back\\slash.py\n" + NEW,
    "git diff, rename": "diff --git a/pkg/x.py b/pkg/y.py\nsimilarity index 100%\nrename from pkg/x.py\n"
                        "rename to pkg/y.py\n",
    "git diff, deletion": "diff --git a/pkg/x.py b/pkg/x.py\ndeleted file mode 100644\nindex 2e65efe..0000000\n"
                          "--- a/pkg/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
}


@pytest.mark.parametrize("form", sorted(BENIGN))
def test_a_diff_inside_the_tree_is_read_and_its_paths_are_the_ones_git_reads(tmp_path, form):
    """Not a refusal list that refuses everything: each form loads, and the path each file section writes
    is the one git reads (`git apply --numstat` names a rename by its new path)."""
    text = BENIGN[form]
    load_patch_set(make_set(tmp_path, [text]), "hostile")
    (tmp_path / "p.patch").write_bytes(text.encode())
    out = subprocess.run(["git", "apply", "--numstat", "-z", str(tmp_path / "p.patch")], cwd=tmp_path,
                         capture_output=True, check=True).stdout.decode()
    assert {f.new for f in diff_files(text)} == numstat_paths(out)


@pytest.mark.parametrize("form", sorted(HOSTILE))
def test_the_agents_check_refuses_the_same_names_at_the_same_lines(form):
    """One parser for both halves: the host's check (before git reads a patch) says what the controller says."""
    text, line, path = HOSTILE[form]
    assert [(r.line, r.path) for r in name_refusals("0001.patch", text)][:1] == [(line, path)]


def test_a_context_diff_git_does_not_apply_is_no_diff(tmp_path):
    text = "*** /dev/null\n--- /tmp/harness-48\n***************\n*** 0 ****\n--- 1 ----\n+ x\n"
    with pytest.raises(ConfigError, match="not a diff git can apply"):
        load_patch_set(make_set(tmp_path, [text]), "hostile")
