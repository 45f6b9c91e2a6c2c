"""The comparison table as files: markdown, CSV and JSON (pure: rows in, text out; compare.py builds the rows)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

from ..analysis.answers import LEGEND
from ..analysis.compare import SIGNIFICANCE_LEGEND, Cell, Row, columns, table_rows
from ..analysis.units import direction, lower_is_better
from ..safetext import display_line


def to_markdown(rows: list[Row], metric: str) -> str:
    cols = columns(rows, metric)
    lines = [f"metric: `{metric}` ({direction(metric)}); "
             + SIGNIFICANCE_LEGEND
             + ("; " + LEGEND if "answers" in cols else ""),
             "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for line in table_rows(rows):
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in line) + " |")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    cases = sorted({c for r in rows for c in r.cells})
    head = ["label", "experiment", "run_id", "backend", "gpu", "status", "category", "key_line", "attempts", "ok",
            "as_expected"]
    for c in cases:
        head += [f"{c}.{k}" for k in ("median", "cv", "n", "ratio", "ratio_low", "ratio_high", "p_value", "verdict")]
    w.writerow(head + ["answers", "top_op", "stack", "notes"])
    for r in rows:
        line: list[object] = [r.label, r.experiment, r.run_id, r.backend, r.gpu, r.status.value, r.category,
                              r.key_line, r.attempts, r.ok, r.expected]
        for c in cases:
            cell = r.cells.get(c) or Cell(None, None, 0, [])
            line += [cell.median, cell.cv, cell.n, cell.ratio, cell.low, cell.high, cell.p_value, cell.verdict]
        # A spreadsheet or a terminal shows these: a host's words (GPU, op names) with their controls escaped.
        w.writerow([display_line(x) if isinstance(x, str) else x
                    for x in line + [r.answers, r.top_op, r.stack_id, "; ".join(r.notes)]])
    return buf.getvalue()


def to_json(rows: list[Row], metric: str) -> str:
    return json.dumps({"metric": metric, "lower_is_better": lower_is_better(metric),
                       "rows": [asdict(r) for r in rows]}, indent=1)
