"""Patch sets with variants for other SGLang releases (`patches/<set>/sglang-<version>/`, the same layout as
the set's top level): every variant applies to its release's real source (the PyPI wheel laid out as a
checkout), compiles, and the sglang imports it adds resolve there -- checked with
`scripts/check_patch_variants.py`, the way an engineer checks them by hand. Copies of shared files (the
Triton kernel, the gather module) stay byte-identical across variants.

Needs PyPI the first time for each release (cached in ~/.cache/harness-tests/); HARNESS_SKIP_UPSTREAM=1
skips them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import PATCHES, PROJECT
from tests.upstream.sglang_source import SKIP_ENV, FetchError, fetch_wheel, lay_out

pytestmark = pytest.mark.integration

if os.environ.get(SKIP_ENV) == "1":
    pytest.skip(f"{SKIP_ENV}=1", allow_module_level=True)

VARIANT = re.compile(r"^sglang-(\d[\w.+-]*)$")
KERNEL = PROJECT / "kernels" / "fp8_mla_decode.py"
ATTN = Path("files/python/sglang/srt/layers/attention")


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_patch_variants", PROJECT / "scripts" / "check_patch_variants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


checker = _load_checker()


def variant_dirs(patches: Path = PATCHES) -> list[Path]:
    return sorted(d for s in patches.iterdir() if s.is_dir() for d in s.iterdir() if d.is_dir() and VARIANT.match(d.name))


def releases(patches: Path = PATCHES) -> list[str]:
    """Every SGLang release some SGLang patch set is made for (top level or variant)."""
    found = {VARIANT.match(d.name).group(1) for d in variant_dirs(patches)}
    for name in checker.sglang_sets(patches):
        top = checker.applies_to(patches / name) or ""
        if top.startswith("sglang=="):
            found.add(top.split("==", 1)[1])
    return sorted(found)


def test_variants_are_found_and_named_for_their_release():
    dirs = variant_dirs()
    assert {d.parent.name for d in dirs} >= {"flashinfer_mla_gather_cast", "custom_fp8_mla", "flashinfer_mla_fp8"}
    for d in dirs:
        assert sorted(d.glob("*.patch")) or (d / "files").is_dir(), f"{d}: no *.patch files and no files/"
        meta = d / "patchset.yaml"
        if meta.is_file():
            doc = yaml.safe_load(meta.read_text(encoding="utf-8"))
            assert set(doc) <= {"description", "applies_to", "order"}, doc
            assert doc.get("applies_to") == f"sglang=={VARIANT.match(d.name).group(1)}", meta


def test_shared_files_stay_identical_across_variants():
    for folder in [PATCHES / "custom_fp8_mla", *sorted((PATCHES / "custom_fp8_mla").glob("sglang-*"))]:
        copy = folder / ATTN / "custom_fp8_mla_decode.py"
        assert copy.read_bytes() == KERNEL.read_bytes(), f"{copy} differs from {KERNEL}: copy the kernel over"
    top = PATCHES / "flashinfer_mla_gather_cast" / ATTN / "mla_gather_cast.py"
    for folder in sorted((PATCHES / "flashinfer_mla_gather_cast").glob("sglang-*")):
        assert (folder / ATTN / "mla_gather_cast.py").read_bytes() == top.read_bytes(), folder


@pytest.fixture(scope="module", params=releases())
def release_checkout(request, tmp_path_factory):
    version = request.param
    try:
        wheel = fetch_wheel(version)
    except FetchError as exc:  # CI reaches PyPI: failing says why instead of hiding the check
        pytest.fail(str(exc), pytrace=False)
    repo = lay_out(wheel, tmp_path_factory.mktemp(f"sglang-{version}") / "sglang", version)
    yield version, repo
    shutil.rmtree(repo, ignore_errors=True)


def test_every_sglang_patch_set_has_a_variant_that_applies(release_checkout):
    version, repo = release_checkout
    results, found = checker.check_checkout(repo, PATCHES, None)
    assert found == version
    assert results, "no SGLang patch sets found"
    failures = {r.set_name: r.problems for r in results if r.problems}
    assert not failures, failures
