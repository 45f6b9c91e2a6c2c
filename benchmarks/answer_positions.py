"""Where the answer check's logprob differences sit, per row of the real-size table: the |Δ logprob| of the
chosen token at every position where the row's greedy text still equals the reference's (stock FlashInfer MLA
at the large pool), split into the first token (made by prefill), the first decode step, and every decode step.

Why: on a model with random weights a tiny numeric difference compounds over layers and tokens, so the table's
verdict (largest Δ, any divergence that is no near-tie) fails every backend whose arithmetic is not bitwise
stock's; the median over positions shows how far each backend's numbers sit from stock's before they compound.

    python3 benchmarks/answer_positions.py benchmarks/results/real-size-runs
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.real_size import build_rows, read_answers  # noqa: E402
from harness.analysis.answers import AnswerSet  # noqa: E402
from harness.results.store import ResultsStore  # noqa: E402


def deltas(row: AnswerSet, ref: AnswerSet) -> tuple[list[float], list[float], list[float], list[int]]:
    """(Δ at the first token, at the first decode step, at every agreeing decode step; tokens agreed per prompt)."""
    first, step1, every, agreed = [], [], [], []
    for a, b in zip(row.prompts, ref.prompts):
        n = 0
        for k, (ta, tb) in enumerate(zip(a.output_ids, b.output_ids)):
            if ta != tb:
                break
            d = abs(a.logprobs[k] - b.logprobs[k])
            (first if k == 0 else step1 if k == 1 else []).append(d)
            if k >= 1:  # decode steps only: the first token is prefill's (equal to stock's for most backends)
                every.append(d)
            n += 1
        agreed.append(n)
    return first, step1, every, agreed


def med(v: list[float]) -> str:
    return f"{statistics.median(v):.3f} (n={len(v)})" if v else "—"


def main() -> int:
    store = ResultsStore(Path(sys.argv[1]))
    rows = build_rows(store)
    print("| shape | backend | pool | median Δ first token | median Δ first decode step | median Δ every agreeing "
          "decode step | tokens agreed per prompt (median of 32) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        ref_row = next((r for r in rows if r.shape == row.shape and r.backend == "flashinfer-mla" and r.pool == 0.8
                        and not r.control), None)
        mine, ref = read_answers(row.folder), read_answers(ref_row.folder) if ref_row else None
        if mine is None or ref is None or row is ref_row:
            continue
        first, step1, every, agreed = deltas(mine, ref)
        print(f"| {row.shape} | {row.label} | {row.pool} | {med(first)} | {med(step1)} | {med(every)} | "
              f"{statistics.median(agreed):g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
