"""The SGLang patch set ships copies of the kernel modules: they must stay byte-identical (no GPU needed).

``kernels/fp8_mla_decode.py`` (Triton, and the dispatch) becomes ``custom_fp8_mla_decode.py`` and
``kernels/fp8_mla_decode_cuda.py`` (the SM90 CUDA path) ``custom_fp8_mla_decode_cuda.py``: the dispatch
imports its sibling ``<own module name>_cuda``, so the pair works under either name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ATTN = Path("python/sglang/srt/layers/attention")
FOLDERS = [ROOT / "patches" / "custom_fp8_mla" / "files",
           *sorted((ROOT / "patches" / "custom_fp8_mla").glob("sglang-*/files"))]
PAIRS = [("fp8_mla_decode.py", "custom_fp8_mla_decode.py"), ("fp8_mla_decode_cuda.py", "custom_fp8_mla_decode_cuda.py")]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.parent.name)
@pytest.mark.parametrize(("kernel", "copy"), PAIRS)
def test_patch_set_kernel_copies_are_in_sync(folder, kernel, copy):
    src, dst = ROOT / "kernels" / kernel, folder / ATTN / copy
    assert dst.read_bytes() == src.read_bytes(), (
        f"{dst.relative_to(ROOT)} differs from {src.relative_to(ROOT)}: copy the kernel over")


def test_the_dispatch_finds_its_cuda_sibling_by_its_own_name():
    text = (ROOT / "kernels" / "fp8_mla_decode.py").read_text()
    assert 'importlib.import_module(__name__ + "_cuda")' in text
