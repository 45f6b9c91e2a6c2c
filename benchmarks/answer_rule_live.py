"""The answer check's rule on the recorded live answers (issue 44): each shape's rows against its stock reference,
by the fixed bars (the rule before) and by the spread rule (harness/analysis/answers.py), with the numbers behind it.

    python3 benchmarks/answer_rule_live.py

The answers are the live records' own (benchmarks/results/live-2026-12-03/, kept as answers.json.gz beside each
record.json: one H200, SGLang 0.5.16, dummy_weights_scaled, 16 prompts x 32 greedy tokens, top 20 logprobs, sent
twice: cold, then as a prefix-cache hit). LIVE names the attempt each row is; that folder's README says how the
runs were made. tests/unit/test_answer_rule_live.py holds the rule to them.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.analysis.answers import AnswerSet, compare_answers, parse_answers, verdict_text  # noqa: E402

CORRECT = ("flashinfer-mla-gather-cast", "flashinfer-mla-fp8", "custom-fp8-mla", "flashmla", "triton")
CONTROLS = ("control-5pct", "control-1pct")
LIVE = ROOT / "benchmarks" / "results" / "live-2026-12-03"
V2, V3, V3_FIRST = "20261203-080043-44f8", "20261203-081152-76b1", "20261203-075102-4194"
SHAPES: dict[str, dict[str, str]] = {  # shape → row → its attempt (run/experiment), "stock" the reference
    "v2lite": {"stock": f"{V2}/v2lite-flashinfer-mla-0.8", "triton": f"{V2}/fidv2-triton",
               "flashmla": f"{V2}/v2lite-0.8-flashmla", "custom-fp8-mla": f"{V2}/v2lite-0.8-custom-fp8-mla",
               "flashinfer-mla-fp8": f"{V2}/v2lite-0.8-flashinfer-mla-fp8",
               "flashinfer-mla-gather-cast": f"{V2}/v2lite-0.8-flashinfer-mla-gather-cast",
               "control-5pct": f"{V2}/v2lite-control-5pct-answers",
               "control-1pct": f"{V2}/v2lite-control-wrong-kv-scale-1pct"},
    "v3h128": {"stock": f"{V3}/fid128-flashinfer-mla", "triton": f"{V3}/ans128-triton",
               "flashmla": f"{V3_FIRST}/fid128-flashmla", "control-5pct": f"{V3}/fid128-control-5pct",
               "control-1pct": f"{V3}/fid128-control-1pct"},
}


def load(attempt: str) -> AnswerSet:
    return parse_answers(json.loads(gzip.decompress((LIVE / attempt / "01" / "answers.json.gz").read_bytes())))


def shape_sets(shape: str) -> tuple[AnswerSet, dict[str, AnswerSet]]:
    """(the stock reference, the other rows by name) of one shape."""
    rows = {name: load(attempt) for name, attempt in SHAPES[shape].items()}
    return rows.pop("stock"), rows


def fixed_bars(row: AnswerSet) -> AnswerSet:
    """The same answers judged as before the spread rule: no prefix-hit pass to take a yardstick from."""
    return dataclasses.replace(row, settings={**row.settings, "prefix_hit": None})


def main() -> None:
    print("| shape | row | kind | before (fixed bars) | now (spread rule) | spread | yardstick | ratio |")
    print("|---|---|---|---|---|---:|---:|---:|")
    for shape in SHAPES:
        ref, rows = shape_sets(shape)
        for name in [n for n in CORRECT + CONTROLS if n in rows]:
            row = rows[name]
            old = compare_answers(fixed_bars(row), fixed_bars(ref))
            new = compare_answers(row, ref)
            kind = "control" if name in CONTROLS else "correct"
            print(f"| {shape} | {name} | {kind} | {verdict_text(old)} | {verdict_text(new)} | "
                  f"{new.spread:.4f} | {new.yardstick:.4f} | {new.ratio:.2f} |")


if __name__ == "__main__":
    main()
