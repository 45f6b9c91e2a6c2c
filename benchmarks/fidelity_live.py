"""What every repeat of a case measured, from the records (issue 43): per run, experiment and bench case, the
case's `prefix_cache` mode, each repeat's value and the share of its prompt tokens the server found cached
(the `Prefill batch` lines while it ran), the CV, and the drift rule's verdict (harness/analysis/outliers.py).

    python3 benchmarks/fidelity_live.py RESULTS_DIR RUN_ID [RUN_ID...] [--out FILE.md]

TTFT cases (output_len 1) show median TTFT (ms); the others output tok/s and median ITL (ms).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.analysis import outliers  # noqa: E402
from harness.common.protocol import Status  # noqa: E402
from harness.results.schemas import Record  # noqa: E402
from harness.results.store import ResultsStore  # noqa: E402

METRICS = {"ttft": ("median_ttft_ms",), "other": ("output_throughput", "median_itl_ms")}


def rows(rec: Record) -> list[str]:
    out = []
    for case, m in rec.metrics.items():
        facts = (rec.bench_cases or {}).get(case)
        shares = {p.repeat: p.hit_share for p in (facts.prefill or [])} if facts else {}
        warm = shares.get(-1)
        kind = "ttft" if case.startswith("ttft") else "other"
        for metric in METRICS[kind]:
            vals = m.values(metric)
            if not vals:
                continue
            cv = statistics.pstdev(vals) / statistics.mean(vals) if len(vals) > 1 and statistics.mean(vals) else 0.0
            drift = outliers.drifted(vals) or outliers.flagged(vals)
            repeats = ", ".join(f"{v:.1f}" for v in vals)
            cached = ", ".join("-" if shares.get(i) is None else f"{shares[i] * 100:.0f}%" for i in range(len(vals)))
            out.append(f"| {rec.experiment} | {case} | {facts.prefix_cache if facts else '-'} | {metric} | {repeats} | "
                       f"{cv * 100:.1f} % | {cached} | {'-' if warm is None else f'{warm * 100:.0f}%'} | "
                       f"{'repeat ' + ', '.join(str(i + 1) for i in drift) if drift else 'none'} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    store = ResultsStore(args.results)
    lines = ["| experiment | case | prefix_cache | metric | repeats | CV | cached per repeat | warm-up cached | "
             "drift |", "|---|---|---|---|---|---|---|---|---|"]
    for run in args.runs:
        for rec in store.final_records(run):
            if rec.status == Status.OK:
                lines += rows(rec)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
