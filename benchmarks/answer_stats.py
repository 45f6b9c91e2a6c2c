"""Per-step statistics of live answer sets against a reference, to choose the answer check's rule (issue 44).

    python3 benchmarks/answer_stats.py REF_ANSWERS.json ROW_ANSWERS.json [ROW...]   (or results folders)

For each row, over the positions where its greedy text still agrees with the reference's (per prompt and pass):
the chosen token's |Δ logprob| (median, p90, max), the per-step spread of Δ logprob over the tokens both top-K
lists hold (centred: a shift shared by every token is no disagreement), the signed mean Δ with its t value
(a wrong scale moves logprobs one way; rounding does not), and each divergence with the reference's margin
there (its own token's logprob minus the row token's). Split by pass: 1 (the prompt prefilled from nothing),
2 (the same prompts again: a prefix-cache hit, every backend's prefill then reads the FP8 cache).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.analysis.answers import AnswerSet, parse_answers  # noqa: E402


def load(path: Path) -> AnswerSet:
    if path.is_dir():
        path = next(path.rglob("answers.json"))
    return parse_answers(json.loads(path.read_text()))


def stats(row: AnswerSet, ref: AnswerSet, passes: int = 2) -> dict[str, object]:
    per = len(ref.prompts) // passes
    out: dict[str, object] = {}
    for p in range(passes):
        chosen, spread, signed, flips, agree, total = [], [], [], [], 0, 0
        for a, b in zip(row.prompts[p * per:(p + 1) * per], ref.prompts[p * per:(p + 1) * per]):
            total += len(b.output_ids)
            for k, (ta, tb) in enumerate(zip(a.output_ids, b.output_ids)):
                if ta != tb:
                    margin = b.logprobs[k] - b.top[k].get(ta, -math.inf)
                    flips.append(round(margin, 3))
                    break
                agree += 1
                chosen.append(abs(a.logprobs[k] - b.logprobs[k]))
                signed.append(a.logprobs[k] - b.logprobs[k])
                common = [t for t in b.top[k] if t in a.top[k]]
                if len(common) >= 3:
                    d = [a.top[k][t] - b.top[k][t] for t in common]
                    mu = statistics.fmean(d)
                    spread.append(math.sqrt(statistics.fmean([(x - mu) ** 2 for x in d])))
        q = sorted(chosen)
        t = (statistics.fmean(signed) / (statistics.stdev(signed) / math.sqrt(len(signed)))
             if len(signed) > 2 and statistics.stdev(signed) > 0 else 0.0)
        out[f"pass{p + 1}"] = {
            "agree": f"{agree}/{total}", "med": round(statistics.median(q), 4) if q else None,
            "p90": round(q[int(0.9 * (len(q) - 1))], 4) if q else None, "max": round(q[-1], 3) if q else None,
            "spread_med": round(statistics.median(spread), 4) if spread else None,
            "t_signed": round(t, 1), "flips": sorted(flips)}
    return out


def main() -> None:
    ref = load(Path(sys.argv[1]))
    for arg in sys.argv[2:]:
        row = load(Path(arg))
        print(Path(arg).name if Path(arg).is_dir() else arg)
        for k, v in stats(row, ref).items():
            print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
