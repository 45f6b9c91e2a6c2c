"""A variant holds only what differs and inherits the rest from its patch set's top level; whole files can be
named from the project (`files_from`) instead of copied. What the loader gives is what the agent applies: the
variant's content as a whole, hashed as a whole (docs/patch-sets.md, "Variants" and "Files from the project")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.experiments.patchsets import load_patch_set
from harness.experiments.spec import patch_entries
from harness.patchtools.check import dry_check
from tests.conftest import PATCHES, PROJECT

ATTN = "python/sglang/srt/layers/attention"


def diff(path: str, new: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+{new}\n"


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project: kernels/k.py, and patches/s whose 0.5.16 variant overrides one patch and one file."""
    write(tmp_path, {
        "kernels/k.py": "KERNEL = 1\n",
        "patches/s/patchset.yaml": "applies_to: sglang==0.5.23\nvariants: {sglang==0.5.16: old}\n",
        "patches/s/0001-a.patch": diff("x.py", "top-a"),
        "patches/s/0003-c.patch": diff("z.py", "top-c"),
        "patches/s/files/pkg/shared.py": "SHARED = 1\n",
        "patches/s/files/pkg/differs.py": "TOP = 1\n",
        "patches/s/old/0001-a.patch": diff("x.py", "old-a"),
        "patches/s/old/0002-b.patch": diff("y.py", "old-b"),
        "patches/s/old/files/pkg/differs.py": "OLD = 1\n",
    })
    return tmp_path


def content(project: Path, target: str, name: str = "s") -> tuple[list[tuple[str, str]], dict[str, bytes]]:
    v = load_patch_set(project / "patches", name).variant_for(target)
    assert v is not None
    return [(p.name, p.text) for p in v.patches], {f.path: f.content for f in v.files}


def test_a_variant_inherits_what_its_folder_lacks_and_its_own_files_override_by_name(project):
    patches, files = content(project, "sglang==0.5.16")
    assert patches == [("0001-a.patch", diff("x.py", "old-a")), ("0002-b.patch", diff("y.py", "old-b")),
                       ("0003-c.patch", diff("z.py", "top-c"))]  # by name across both folders
    assert files == {"pkg/differs.py": b"OLD = 1\n", "pkg/shared.py": b"SHARED = 1\n"}
    assert content(project, "sglang==0.5.23") == (
        [("0001-a.patch", diff("x.py", "top-a")), ("0003-c.patch", diff("z.py", "top-c"))],
        {"pkg/differs.py": b"TOP = 1\n", "pkg/shared.py": b"SHARED = 1\n"})


def test_the_spec_carries_each_variants_whole_content_so_the_agent_needs_nothing_new(project):
    patches, files = patch_entries((load_patch_set(project / "patches", "s"),))
    assert [(p["name"], p["applies_to"]) for p in patches] == [
        ("0001-a.patch", ["sglang==0.5.23"]), ("0003-c.patch", ["sglang==0.5.23"]),
        ("0001-a.patch", ["sglang==0.5.16"]), ("0002-b.patch", ["sglang==0.5.16"]), ("0003-c.patch", ["sglang==0.5.16"])]
    assert [(f["path"], f["applies_to"]) for f in files] == [
        ("pkg/differs.py", ["sglang==0.5.23"]), ("pkg/shared.py", ["sglang==0.5.23"]),
        ("pkg/differs.py", ["sglang==0.5.16"]), ("pkg/shared.py", ["sglang==0.5.16"])]


def test_patch_check_checks_a_variant_with_what_it_inherits(project, tmp_path):
    checkout = tmp_path / "sglang"
    write(checkout, {"python/sglang/version.py": '__version__ = "0.5.16"\n', "x.py": "a\n", "y.py": "a\n",
                     "z.py": "a\n"})
    assert dry_check(load_patch_set(project / "patches", "s"), checkout) == []
    (project / "patches/s/files/pkg/shared.py").write_text("def broken(:\n")  # the top level's, inherited
    (problem,) = dry_check(load_patch_set(project / "patches", "s"), checkout)
    assert "files/pkg/shared.py does not compile" in problem
    (project / "patches/s/0003-c.patch").write_text(diff("z.py", "top-c").replace("-a", "-not-there"))
    (problem,) = dry_check(load_patch_set(project / "patches", "s"), checkout)
    assert "0003-c.patch does not apply" in problem


def test_an_inherited_file_that_changes_changes_the_hash_and_the_variants_content(project):
    before = load_patch_set(project / "patches", "s").sha256
    (project / "patches/s/files/pkg/shared.py").write_text("SHARED = 2\n")
    assert load_patch_set(project / "patches", "s").sha256 != before
    assert content(project, "sglang==0.5.16")[1]["pkg/shared.py"] == b"SHARED = 2\n"


def test_a_variant_whose_content_is_the_top_levels_hashes_as_that_content_whatever_the_folders_hold(project):
    """The key is of what is applied: moving a file between the folders without changing it keeps it."""
    before = load_patch_set(project / "patches", "s").sha256
    (project / "patches/s/old/files/pkg/shared.py").write_text("SHARED = 1\n")  # an override with the same bytes
    assert load_patch_set(project / "patches", "s").sha256 == before


def test_drop_leaves_an_inherited_patch_or_file_out(project):
    (project / "patches/s/patchset.yaml").write_text(
        "applies_to: sglang==0.5.23\nvariants:\n  sglang==0.5.16:\n    folder: old\n"
        "    drop: [0003-c.patch, files/pkg/shared.py]\n")
    patches, files = content(project, "sglang==0.5.16")
    assert [n for n, _ in patches] == ["0001-a.patch", "0002-b.patch"] and list(files) == ["pkg/differs.py"]
    assert [n for n, _ in content(project, "sglang==0.5.23")[0]] == ["0001-a.patch", "0003-c.patch"]


@pytest.mark.parametrize("entry, line, message", [
    ("0009-none.patch", 5, "names nothing the top level has"),
    ("files/pkg/differs.py", 5, "also in the variant's own folder"),
    ("0001-a.patch", 5, "also in the variant's own folder"),
    ("notes.md", 5, "top-level patch file's name or files/<path>"),
])
def test_a_drop_that_cannot_be_meant_is_refused_at_its_line(project, entry, line, message):
    (project / "patches/s/patchset.yaml").write_text(
        f"applies_to: sglang==0.5.23\nvariants:\n  sglang==0.5.16:\n    folder: old\n    drop: [{entry}]\n")
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "s").value
    assert message in str(err) and err.file is not None and err.file.name == "patchset.yaml", str(err)
    assert err.line == line


def test_a_variant_folder_with_nothing_of_its_own_is_refused_naming_its_line(project):
    (project / "patches/s/same").mkdir()
    (project / "patches/s/same/README.md").write_text("nothing differs\n")
    (project / "patches/s/patchset.yaml").write_text(
        "applies_to: sglang==0.5.23\nvariants:\n  sglang==0.5.16: old\n  sglang==0.5.20: same\n")
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "s").value
    assert "would be the top level itself" in str(err) and "applies_to" in (err.hint or "") and err.line == 4


def test_order_orders_every_variant_and_may_name_a_patch_only_a_variant_has(project):
    meta = project / "patches/s/patchset.yaml"
    meta.write_text(meta.read_text() + "order: [0003-c.patch, 0002-b.patch, 0001-a.patch]\n")
    assert [n for n, _ in content(project, "sglang==0.5.16")[0]] == ["0003-c.patch", "0002-b.patch", "0001-a.patch"]
    assert [n for n, _ in content(project, "sglang==0.5.23")[0]] == ["0003-c.patch", "0001-a.patch"]
    meta.write_text(meta.read_text().replace("0002-b", "0004-d"))
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "s").value
    assert "order lists missing patch file(s): 0004-d.patch" in str(err)


# ----------------------------------------------------------------------------- files_from


def with_files_from(project: Path, entries: str) -> Path:
    meta = project / "patches/s/patchset.yaml"
    meta.write_text(meta.read_text() + "files_from:\n" + entries)
    return meta


def test_files_from_gives_every_variant_the_projects_file_byte_for_byte_with_its_mode(project):
    (project / "kernels/run.sh").write_text("#!/bin/sh\n")
    (project / "kernels/run.sh").chmod(0o755)
    with_files_from(project, "  pkg/kernel.py: kernels/k.py\n  bin/run.sh: kernels/run.sh\n")
    for v in load_patch_set(project / "patches", "s").variants:
        files = {f.path: (f.content, f.mode) for f in v.files}
        assert files["pkg/kernel.py"] == (b"KERNEL = 1\n", 0o644) and files["bin/run.sh"] == (b"#!/bin/sh\n", 0o755)
        assert [f.path for f in v.files] == ["bin/run.sh", "pkg/differs.py", "pkg/kernel.py", "pkg/shared.py"]


def test_a_variants_own_file_overrides_a_files_from_entry_and_the_kernels_change_changes_the_hash(project):
    with_files_from(project, "  pkg/kernel.py: kernels/k.py\n")
    (project / "patches/s/old/files/pkg/kernel.py").write_text("OLD_KERNEL = 1\n")
    assert content(project, "sglang==0.5.16")[1]["pkg/kernel.py"] == b"OLD_KERNEL = 1\n"
    before = load_patch_set(project / "patches", "s").sha256
    (project / "kernels/k.py").write_text("KERNEL = 2\n")
    assert load_patch_set(project / "patches", "s").sha256 != before


@pytest.mark.parametrize("source, reason", [
    ("../outside.py", "leaves the project"),
    ("/etc/passwd", "is an absolute path"),
    ("kernels/missing.py", "is not there"),
    ("kernels", "is not a regular file"),
    ("kernels/link.py", "is a symbolic link"),
    ("up/outside.py", "outside the project"),
    (".git/config", "inside .git/"),
])
def test_a_files_from_source_outside_the_project_or_not_a_regular_file_is_refused_at_its_line(
        project, tmp_path_factory, source, reason):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "outside.py").write_text("SECRET = 1\n")
    (project / "outside.py").write_text("X = 1\n")
    os.symlink(project / "kernels/k.py", project / "kernels/link.py")
    os.symlink(elsewhere, project / "up")  # a folder link inside the project that leads out of it
    (project / ".git").mkdir()
    (project / ".git/config").write_text("[core]\n")
    meta = with_files_from(project, f"  pkg/ok.py: kernels/k.py\n  pkg/new.py: {source}\n")
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "s").value
    assert err.file == meta and err.line == 5, str(err)
    assert reason in str(err) and "pkg/new.py" in str(err) and source in str(err)


@pytest.mark.parametrize("dest, reason", [(".git/hooks/post-checkout", "inside .git/"),
                                          ("../escape.py", "leaves the work tree"), ("/abs.py", "absolute")])
def test_a_files_from_path_in_the_target_repo_follows_the_rule_of_files_entries(project, dest, reason):
    meta = with_files_from(project, f"  '{dest}': kernels/k.py\n")
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "s").value
    assert err.file == meta and err.line == 4 and f"files_from: {dest}" in str(err) and reason in str(err)


def test_a_path_given_by_both_files_and_files_from_is_refused(project):
    meta = with_files_from(project, "  pkg/shared.py: kernels/k.py\n")
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "s").value
    assert err.file == meta and err.line == 4 and "pkg/shared.py is both a files/ entry and under files_from" in str(err)


# ----------------------------------------------------------------------------- the project's own sets


@pytest.mark.parametrize("set_name, names", [
    ("custom_fp8_mla", {"custom_fp8_mla_decode.py": "fp8_mla_decode.py",
                        "custom_fp8_mla_decode_cuda.py": "fp8_mla_decode_cuda.py",
                        "custom_fp8_mla_prefill_gather.py": "mla_prefill_gather.py"}),
    ("flashmla_gather_prefill", {"flashmla_prefill_gather.py": "mla_prefill_gather.py"}),
])
def test_the_kernel_patch_sets_apply_kernels_itself_in_every_variant(set_name, names):
    ps = load_patch_set(PATCHES, set_name)
    assert ps.applies_to == ("sglang==0.5.23", "sglang==0.5.16")
    for v in ps.variants:
        files = {f.path: f.content for f in v.files}
        for name, kernel in names.items():
            assert files[f"{ATTN}/{name}"] == (PROJECT / "kernels" / kernel).read_bytes(), (v.applies_to, name)


def test_the_dispatch_finds_its_cuda_sibling_by_its_own_name():
    # Why the kernel needs no rewriting under SGLang's name: the Triton module loads `<its own name>_cuda`.
    text = (PROJECT / "kernels" / "fp8_mla_decode.py").read_text()
    assert 'importlib.import_module(__name__ + "_cuda")' in text
