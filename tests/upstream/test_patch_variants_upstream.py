"""Patch sets with variants for other SGLang releases (`variants:` in patchset.yaml, each a subfolder with
the same layout as the set's top level): every variant applies to its release's real source (the PyPI wheel laid out as a
checkout), compiles, and the sglang imports it adds resolve there -- checked with
`scripts/check_patch_variants.py`, the way an engineer checks them by hand. Shared files are one file: the
kernel's are kernels/ itself (`files_from`), the gather module the top level's, which the variant inherits.

Needs PyPI the first time for each release (cached in ~/.cache/harness-tests/); HARNESS_SKIP_UPSTREAM=1
skips them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from harness.experiments.patchsets import load_patch_set
from tests.conftest import PATCHES, PROJECT
from tests.upstream.sglang_source import SKIP_ENV, FetchError, fetch_wheel, lay_out

pytestmark = pytest.mark.integration

if os.environ.get(SKIP_ENV) == "1":
    pytest.skip(f"{SKIP_ENV}=1", allow_module_level=True)

KERNELS = PROJECT / "kernels"
ATTN = "python/sglang/srt/layers/attention"


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, PROJECT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


checker = _load_script("check_patch_variants")


def releases(patches: Path = PATCHES) -> list[str]:
    """Every SGLang release some SGLang patch set is made for (top level or variant)."""
    return sorted({t.split("==", 1)[1] for name in checker.sglang_sets(patches)
                   for t in load_patch_set(patches, name).applies_to if t.startswith("sglang==")})


def test_variants_are_declared_and_each_has_content():
    for name in ("flashinfer_mla_gather_cast", "custom_fp8_mla", "flashinfer_mla_fp8"):
        ps = load_patch_set(PATCHES, name)
        assert ps.applies_to == ("sglang==0.5.23", "sglang==0.5.16"), (name, ps.applies_to)
        for v in ps.variants:
            assert v.patches or v.files, f"{v.folder}: no *.patch files and no files/"


def test_shared_files_are_the_same_bytes_in_every_variant():
    for variant in load_patch_set(PATCHES, "custom_fp8_mla").variants:
        files = {f.path: f.content for f in variant.files}
        for kernel, name in (("fp8_mla_decode.py", "custom_fp8_mla_decode.py"),
                             ("fp8_mla_decode_cuda.py", "custom_fp8_mla_decode_cuda.py"),
                             ("mla_prefill_gather.py", "custom_fp8_mla_prefill_gather.py")):
            assert files[f"{ATTN}/{name}"] == (KERNELS / kernel).read_bytes(), (variant.applies_to, name)
    gather = load_patch_set(PATCHES, "flashinfer_mla_gather_cast")
    modules = {v.applies_to: {f.path: f.content for f in v.files}[f"{ATTN}/mla_gather_cast.py"] for v in gather.variants}
    assert len(modules) == 2 and len(set(modules.values())) == 1, "the 0.5.16 variant inherits the module"


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
