"""Every H200 attention backend on the real-size MLA models: the table, made from the records.

    python benchmarks/real_size.py RESULTS_DIR [--out benchmarks/results/real-size]

Reads every run of the sweeps in experiments/real-h200/real-size/ (sweep-v2-lite.yaml, sweep-v3-16h.yaml,
sweep-v3-128h.yaml and the first-look sweeps) under RESULTS_DIR; per model shape, backend and KV pool size,
each column from the newest attempt that measured it (an attempt its budget stopped keeps the cases it
finished; the JSON names each cell's attempt, the status column lists theirs). Each cell is the median over the
case's repeats of each repeat's median (ITL, TTFT) or its output tok/s, with the repeats' range and n. The answers column judges the row's answers.json against
the shape's stock FlashInfer MLA at the large pool (harness/analysis/answers.py, the rule `harness compare`
uses). Then the issue's targets for custom-fp8-mla, each with the numbers it was judged on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.real_h200 import pool_of  # noqa: E402  (the pool size a record's server was started with)
from harness.analysis.answers import AnswerSet, compare_answers, parse_answers, verdict_text  # noqa: E402
from harness.results.schemas import Record  # noqa: E402
from harness.results.store import ResultsStore, load_record  # noqa: E402

SHAPES = {"v2lite": "DeepSeek-V2-Lite (27 layers, 16 heads, MoE)",
          "v3h16": "DeepSeek-V3 attention, 16 heads (one GPU of TP 8), 61 layers",
          "v3h128": "DeepSeek-V3 attention, 128 heads (DP attention), 61 layers"}
BACKENDS = ("flashinfer-mla", "flashinfer-mla-gather-cast", "custom-fp8-mla", "flashinfer-mla-fp8", "flashmla",
            "flashmla-gather-prefill", "triton")
LARGE, SMALL = 0.8, 0.4
COLUMNS = (("ITL bs1 ms", "itl-bs1", "median_itl_ms"), ("ITL bs8 ms", "itl-bs8", "median_itl_ms"),
           ("ITL bs32 ms", "itl-bs32", "median_itl_ms"), ("ITL bs64 ms", "itl-bs64", "median_itl_ms"),
           ("TTFT 1K cold ms", "ttft-1k-cold", "median_ttft_ms"), ("TTFT 1K hit ms", "ttft-1k-hit", "median_ttft_ms"),
           ("TTFT 8K cold ms", "ttft-8k-cold", "median_ttft_ms"), ("TTFT 8K hit ms", "ttft-8k-hit", "median_ttft_ms"),
           ("tok/s c8", "itl-bs8", "output_throughput"), ("tok/s c32", "itl-bs32", "output_throughput"))
ITL_VS_FLASHMLA, TTFT_POOL_BAR = 1.10, 1.15


@dataclass
class Cell:
    values: list[float]

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def text(self) -> str:
        if not self.values:
            return "—"
        m = self.median
        digits = 0 if m is not None and m >= 100 else 2
        if len(self.values) == 1:
            return f"{m:.{digits}f} (n=1)"
        return f"{m:.{digits}f} [{min(self.values):.{digits}f}–{max(self.values):.{digits}f}] n={len(self.values)}"


@dataclass
class Row:
    shape: str
    backend: str
    pool: float | None
    control: bool
    record: Record  # the newest attempt
    folder: Path  # where the answers came from (the newest attempt that has them)
    cells: dict[str, Cell] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # column → "run/experiment/attempt" it was read from
    answers: str = ""

    @property
    def label(self) -> str:
        return "control: wrong KV scale (stock + 5 %)" if self.control else self.backend


def shape_of(experiment: str) -> str | None:
    return next((s for s in SHAPES if experiment.startswith(s + "-")), None)


Key = tuple[str, str, "float | None", bool]  # shape, backend, pool, control


def final_attempts(store: ResultsStore) -> dict[Key, list[tuple[Record, Path]]]:
    """Per (shape, backend, pool, control): its final attempts over every run in the store, oldest first."""
    found: dict[Key, list[tuple[Record, Path]]] = {}
    for run_id in sorted(store.run_ids()):
        for path in sorted(store.record_paths(run_id)):
            rec = load_record(path)
            shape = shape_of(rec.experiment)
            if shape is None or not rec.is_final() or rec.backend is None:
                continue
            found.setdefault((shape, rec.backend, pool_of(rec), "control" in rec.experiment), []).append(
                (rec, path.parent))
    return found


def read_answers(folder: Path) -> AnswerSet | None:
    f = folder / "answers.json"
    return parse_answers(json.loads(f.read_text())) if f.is_file() else None


def build_rows(store: ResultsStore) -> list[Row]:
    rows = []
    for (shape, backend, pool, control), found in final_attempts(store).items():
        # Each column from the newest attempt that measured it (an attempt stopped by its budget keeps the
        # cases it finished); the answers from the newest that has them.
        with_answers = [f for r, f in found if (f / "answers.json").is_file()]
        newest, newest_folder = found[-1]
        row = Row(shape, backend, pool, control, newest, with_answers[-1] if with_answers else newest_folder)
        for title, case, key in COLUMNS:
            row.cells[title] = Cell([])
            for rec, _ in reversed(found):
                summary = rec.metrics.get(case)
                values = summary.values(key) if summary is not None else []
                if values:
                    row.cells[title] = Cell(values)
                    row.sources[title] = f"{rec.run_id}/{rec.experiment}/{rec.attempt} ({rec.status.value})"
                    break
        rows.append(row)
    order = {b: i for i, b in enumerate(BACKENDS)}
    rows.sort(key=lambda r: (list(SHAPES).index(r.shape), r.control, order.get(r.backend, 99), -(r.pool or 0)))
    for shape in SHAPES:
        judge_answers([r for r in rows if r.shape == shape])
    return rows


def judge_answers(rows: list[Row]) -> None:
    ref_row = next((r for r in rows if r.backend == "flashinfer-mla" and r.pool == LARGE and not r.control), None)
    ref = read_answers(ref_row.folder) if ref_row else None
    for row in rows:
        mine = read_answers(row.folder)
        if mine is None:
            row.answers = "—"
        elif row is ref_row:
            row.answers = "ref"
        elif ref is None:
            row.answers = "no ref"
        elif ref_row is not None and weights_of(row.folder) != weights_of(ref_row.folder):
            row.answers = "other weights"  # the dummy weights changed between the two: not the same question
        else:
            row.answers = verdict_text(compare_answers(mine, ref))


def weights_of(folder: Path) -> str | None:
    """The content hash of the dummy-weights patch set an attempt ran with (answers compare on equal weights)."""
    return load_record(folder / "record.json").provenance.patch_sets.get("dummy_weights_scaled")


def median_of(rows: list[Row], backend: str, pool: float, title: str) -> float | None:
    row = next((r for r in rows if r.backend == backend and r.pool == pool and not r.control), None)
    return row.cells[title].median if row else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def targets(rows: list[Row]) -> list[str]:
    """The issue's bars for custom-fp8-mla on one shape, each with its numbers."""
    out = []
    for title in ("ITL bs8 ms", "ITL bs32 ms", "ITL bs64 ms"):
        r = ratio(median_of(rows, "custom-fp8-mla", LARGE, title), median_of(rows, "flashmla", LARGE, title))
        out.append(f"{title} custom / flashmla = {fmt(r)} (bar ≤ {ITL_VS_FLASHMLA}): {verdict(r, ITL_VS_FLASHMLA)}")
    for title in ("TTFT 1K hit ms", "TTFT 8K hit ms"):
        r = ratio(median_of(rows, "custom-fp8-mla", LARGE, title), median_of(rows, "custom-fp8-mla", SMALL, title))
        out.append(f"{title} custom pool {LARGE} / {SMALL} = {fmt(r)} (bar ≤ {TTFT_POOL_BAR}): "
                   f"{verdict(r, TTFT_POOL_BAR)}")
    for title in ("tok/s c8", "tok/s c32"):
        r = ratio(median_of(rows, "custom-fp8-mla", LARGE, title),
                  median_of(rows, "flashinfer-mla-gather-cast", LARGE, title))
        out.append(f"{title} custom / gather-cast = {fmt(r)} (bar ≥ 1.00): "
                   f"{'—' if r is None else ('met' if r >= 1.0 else 'missed')}")
    return out


def fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def verdict(r: float | None, bar: float) -> str:
    return "—" if r is None else ("met" if r <= bar else "missed")


def render(rows: list[Row]) -> str:
    first = rows[0].record.provenance if rows else None
    lines = ["# Every H200 attention backend on real-size MLA models", "",
             f"SGLang {first.server_version if first else '?'}, FlashInfer {first.flashinfer_version if first else '?'}, "
             "one H200, FP8 e4m3 KV cache, dummy weights at a trained model's scale (patch set dummy_weights_scaled), "
             "CUDA graphs to batch 64. Made by `python benchmarks/real_size.py RESULTS_DIR` from the records in "
             "`real-size-runs/`. A cell: median over repeats [range] n. `hit` = a prefix-cache hit (paged prefill of "
             "the last token over the cached prompt); `cold` = the cache flushed first. Answers: greedy tokens and "
             "logprobs against the shape's stock FlashInfer MLA at the large pool (`ref`): ✓/✗, top-1 agreement, "
             "largest |Δ logprob| before any divergence (docs/reading-the-table.md).", ""]
    for shape, title in SHAPES.items():
        mine = [r for r in rows if r.shape == shape]
        if not mine:
            continue
        lines += [f"## {title}", "", "| backend | pool | status | " + " | ".join(c[0] for c in COLUMNS)
                  + " | answers |", "| --- | ---: | --- | " + " | ".join("---:" for _ in COLUMNS) + " | --- |"]
        for r in mine:
            statuses = sorted({src.rsplit("(", 1)[1].rstrip(")") for src in r.sources.values()}
                              | {r.record.status.value})
            lines.append(f"| {r.label} | {r.pool} | {', '.join(statuses)} | "
                         + " | ".join(r.cells[c[0]].text() for c in COLUMNS) + f" | {r.answers} |")
        lines += ["", "Targets (custom-fp8-mla):", ""] + [f"- {t}" for t in targets(mine)] + [""]
    return "\n".join(lines) + "\n"


def as_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [{"shape": r.shape, "backend": r.backend, "pool": r.pool, "control": r.control,
             "experiment": r.record.experiment, "run_id": r.record.run_id, "attempt": r.record.attempt,
             "status": r.record.status.value, "answers": r.answers, "sources": r.sources,
             "answers_from": str(r.folder.relative_to(r.folder.parents[2])),
             "ready_s": r.record.timings.get("ready_s"),
             "cells": {t: c.values for t, c in r.cells.items()}} for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "real-size")
    args = ap.parse_args()
    rows = build_rows(ResultsStore(args.results))
    if not rows:
        sys.exit(f"no record of a real-size experiment under {args.results}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(render(rows))
    args.out.with_suffix(".json").write_text(json.dumps(as_json(rows), indent=1) + "\n")
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
