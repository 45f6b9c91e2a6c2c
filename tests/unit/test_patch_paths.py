"""The path rule for patch sets, checked when a set is read (before any host is contacted): every path
it writes is inside the work tree and outside .git/ — names read as `git apply` reads them, git's quoted
form included — and nothing is written through a symbolic link the set itself creates, nor may such a
link point outside the tree or into .git/. (The agent checks the same on the real tree: test_agent_tree.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
