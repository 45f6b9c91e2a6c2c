"""The SGLang patch set ships a copy of the kernel module: it must stay byte-identical (no GPU needed)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "kernels" / "fp8_mla_decode.py"
PATCH_COPY = (ROOT / "patches" / "custom_fp8_mla" / "files" / "python" / "sglang" / "srt" / "layers"
              / "attention" / "custom_fp8_mla_decode.py")


def test_patch_set_kernel_copy_is_in_sync():
    assert PATCH_COPY.read_bytes() == KERNEL.read_bytes(), (
        f"{PATCH_COPY.relative_to(ROOT)} differs from {KERNEL.relative_to(ROOT)}: copy the kernel over")
