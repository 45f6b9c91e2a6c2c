"""Per-version variants of a patch set: read on the controller, all sent, one kept by the agent.

The agent alone knows the host's SGLang version (read from its source at preflight), so the controller
sends every variant and the agent keeps the one made for that version; a host whose version has no
variant is refused before anything changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.agent.target import choose_variants, fit_problems, version_tuple
from harness.common.protocol import FileEntry, PatchEntry, PreflightFacts, Requirements
from harness.errors import ConfigError
from harness.experiments.config import HostConfig
from harness.experiments.patchsets import load_patch_set
from harness.experiments.resolve import resolve_file
from harness.experiments.spec import build_spec


def diff(path: str, old: str, new: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


@pytest.fixture
def patches(tmp_path) -> Path:
    root = tmp_path / "patches"
    s = root / "gc"
    (s / "files" / "pkg").mkdir(parents=True)
    (s / "0001-x.patch").write_text(diff("x.py", "a", "new"))
    (s / "files" / "pkg" / "helper.py").write_text("NEW = 1\n")
    (s / "old-sglang" / "files" / "pkg").mkdir(parents=True)
    (s / "old-sglang" / "0001-x.patch").write_text(diff("x.py", "a", "old"))  # overrides the top level's
    (s / "old-sglang" / "files" / "pkg" / "helper.py").write_text("OLD = 1\n")
    (s / "patchset.yaml").write_text("description: d\napplies_to: sglang==0.5.23\n"
                                     "variants: {sglang==0.5.16: old-sglang}\n")
    plain = root / "plain"
    plain.mkdir()
    (plain / "0001-p.patch").write_text(diff("y.py", "a", "b"))
    return root


def test_a_set_reads_each_variant_from_its_own_folder(patches):
    ps = load_patch_set(patches, "gc")
    assert ps.has_variants and ps.applies_to == ("sglang==0.5.23", "sglang==0.5.16")
    new, old = ps.variant_for("sglang==0.5.23"), ps.variant_for("sglang==0.5.16")
    assert [p.text for p in new.patches] == [diff("x.py", "a", "new")] and new.files[0].content == b"NEW = 1\n"
    assert [p.text for p in old.patches] == [diff("x.py", "a", "old")] and old.files[0].content == b"OLD = 1\n"
    assert ps.variant_for("sglang==0.5.20") is None


def test_a_variant_sets_hash_names_each_variants_targets_then_its_content(patches):
    """The hash is what a sweep's resume key holds: its format is pinned, so a change to it is deliberate."""
    import hashlib
    (patches / "gc" / "patchset.yaml").write_text("applies_to: [sglang==0.5.23, sglang==0.5.24]\n"
                                                  "variants: {sglang==0.5.16: old-sglang}\n")
    h = hashlib.sha256()
    for target, patch, old_new, helper in (("sglang==0.5.23,sglang==0.5.24", "0001-x.patch", "new", b"NEW = 1\n"),
                                            ("sglang==0.5.16", "0001-x.patch", "old", b"OLD = 1\n")):
        h.update(b"variant\0" + target.encode() + b"\0")
        h.update(b"patch\0" + patch.encode() + b"\0" + diff("x.py", "a", old_new).encode() + b"\0")
        h.update(b"file\0pkg/helper.py\0" + oct(0o644).encode() + b"\0" + helper + b"\0")
    assert load_patch_set(patches, "gc").sha256 == h.hexdigest()


def test_the_hash_covers_every_variant_and_a_plain_set_hashes_as_before(patches):
    before = load_patch_set(patches, "gc").sha256
    (patches / "gc" / "old-sglang" / "files" / "pkg" / "helper.py").write_text("OLD = 2\n")
    assert load_patch_set(patches, "gc").sha256 != before  # a result made with the old variant is not reused
    plain = load_patch_set(patches, "plain")
    assert not plain.has_variants and plain.variant_for("sglang==9") is plain.variants[0]
    import hashlib
    text = diff("y.py", "a", "b")
    expected = hashlib.sha256(b"patch\0" + b"0001-p.patch\0" + text.encode() + b"\0").hexdigest()
    assert plain.sha256 == expected  # resume keys of results made before variants existed still match


@pytest.mark.parametrize("yaml_text, message", [
    ("variants: {sglang==0.5.16: missing}\n", "folder"),
    ("variants: {sglang==0.5.16: ../elsewhere}\n", "plain subfolder"),
    ("variants: {'0.5.16': old-sglang}\n", "not a target"),
    ("applies_to: [sglang==0.5.16]\nvariants: {sglang==0.5.16: old-sglang}\n", "also in applies_to"),
])
def test_bad_variant_declarations_are_refused_naming_the_file(patches, yaml_text, message):
    meta = patches / "gc" / "patchset.yaml"
    meta.write_text(yaml_text)
    err = pytest.raises(ConfigError, load_patch_set, patches, "gc").value
    assert message in str(err) and "patchset.yaml" in str(err)


def test_the_spec_carries_every_variant_tagged_and_plain_sets_untagged(patches, tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text("name: e\nmodel: {path: /m}\npatches: [gc, plain]\n")
    spec = build_spec(resolve_file(f, patches), HostConfig(address="local", repo="/r", python="py"),
                      run_id="r", attempt_id="a")
    assert [(p.set, p.name, p.applies_to) for p in spec.patches] == [
        ("gc", "0001-x.patch", ["sglang==0.5.23"]), ("gc", "0001-x.patch", ["sglang==0.5.16"]),
        ("plain", "0001-p.patch", None)]
    assert [(x.path, x.applies_to) for x in spec.files] == [("pkg/helper.py", ["sglang==0.5.23"]),
                                                             ("pkg/helper.py", ["sglang==0.5.16"])]


def entries() -> tuple[list[PatchEntry], list[FileEntry]]:
    return ([PatchEntry("gc", "new", "N", ["sglang==0.5.23"]), PatchEntry("gc", "old", "O", ["sglang==0.5.16"]),
             PatchEntry("plain", "p", "P")],
            [FileEntry("gc", "h.py", 0o644, "TkVX", ["sglang==0.5.23"]),
             FileEntry("gc", "h.py", 0o644, "T0xE", ["sglang==0.5.16"])])


def test_the_agent_keeps_the_variant_for_the_hosts_version():
    patches, files, chosen, problems = choose_variants(*entries(), "sglang==0.5.16")
    assert [p.name for p in patches] == ["old", "p"] and [f.content_b64 for f in files] == ["T0xE"]
    assert chosen == {"gc": "sglang==0.5.16"} and problems == []


@pytest.mark.parametrize("version", ["sglang==0.5.20", "harness-sim", None])
def test_a_host_version_without_a_variant_is_a_problem_naming_both(version):
    _, _, chosen, problems = choose_variants(*entries(), version)
    assert chosen == {} and len(problems) == 1
    assert "gc" in problems[0] and "sglang==0.5.16, sglang==0.5.23" in problems[0]
    assert (version or "unknown version") in problems[0]


def test_sets_without_variants_travel_whole_whatever_the_version():
    only_plain = [PatchEntry("plain", "p", "P")]
    assert choose_variants(only_plain, [], None) == (only_plain, [], {}, [])


@pytest.mark.parametrize("text, expected", [
    ("0.6.14", (0, 6, 14)), ("0.7.2rc1", (0, 7, 2)), ("0.6.14+cu130", (0, 6, 14)), ("1.0", (1, 0))])
def test_version_tuple_reads_the_leading_numbers(text, expected):
    assert version_tuple(text) == expected


@pytest.mark.parametrize("arch, flashinfer, refused", [
    ("sm90", "0.6.13", True), ("sm90", "0.6.14", False), ("sm100", "0.6.14", True), ("sm100", "0.6.18", False),
    ("sm90", None, False)])
def test_flashinfer_floor_per_arch(tmp_path, arch, flashinfer, refused):
    req = Requirements(backend="flashinfer-mla-fp8", attention_backend=None, arch=arch,
                       flashinfer_min={"sm90": "0.6.14", "*": "0.6.18"})
    problems = fit_problems(req, str(tmp_path), None, "0.5.16", [], PreflightFacts(flashinfer_version=flashinfer))
    assert bool(problems) is refused
    if refused:
        assert f"needs FlashInfer >= {'0.6.14' if arch == 'sm90' else '0.6.18'} on {arch}" in problems[0]
        assert flashinfer in problems[0]
