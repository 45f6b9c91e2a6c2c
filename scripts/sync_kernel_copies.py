#!/usr/bin/env python3
"""SGLang-side code we ship in more than one patch set has one source, kernels/; the patch sets carry copies.

    python3 scripts/sync_kernel_copies.py           write every copy from kernels/
    python3 scripts/sync_kernel_copies.py --check   exit 1, naming each copy that differs or is missing

A copy is a header that says it is generated, then the source byte for byte: no import needs rewriting, as
the dispatch in fp8_mla_decode.py imports its sibling as `<own module name>_cuda`, so the pair works as
kernels.fp8_mla_decode(_cuda) and as SGLang's custom_fp8_mla_decode(_cuda). COPIES says which patch set gets
which file under which name (custom_fp8_mla: the decode kernel and the prefill gather; flashmla_gather_prefill:
the prefill gather); every variant of a patch set (its top level, sglang-0.5.16/, ... as patchset.yaml names
them) gets all of its copies. tests/tools/test_kernel_copies.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.experiments.patchsets import load_patch_set  # noqa: E402

ATTENTION = Path("files/python/sglang/srt/layers/attention")  # in each variant folder
# patch set → {kernels/<name> → the copy's name in SGLang's attention package}; the names differ per patch
# set, so two patch sets applied together never add the same file.
COPIES = {
    "custom_fp8_mla": {"fp8_mla_decode.py": "custom_fp8_mla_decode.py",
                       "fp8_mla_decode_cuda.py": "custom_fp8_mla_decode_cuda.py",
                       "mla_prefill_gather.py": "custom_fp8_mla_prefill_gather.py"},
    "flashmla_gather_prefill": {"mla_prefill_gather.py": "flashmla_prefill_gather.py"},
}
HEADER = ("# Generated from kernels/{name} by scripts/sync_kernel_copies.py: do not edit this copy.\n"
          "# Edit kernels/{name}, then run `python3 scripts/sync_kernel_copies.py`.\n")


@dataclass(frozen=True)
class KernelCopy:
    source: Path  # kernels/<name>
    target: Path  # the patch set's copy


def copy_bytes(source_name: str, kernel: bytes) -> bytes:
    """Pure: what the copy of kernels/<source_name> holds."""
    return HEADER.format(name=source_name).encode() + kernel


def kernel_copies(root: Path) -> list[KernelCopy]:
    """Every copy the patch sets carry, in each of their variants, with the source it is made from."""
    return [KernelCopy(root / "kernels" / source, variant.folder / ATTENTION / target)
            for name, names in COPIES.items() if (root / "patches" / name).is_dir()
            for variant in load_patch_set(root / "patches", name).variants for source, target in names.items()]


def drifted(copies: list[KernelCopy]) -> list[KernelCopy]:
    """The copies that are missing or differ from what their kernel makes."""
    return [c for c in copies
            if not c.target.is_file() or c.target.read_bytes() != copy_bytes(c.source.name, c.source.read_bytes())]


def write(copies: list[KernelCopy]) -> list[KernelCopy]:
    """Write the copies that drifted; the ones written."""
    changed = drifted(copies)
    for c in changed:
        c.target.parent.mkdir(parents=True, exist_ok=True)
        c.target.write_bytes(copy_bytes(c.source.name, c.source.read_bytes()))
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="Write nothing; exit 1 if a copy differs or is missing.")
    ap.add_argument("--root", type=Path, default=ROOT, help="The project folder (default: this checkout).")
    args = ap.parse_args(argv)
    root: Path = args.root.resolve()
    copies = kernel_copies(root)
    if args.check:
        bad = drifted(copies)
        for c in bad:
            print(f"{c.target.relative_to(root)} differs from {c.source.relative_to(root)}: "
                  "run python3 scripts/sync_kernel_copies.py", file=sys.stderr)
        return 1 if bad else 0
    for c in write(copies):
        print(f"wrote {c.target.relative_to(root)} from {c.source.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
