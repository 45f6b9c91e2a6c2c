"""scripts/sync_kernel_copies.py: kernels/ is the one source of the FP8 MLA decode kernel; the custom_fp8_mla
patch set's copies are generated from it, and the check fails, naming the copy, when one drifts (no GPU, no
torch: the kernels are only read)."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sync_kernel_copies", PROJECT / "scripts" / "sync_kernel_copies.py")
assert _spec is not None and _spec.loader is not None
sync = importlib.util.module_from_spec(_spec)
sys.modules["sync_kernel_copies"] = sync  # dataclasses look their module up there
_spec.loader.exec_module(sync)


def test_every_copy_in_every_variant_is_made_from_kernels():
    copies = sync.kernel_copies(PROJECT)
    attention = Path("files/python/sglang/srt/layers/attention")
    assert sorted(str(c.target.relative_to(PROJECT / "patches")) for c in copies) == sorted(
        str(Path(patch_set) / variant / attention / name) for variant in (Path("."), Path("sglang-0.5.16"))
        for patch_set, name in (("custom_fp8_mla", "custom_fp8_mla_decode.py"),
                                ("custom_fp8_mla", "custom_fp8_mla_decode_cuda.py"),
                                ("custom_fp8_mla", "custom_fp8_mla_prefill_gather.py"),
                                ("flashmla_gather_prefill", "flashmla_prefill_gather.py")))
    assert sync.drifted(copies) == [], "run python3 scripts/sync_kernel_copies.py"
    assert sync.main(["--check"]) == 0


def test_a_copy_is_the_kernel_behind_a_comment_that_says_where_it_comes_from():
    for c in sync.kernel_copies(PROJECT):
        text = c.target.read_text()
        assert text.startswith(f"# Generated from kernels/{c.source.name} by scripts/sync_kernel_copies.py")
        assert text.endswith(c.source.read_text())
        # Comments only: the module's docstring and code are the kernel's.
        assert ast.get_docstring(ast.parse(text)) == ast.get_docstring(ast.parse(c.source.read_text()))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A throwaway project with the kernels and the patch set, in sync."""
    shutil.copytree(PROJECT / "kernels", tmp_path / "kernels")
    for name in sync.COPIES:
        shutil.copytree(PROJECT / "patches" / name, tmp_path / "patches" / name)
    assert sync.main(["--check", "--root", str(tmp_path)]) == 0
    return tmp_path


def test_the_check_names_a_copy_with_one_byte_changed(project: Path, capsys: pytest.CaptureFixture[str]):
    copy = sync.kernel_copies(project)[-1]
    planted = copy.target
    data = bytearray(planted.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x01
    planted.write_bytes(bytes(data))
    capsys.readouterr()
    assert sync.main(["--check", "--root", str(project)]) == 1
    said = capsys.readouterr().err.splitlines()
    assert said == [f"{planted.relative_to(project)} differs from kernels/{copy.source.name}: "
                    "run python3 scripts/sync_kernel_copies.py"]
    assert sync.main(["--root", str(project)]) == 0  # writing puts it back
    assert sync.main(["--check", "--root", str(project)]) == 0


def test_a_changed_kernel_or_a_missing_copy_is_drift_too(project: Path):
    kernel = project / "kernels" / "fp8_mla_decode.py"
    kernel.write_text(kernel.read_text() + "# one more line\n")
    copies = sync.kernel_copies(project)
    assert {c.target.name for c in sync.drifted(copies)} == {"custom_fp8_mla_decode.py"}
    sync.write(copies)
    copies[0].target.unlink()
    assert sync.drifted(copies) == [copies[0]]


def test_the_dispatch_finds_its_cuda_sibling_by_its_own_name():
    # Why the copies need no import rewriting: the Triton module loads `<its own name>_cuda`.
    text = (PROJECT / "kernels" / "fp8_mla_decode.py").read_text()
    assert 'importlib.import_module(__name__ + "_cuda")' in text
