"""Every patch set made for SGLang 0.5.23 applies to the real 0.5.23 source, compiles and reverts.

The source is the release wheel from PyPI laid out as a checkout (`python/sglang/...`, see
sglang_source.py). Each patch set whose patchset.yaml says `applies_to: sglang==0.5.23` is checked the
way `harness` checks it on a GPU box: through the agent over SSH (the test sshd), which locks the repo,
applies, compiles every patched .py, reverts and verifies the tree hash. Independently of the agent,
the test hashes every file before and after. When SGLang moves on, these tests say which patch sets
need a rebase. Bad input (a patch for another version, a patch set writing outside the repo or into
.git/) must be refused with the culprit named, and change nothing.

Needs PyPI the first time (the wheel is cached in ~/.cache/harness-tests/); without it the tests fail
and say so. HARNESS_SKIP_UPSTREAM=1 skips them.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path, PurePosixPath

import pytest
import yaml

from harness.common.protocol import Final
from harness.errors import ConfigError
from harness.experiments.config import Experiment, ModelSettings, ServerSettings
from harness.experiments.patchsets import NewFile, PatchFile, PatchSet, Variant, load_patch_set
from harness.experiments.resolve import Resolved, resolve
from harness.run.runner import check_patches
from tests.conftest import PATCHES, tree_snapshot
from tests.support.sshd import free_port
from tests.upstream.sglang_source import APPLIES_TO, SKIP_ENV

pytestmark = pytest.mark.integration

if os.environ.get(SKIP_ENV) == "1":
    pytest.skip(f"{SKIP_ENV}=1", allow_module_level=True)

GATHER_CAST = "flashinfer_mla_gather_cast"
MLA_BACKEND = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
GATHER_MODULE = "python/sglang/srt/layers/attention/mla_gather_cast.py"


def upstream_patch_sets(patches: Path = PATCHES) -> list[str]:
    """Patch sets declared for this SGLang release (sim sets say `applies_to: harness-sim`). A
    patchset.yaml that cannot be read is included, so its test says why instead of it vanishing."""
    found = []
    for meta in sorted(patches.glob("*/patchset.yaml")):
        try:
            doc = yaml.safe_load(meta.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            found.append(meta.parent.name)
            continue
        if isinstance(doc, dict) and str(doc.get("applies_to", "")).strip() == APPLIES_TO:
            found.append(meta.parent.name)
    return found


UPSTREAM_SETS = upstream_patch_sets()


def check(set_name: str, host, patches: Path = PATCHES) -> Final:
    exp = Experiment(name=f"upstream-{set_name}", model=ModelSettings(path="unused"), patches=(set_name,),
                     server=ServerSettings(port=free_port()))
    resolved = resolve(exp, Path("upstream-check.yaml"), patches)  # the file need not exist
    return check_patches(resolved, "upstream-ssh", host)


def python_files_touched(set_name: str, patches: Path = PATCHES) -> set[str]:
    v = load_patch_set(patches, set_name).variant_for(APPLIES_TO)  # the variant for the release under test
    assert v is not None
    paths = {f.path for f in v.files}
    for p in v.patches:
        paths |= {m.group(1) for m in re.finditer(r"^\+\+\+ b/(\S+)", p.text, re.MULTILINE)}
    return {p for p in paths if p.endswith(".py")}


def assert_untouched(repo: Path, template) -> None:
    assert tree_snapshot(repo) == template.snapshot, "the SGLang tree changed"
    assert not (repo / ".git" / "harness" / "journal.json").exists(), "a journal was left behind"


# ----------------------------------------------------------------------------- the patch sets


def test_upstream_patch_sets_are_found():
    assert GATHER_CAST in UPSTREAM_SETS
    assert not [s for s in UPSTREAM_SETS if s.startswith("sim_")], "simulated-target sets are excluded"


@pytest.mark.parametrize("set_name", UPSTREAM_SETS)
def test_patch_set_applies_compiles_and_reverts(set_name, sglang_template, sglang_repo, upstream_host):
    meta = yaml.safe_load((PATCHES / set_name / "patchset.yaml").read_text(encoding="utf-8"))
    assert isinstance(meta, dict) and set(meta) <= {"description", "applies_to", "variants", "order", "files_from"}, meta
    expected_py = python_files_touched(set_name)
    if set_name == GATHER_CAST:
        assert expected_py == {MLA_BACKEND, GATHER_MODULE}

    final = check(set_name, upstream_host)

    assert final.status == "ok", final.error
    assert set(final.patch.compiled) == expected_py, "every patched or new .py file was compiled"
    assert final.revert.verified is True
    assert final.revert.tree_before == final.revert.tree_after
    assert_untouched(sglang_repo, sglang_template)


# ----------------------------------------------------------------------------- bad input


def _copy_set(src: str, dest_root: Path, name: str) -> Path:
    dest = dest_root / name
    shutil.copytree(PATCHES / src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_patch_for_another_version_names_file_and_hunk_and_applies_nothing(
        sglang_template, sglang_repo, upstream_host, tmp_path):
    patches = tmp_path / "patches"
    folder = _copy_set(GATHER_CAST, patches, "gather_cast_for_other_version")
    patch = sorted(folder.glob("*.patch"))[0]
    lines = patch.read_text(encoding="utf-8").split("\n")
    hunks = [i for i, line in enumerate(lines) if line.startswith("@@ ")]
    assert len(hunks) > 2
    start = hunks[1]  # alter a context line of the second hunk: the first one still matches
    at = next(i for i in range(start + 1, hunks[2]) if lines[i].startswith(" ") and lines[i].strip())
    lines[at] += "  # as in another release"
    patch.write_text("\n".join(lines), encoding="utf-8")
    old_start = re.match(r"@@ -(\d+)", lines[start]).group(1)

    final = check("gather_cast_for_other_version", upstream_host, patches)

    assert final.status == "apply-failed"
    err = final.error
    assert "gather_cast_for_other_version" in err and patch.name in err, err  # the failing patch file
    assert f"patch failed: {MLA_BACKEND}:{old_start}" in err, err  # the file and hunk (its first line)
    assert not final.patch.compiled
    assert_untouched(sglang_repo, sglang_template)


def _unchecked_patch_set(folder: Path) -> PatchSet:
    """A patch set read without the controller's checks: what a bypassed or older controller sends."""
    files_root = folder / "files"
    files = tuple(NewFile(str(PurePosixPath(*f.relative_to(files_root).parts)), f.read_bytes(), 0o644)
                  for f in sorted(files_root.rglob("*")) if f.is_file()) if files_root.is_dir() else ()
    patches = tuple(PatchFile(p.name, p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.patch")))
    return PatchSet(name=folder.name, folder=folder, description="",
                    variants=(Variant(applies_to=(), patches=patches, files=files, folder=folder),))


def _refusals(set_name: str, host, patches: Path) -> list[str]:
    """Each layer's refusal: the controller's (a ConfigError while reading the set, before any host is
    touched) or, if it lets the set through, the agent's; and always the agent's own, sent the set
    without the controller's checks."""
    messages = []
    try:
        final = check(set_name, host, patches)
    except ConfigError as exc:
        messages.append(str(exc))
    else:
        assert final.status in ("apply-failed", "preflight-failed"), final
        assert not final.patch.compiled
        messages.append(final.error)
    exp = Experiment(name=f"upstream-{set_name}", model=ModelSettings(path="unused"),
                     server=ServerSettings(port=free_port()))
    raw = Resolved(exp, Path("upstream-check.yaml"), None, (_unchecked_patch_set(patches / set_name),))
    final = check_patches(raw, "upstream-ssh", host)
    assert final.status in ("apply-failed", "preflight-failed"), final
    assert not final.patch.compiled
    messages.append(final.error)
    return messages


def test_files_under_dot_git_are_refused(sglang_template, sglang_repo, upstream_host, tmp_path):
    patches = tmp_path / "patches"
    files = patches / "writes_into_git" / "files"
    (files / ".git" / "hooks").mkdir(parents=True)
    (files / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\necho pwned\n")
    (files / "python" / "sglang").mkdir(parents=True)
    (files / "python" / "sglang" / "harmless.py").write_text("x = 1\n")

    for message in _refusals("writes_into_git", upstream_host, patches):
        assert ".git" in message, message
    assert not (sglang_repo / ".git" / "hooks" / "post-checkout").exists()
    assert not (sglang_repo / "python" / "sglang" / "harmless.py").exists()
    assert_untouched(sglang_repo, sglang_template)


@pytest.mark.parametrize("target", ["../outside.txt", ".git/hooks/pre-commit"])
def test_diff_writing_outside_the_work_tree_is_refused(target, sglang_template, sglang_repo, upstream_host,
                                                       tmp_path):
    patches = tmp_path / "patches"
    (patches / "escapes").mkdir(parents=True)
    (patches / "escapes" / "0001-escape.patch").write_text(
        f"diff --git a/{target} b/{target}\nnew file mode 100644\n--- /dev/null\n+++ b/{target}\n"
        "@@ -0,0 +1 @@\n+escaped\n")

    for message in _refusals("escapes", upstream_host, patches):
        assert target in message, message
    assert not (sglang_repo / target).exists()  # ../outside.txt would be tmp_path/outside.txt
    assert_untouched(sglang_repo, sglang_template)
