"""Two H200 runs of the FP8 MLA decode kernel side by side, as markdown (no GPU or torch needed).

    python benchmarks/fp8_mla_compare.py REFERENCE.json NEW.json [QUICK.json ...]

REFERENCE is a run of ``fp8_mla_decode.py`` with every implementation (FlashMLA FP8 among them), NEW a
later run of ``--impls ours`` on another lease of the same machine type. Across leases the card and
host differ a little (the copy rate, in each run's _meta.json, says by how much), so the FlashMLA
ratios of NEW are estimates; the QUICK files (``fp8_mla_cuda_quick.py --baseline``) time the old and
the new kernel in one process, which is the controlled comparison of the change.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def rows_by_shape(path: Path, impl: str) -> dict[tuple[int, int, int], float]:
    return {(r["heads"], r["batch"], r["context"]): r["time_us"] for r in json.loads(path.read_text())
            if r["impl"] == impl}


def quick_pairs(paths: list[Path]) -> dict[tuple[int, int, int], list[tuple[float, float]]]:
    """(old, new) us per shape from each quick run that timed both."""
    pairs: dict[tuple[int, int, int], list[tuple[float, float]]] = {}
    for path in paths:
        for r in json.loads(path.read_text())["timing"]:
            if "cuda-old" in r and "cuda-2:64:2" in r:
                pairs.setdefault((r["heads"], r["batch"], r["context"]), []).append((r["cuda-old"], r["cuda-2:64:2"]))
    return pairs


def main(argv: list[str]) -> None:
    ref, new, quick = Path(argv[0]), Path(argv[1]), [Path(p) for p in argv[2:]]
    flashmla, ours_ref, ours_new = rows_by_shape(ref, "flashmla-fp8"), rows_by_shape(ref, "ours"), rows_by_shape(new, "ours")
    pairs = quick_pairs(quick)
    print("| heads | batch | context | FlashMLA FP8 us (ref) | ours us (ref) | **ours us (new)** | new / ref | "
          "FlashMLA / new | same process: old -> new us |")
    print("|---|---|---|---|---|---|---|---|---|")
    faster = {False: 0, True: 0}
    for shape in sorted(ours_new):
        f, o, n = flashmla.get(shape), ours_ref.get(shape), ours_new[shape]
        same = "; ".join(f"{a:.1f} -> {b:.1f}" for a, b in pairs.get(shape, []))
        ratio = f / n if f else None
        if ratio is not None and shape[1] >= 8:
            faster[ratio > 1.0] += 1
        print(f"| {shape[0]} | {shape[1]} | {shape[2]} | {f or '-'} | {o or '-'} | **{n:.1f}** | "
              f"{n / o:.2f} | {f'{ratio:.2f}x' if ratio else '-'} | {same or '-'} |")
    print()
    print(f"batch >= 8: faster than FlashMLA (ref) on {faster[True]} of {faster[True] + faster[False]} shapes")
    if pairs:
        gains = [a / b for v in pairs.values() for a, b in v]
        print(f"same process, old / new: median {statistics.median(gains):.3f}, range {min(gains):.3f}-{max(gains):.3f}"
              f" over {len(gains)} timings of {len(pairs)} shapes")


if __name__ == "__main__":
    main(sys.argv[1:])
