"""Comparison of results (pure): one row per experiment (and GPU), medians over repeats with their
spread, ratios to a baseline with a significance test on the per-repeat samples (significance.py), noise and
comparability called out. Rendering to table / markdown / csv / json lives here too; printing does not."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..common.protocol import Status
from ..render.keyline import short_key_line as short_key_line  # the table's notes; views and the page call it here
from ..results.metrics import KEY_METRICS
from ..results.schemas import Record
from ..triage.profile import kernel_label
from . import outliers
from .significance import mann_whitney_p, ratio_interval
from .stack import Fingerprint, differences, fingerprint, mixed, stack_id
from .units import lower_is_better, metric_unit, number

ALPHA = 0.05
NOISY_CV = 0.05
# Fewer repeats than this on a side: "?" (too few). With 3 against 3 the two-sided Mann-Whitney test cannot
# reach p < 0.05 at all (at best 2 / C(6, 3) = 0.1), so "not significant" would tell nothing; 4 against 4
# can (2 / C(8, 4) = 0.029).
MIN_SAMPLES = 4
MARKERS = {"better": "▲", "worse": "▼", "same": "≈", "few": "?", "drift": "⚠", "n/a": ""}
# What the marks mean, in the words of every legend (the terminal's, the markdown's, the page's, the docs'):
# one wording, so no two places can disagree on which side of α "≈" is.
SIGNIFICANT = f"two-sided Mann-Whitney test on the repeats, p < {ALPHA}"
NOT_SIGNIFICANT = f"p ≥ {ALPHA}"
INTERVAL_LEGEND = f"[low–high] the ratio's {100 - ALPHA * 100:.0f} % interval (Hodges–Lehmann)"
DRIFT_LEGEND = "⚠ a repeat drifted from the others (the notes say which and why): not judged"
SIGNIFICANCE_LEGEND = (f"▲ better, ▼ worse ({SIGNIFICANT}), ≈ not significant ({NOT_SIGNIFICANT}), ? too few samples, "
                       f"{DRIFT_LEGEND}; " + INTERVAL_LEGEND)


@dataclass
class Cell:
    median: float | None
    cv: float | None
    n: int
    samples: list[float]
    ratio: float | None = None
    p_value: float | None = None
    verdict: str = "n/a"  # better | worse | same | few | drift | n/a
    drift: bool = False  # a repeat drifted from the others (outliers.drifted): the median mixes two things
    low: float | None = None  # the ratio's 95 % interval (significance.ratio_interval), where the test is made
    high: float | None = None

    @property
    def marker(self) -> str:
        return MARKERS[self.verdict]


@dataclass
class Row:
    label: str
    experiment: str
    run_id: str
    backend: str | None
    gpu: str | None
    status: Status
    attempts: int
    ok: int
    category: str | None = None
    key_line: str | None = None
    top_op: str | None = None
    provenance: dict[str, str | None] = field(default_factory=dict)
    cells: dict[str, Cell] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    is_baseline: bool = False
    expected: bool = False  # it crashed or hung, and the experiment said it would (`expect`)
    answers: str | None = None  # the answer check's cell (analysis/answers.py `attach`); None: no answers
    answer_verdict: Any = None  # answers.AnswerVerdict, when judged against a reference
    stack: Fingerprint | None = None  # the environment fingerprint's facts (stack.py); None: not recorded
    stack_id: str | None = None
    outliers: list[outliers.Outlier] = field(default_factory=list)  # named in the notes, kept in the medians


def gpu_of(rec: Record) -> str | None:
    gpus = rec.provenance.gpu or []
    if gpus:
        return f"{gpus[0].get('name')} x{len(gpus)}"
    return None


def group_records(records: list[Record]) -> dict[tuple[str, str, str | None], list[Record]]:
    """(run, experiment, GPU) → records. Mixed GPUs are never pooled: the same backend on an H200 and
    on a B200 are two rows."""
    groups: dict[tuple[str, str, str | None], list[Record]] = {}
    for rec in records:
        groups.setdefault((rec.run_id, rec.experiment, gpu_of(rec)), []).append(rec)
    return groups


def build_rows(records: list[Record], *, metric: str, baseline: str | None = None,
               cases: list[str] | None = None) -> list[Row]:
    groups = group_records(records)
    multi_run = len({k[0] for k in groups}) > 1
    multi_gpu = {exp for (run, exp, gpu) in groups if sum(1 for k in groups if k[1] == exp and k[0] == run) > 1}
    all_cases = cases or sorted({c for r in records for c in r.metrics})
    rows = []
    for (run_id, exp, gpu), recs in groups.items():
        label = exp + (f" @ {gpu}" if exp in multi_gpu and gpu else "")
        if multi_run:
            label = f"{run_id}:{label}"
        rows.append(_row(label, run_id, exp, gpu, recs, metric, all_cases))
    rows.sort(key=lambda r: (r.run_id, r.experiment, r.gpu or ""))
    _apply_baseline(rows, baseline, metric)
    return rows


def _row(label: str, run_id: str, exp: str, gpu: str | None, recs: list[Record], metric: str,
         cases: list[str]) -> Row:
    ok = [r for r in recs if r.status == Status.OK]
    latest = recs[-1]
    if ok:
        status = Status.OK
    else:
        status = Counter(r.status for r in recs).most_common(1)[0][0]
    row = Row(label=label, experiment=exp, run_id=run_id, backend=latest.backend, gpu=gpu, status=status,
              attempts=len(recs), ok=len(ok), provenance=_provenance(ok[-1] if ok else latest))
    row.stack = fingerprint(ok[-1] if ok else latest)
    row.stack_id = stack_id(row.stack)
    pooled = mixed(ok)  # samples from unlike hosts in one row
    if pooled:
        row.notes.append(f"attempts ran on {len(pooled)} stacks ({', '.join(pooled)})")
    failing = [r for r in recs if r.status == status] if status != Status.OK else []
    if failing:
        f = failing[-1]
        row.expected = bool(f.expectation_met) and f.expect in ("crash", "hang")
        row.category = f.verdict.category if f.verdict else None
        if f.verdict and f.verdict.category == "hung":
            row.key_line = f"no progress in {f.verdict.phase}" if f.verdict.phase else "no progress"
        elif f.verdict and f.verdict.key_line:
            row.key_line = f.verdict.key_line
        elif f.error:
            row.key_line = f.error.strip().splitlines()[0]
    if ok and len(ok) < len(recs):
        row.notes.append(f"{len(recs) - len(ok)} of {len(recs)} attempts not ok")
    if ok and ok[-1].expect in ("crash", "hang"):
        row.notes.append(f"expected {ok[-1].expect}, ran ok")
    tops = [r.profile.top for r in ok if r.profile is not None and r.profile.top]
    if tops:
        first = tops[-1][0]
        row.top_op = f"{kernel_label(first.name)} {first.share * 100:.0f}%"
    for case in cases:
        per_rec = [(r, r.metrics[case].samples.get(metric) or [] if case in r.metrics else []) for r in ok]
        kept = [(float(v), outliers.Origin(r.run_id, r.experiment, r.attempt, r.round, i, len(vs)))
                for r, vs in per_rec for i, v in enumerate(vs, 1) if v is not None and is_number(v)]
        samples = [v for v, _ in kept]
        row.cells[case] = cell = cell_of(samples)
        shares = {(r.attempt, i): p.hit_share for r in ok if r.bench_cases and case in r.bench_cases
                  for p in r.bench_cases[case].prefill or [] for i in [p.repeat + 1]}
        found = outliers.find(case, samples, [o for _, o in kept], [shares.get((o.attempt, o.repeat)) for _, o in kept])
        cell.drift = any(o.drift for o in found)
        row.outliers += found
        row.notes += [o.note() for o in row.outliers if o.case == case]
        if cell.n and cell.cv is not None and cell.cv > NOISY_CV:
            row.notes.append(f"{case}: noisy (CV {cell.cv * 100:.1f}%)")
        if 0 < cell.n < MIN_SAMPLES:
            row.notes.append(f"{case}: few samples (n={cell.n})")
    return row


def _provenance(rec: Record) -> dict[str, str | None]:
    p = rec.provenance
    return {"gpu": gpu_of(rec), "server_version": p.server_version, "base_commit": p.base_commit, "host": rec.host,
            "stack": stack_id(fingerprint(rec))}  # a baseline on the same stack is preferred


def is_number(v: Any) -> bool:
    """A repeat's value counts when it is a number: SGLang writes NaN (a case whose requests all failed) and
    null, which would poison the median and the spread."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def cell_of(samples: list[float]) -> Cell:
    if not samples:
        return Cell(None, None, 0, [])
    med = statistics.median(samples)
    cv = statistics.pstdev(samples) / statistics.mean(samples) if len(samples) > 1 and statistics.mean(samples) else 0.0
    return Cell(med, cv, len(samples), samples)


def _apply_baseline(rows: list[Row], baseline: str | None, metric: str) -> None:
    if not rows:
        return
    if baseline:
        candidates = [r for r in rows if baseline in (r.label, r.experiment)]
    else:  # the first row that measured the metric: a crashed one would leave nothing to compare with
        candidates = [next((r for r in rows if measured(r)), rows[0])]
    if any(r.status == Status.OK for r in candidates):  # a baseline that never ran measures nothing
        candidates = [r for r in candidates if r.status == Status.OK]
    if not candidates:
        for r in rows:
            r.notes.append(f"baseline {baseline!r} not found")
        return
    for b in candidates:
        b.is_baseline = True
    for row in rows:
        # The baseline measured under the same conditions, when there is one.
        base = next((b for b in candidates if b.provenance == row.provenance or
                     (b.gpu == row.gpu and b.run_id == row.run_id)), candidates[0])
        diffs = [f"{k} {_short(row.provenance.get(k))} vs {_short(base.provenance.get(k))}"
                 for k in ("gpu", "server_version", "base_commit") if base.provenance.get(k) != row.provenance.get(k)]
        stack_diffs, stack_notes = differences(row.stack, base.stack)
        diffs += stack_diffs
        if diffs and row is not base and row.status == Status.OK:
            row.notes.append(f"not comparable to the baseline: {', '.join(diffs)}")
        if stack_notes and row is not base and row.status == Status.OK:
            row.notes.append(f"stack differs from the baseline's beyond what matters: {', '.join(stack_notes)}")
        if row is base:
            continue
        for case, cell in row.cells.items():
            bcell = base.cells.get(case)
            if bcell is not None:
                row.cells[case] = judge(bcell, cell, metric, comparable=not diffs)


def judge(base: Cell, cell: Cell, metric: str, comparable: bool = True) -> Cell:
    """`cell` against `base`: the one rule of every comparison — a row against its baseline (the table), night B
    against night A (nights.py, the page), a bisect step against an end (bisection.py). A copy of `cell` with
    the ratio of the medians (none when either has no median or the base's is 0) and, when `comparable` (same
    GPU, same stack), a verdict: "drift" when a repeat on either side drifted (outliers.py: the median mixes two
    things), "few" under MIN_SAMPLES a side, else the two-sided Mann-Whitney test with the ratio's interval:
    "same" at p >= ALPHA or equal medians (the spread differs, the typical run does not), else better or worse
    by the metric's direction. Not comparable: a ratio, no verdict ("n/a")."""
    out = Cell(cell.median, cell.cv, cell.n, cell.samples, drift=cell.drift)
    if cell.median is None or not base.median:
        return out
    out.ratio = cell.median / base.median
    if not comparable:
        return out
    if base.drift or cell.drift:  # a repeat measured something else: its median is no one setup's value
        out.verdict = "drift"
        return out
    if min(base.n, cell.n) < MIN_SAMPLES:
        out.verdict = "few"
        return out
    out.p_value = mann_whitney_p(cell.samples, base.samples)
    out.low, out.high = ratio_interval(base.samples, cell.samples, ALPHA) or (None, None)
    if out.p_value >= ALPHA or out.ratio == 1:
        out.verdict = "same"
    else:
        better = out.ratio < 1 if lower_is_better(metric) else out.ratio > 1
        out.verdict = "better" if better else "worse"
    return out


def measured(row: Row) -> bool:
    """The row ran and has samples of the metric in some case."""
    return row.status == Status.OK and any(c.n for c in row.cells.values())


def metric_names(records: list[Record]) -> list[str]:
    """The metrics `compare` can show for these records: those measured, and every one a record keeps."""
    seen = {m for r in records for case in r.metrics.values() for m in case.samples}
    return sorted(seen | set(KEY_METRICS))


def baseline_names(rows: list[Row]) -> list[str]:
    """What `--baseline` accepts: an experiment, or a row's label (run:experiment, experiment @ GPU)."""
    return sorted({r.experiment for r in rows} | {r.label for r in rows})


def _short(v: object) -> str:
    s = str(v)
    return s[:12] if len(s) == 40 else s


# ============================================================================ rendering


def cell_text(cell: Cell) -> str:
    if not cell.n:
        return "-"
    spread = f" ±{cell.cv * 100:.1f}%" if cell.cv is not None and cell.n > 1 else ""
    return f"{number(cell.median)}{spread} (n={cell.n}){' ' + MARKERS['drift'] if cell.drift else ''}"


def ratio_text(cell: Cell, is_baseline: bool, interval: bool = True) -> str:
    """'1.48x ▲ [1.31–1.66]': the ratio, its marker and (with `interval`) its 95 % interval."""
    if is_baseline:
        return "baseline"
    if cell.ratio is None:
        return "-"
    text = f"{cell.ratio:.2f}x"
    # ▲/▼ next to "1.00x" would claim a change the reader cannot see (under 0.5 %: it rounds away)
    marker = "" if text == "1.00x" and cell.verdict in ("better", "worse") else cell.marker
    return " ".join(x for x in (text, marker, interval_text(cell) if interval else "") if x)


def interval_text(cell: Cell) -> str:
    """'[1.31–1.66]': the ratio's 95 % interval; '' where there is none (too few samples, not comparable)."""
    return "" if cell.low is None or cell.high is None else f"[{cell.low:.2f}–{cell.high:.2f}]"


def status_text(row: Row) -> str:
    if row.status == Status.OK:
        return Status.OK.value if row.ok == row.attempts else f"{Status.OK.value} ({row.ok}/{row.attempts})"
    s = row.status.value
    if row.category and row.category != row.status.value:
        s += f": {row.category}"
    return f"as expected ({s})" if row.expected else s


def mixed_gpus(rows: list[Row]) -> bool:
    return len({r.gpu for r in rows if r.gpu}) > 1


def mixed_stacks(rows: list[Row]) -> bool:
    """Rows that ran on different stacks: the table shows each row's stack id."""
    return len({r.stack_id for r in rows if r.stack_id}) > 1


def value_header(case: str, metric: str) -> str:
    unit = metric_unit(metric)
    return f"{case} median ± CV" + (f", {unit}" if unit else "")


def columns(rows: list[Row], metric: str = "") -> list[str]:
    cases = sorted({c for r in rows for c in r.cells})
    cols = ["experiment", "backend"] + (["GPU"] if mixed_gpus(rows) else []) + ["status"]
    for c in cases:
        cols += [value_header(c, metric), f"{c} vs base"]
    if any(r.answers for r in rows):
        cols.append("answers")
    if any(r.top_op for r in rows):
        cols.append("top op")
    return cols + (["stack"] if mixed_stacks(rows) else []) + ["notes"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    cases = sorted({c for r in rows for c in r.cells})
    out = []
    for r in rows:
        notes = list(r.notes)
        if r.key_line:
            notes.insert(0, short_key_line(r.key_line))
        line = [r.label, r.backend or "-"] + ([r.gpu or "-"] if mixed_gpus(rows) else []) + [status_text(r)]
        for c in cases:
            cell = r.cells.get(c) or Cell(None, None, 0, [])
            line += [cell_text(cell), ratio_text(cell, r.is_baseline)]
        if any(x.answers for x in rows):
            line.append(r.answers or "")
        if any(x.top_op for x in rows):
            line.append(r.top_op or "-")
        if mixed_stacks(rows):
            line.append(r.stack_id or "-")
        line.append("; ".join(notes))
        out.append(line)
    return out
