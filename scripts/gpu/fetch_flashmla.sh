#!/usr/bin/env bash
# FlashMLA's FP8 decode for the side-by-side benchmarks on a GPU machine without network, 15 MB instead of the
# 383 MB sglang-kernel wheel: only sgl_kernel/flash_mla.py and flashmla_ops.abi3.so of sglang-kernel 0.4.5 (the
# version the real-target kit pins: built for torch 2.11 and CUDA 13, the GPU image's), with a small __init__.py
# in place of the package's (which loads every sgl_kernel op). Run it where pip reaches PyPI (a developer's
# machine, not the GPU one):
#
#   scripts/gpu/fetch_flashmla.sh            # -> .flashmla/sgl_kernel/ (ignored by git)
#
# then carry it with the GPU call (run(..., carry=[".flashmla"])); scripts/gpu/kernel_small_batch.sh puts it on
# PYTHONPATH when it is there. benchmarks/fp8_mla_decode.py's flashmla-fp8 rows work the same way.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=${SGLANG_KERNEL_VERSION:-0.4.5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$tmp" "sglang-kernel==$VERSION"
rm -rf .flashmla
mkdir -p .flashmla/sgl_kernel
python3 - "$VERSION" "$tmp"/sglang_kernel-*.whl <<'PY'
import sys
import zipfile
from pathlib import Path

version, wheel = sys.argv[1], sys.argv[2]
dst = Path(".flashmla/sgl_kernel")
with zipfile.ZipFile(wheel) as zf:
    for name in ("sgl_kernel/flash_mla.py", "sgl_kernel/flashmla_ops.abi3.so"):
        (dst / Path(name).name).write_bytes(zf.read(name))
(dst / "__init__.py").write_text(f'''"""sglang-kernel {version}'s FlashMLA alone (scripts/gpu/fetch_flashmla.sh): flash_mla.py and its ops."""
import ctypes
import glob
import os
import sys

import torch  # noqa: F401 -- flashmla_ops links against the libraries torch has loaded

# flashmla_ops needs libcudart.so.13 and libnvrtc.so.13 by name: the CUDA 13 pip packages beside torch have them.
for _pattern in ("libcudart.so.13*", "libnvrtc.so.13*"):
    for _base in sys.path:
        _found = sorted(glob.glob(os.path.join(_base, "nvidia", "cu13", "lib", _pattern)))
        if _found:
            try:
                ctypes.CDLL(_found[0], mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue

__version__ = "{version} (FlashMLA only)"
''')
print("wrote", ", ".join(sorted(p.name for p in dst.iterdir())), "into", dst)
PY
du -sh .flashmla
