"""A bisect run as a table (pure): each commit tried, in history order — what it was tried as (an end, step k),
its verdict, its samples' median and spread, its ratio to each end with the interval — and the answer in a
line: the first bad commit with its subject. The terminal's and the pipe's table (cli/bisect.py) and the page's
section (templates/bisect.html.j2) are made from these rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..analysis import bisection as b
from ..analysis.compare import Cell, cell_of, interval_text
from ..analysis.units import metric_title
from ..results.schemas import BisectInfo, Record

HEADERS = ("#", "commit", "tried as", "verdict", "n", "median ± CV", "vs good", "vs bad", "subject")


@dataclass(frozen=True)
class Row:
    index: int  # in the history: 0 the good end
    sha: str
    subject: str
    tried: str  # "good end", "bad end", "step 3"
    verdict: str  # good | bad | skip | undecided, "first bad", or "?" (an attempt the run has not finished)
    attempts: int
    cell: Cell  # the samples: median, CV, n
    vs_good: Cell | None  # a step's ratio to each end (interval, p); None for the ends themselves
    vs_bad: Cell | None
    note: str  # why it was skipped


@dataclass(frozen=True)
class Table:
    rows: list[Row]
    decision: b.Decision
    steps: int  # commits tried between the ends
    attempts: int


def build(info: BisectInfo, records: Iterable[Record]) -> Table:
    shas = [c.sha for c in info.commits]
    n = len(shas)
    obs = b.observations(records, shas, info.case, info.metric)
    trials = b.trials_of(obs)
    decision = b.decide(trials, n, info.metric, info.max_attempts)
    order = b.replay(obs, n, info.metric, info.max_attempts)
    step_of: dict[int, int] = {}
    for i in order:
        if 0 < i < n - 1 and i not in step_of:
            step_of[i] = len(step_of) + 1
    good, bad = trials.get(0, b.Trial()), trials.get(n - 1, b.Trial())
    rows = []
    for i in sorted(trials):
        t = trials[i]
        tried = "good end" if i == 0 else "bad end" if i == n - 1 else f"step {step_of.get(i, '?')}"
        judged = b.judge_step(good, bad, t, info.metric) if 0 < i < n - 1 else None
        verdict = str(judged.verdict if judged else b.Verdict.GOOD if i == 0 else b.Verdict.BAD)
        if isinstance(decision, b.Found) and i == decision.first_bad:
            verdict = "first bad" if len(decision.candidates) == 1 else "bad (first?)"
        elif isinstance(decision, b.Measure) and i == decision.index and verdict == str(b.Verdict.UNDECIDED):
            verdict = "?"  # measured again next
        rows.append(Row(index=i, sha=shas[i], subject=info.commits[i].subject, tried=tried, verdict=verdict,
                        attempts=t.attempts, cell=cell_of(list(t.samples)),
                        vs_good=judged.vs_good if judged else None, vs_bad=judged.vs_bad if judged else None,
                        note=t.skip or ""))
    return Table(rows, decision, len(step_of), len(order))


def heading(info: BisectInfo) -> str:
    """'decode-bs1:median_itl_ms (ms), lower is better': what the bisect judges."""
    return f"{info.case}:{metric_title(info.metric, better=True)}"


def value_text(cell: Cell) -> str:
    if cell.median is None:
        return "-"
    return f"{cell.median:,.2f} ± {(cell.cv or 0) * 100:.1f}%"


def ratio_text(cell: Cell | None) -> str:
    """'1.15x ▼ [1.12–1.18]': the step against an end, marked as the comparison table marks it."""
    if cell is None or cell.ratio is None:
        return "-"
    return " ".join(x for x in (f"{cell.ratio:.2f}x", cell.marker, interval_text(cell)) if x)


def cells(row: Row) -> list[str]:
    """A row's cells, in HEADERS' order."""
    return [str(row.index), row.sha[:10], row.tried, row.verdict, str(row.cell.n), value_text(row.cell),
            ratio_text(row.vs_good), ratio_text(row.vs_bad), row.subject]


def answer_line(info: BisectInfo, table: Table) -> str:
    """The bisect's answer in one line (or what it is still doing)."""
    d, last = table.decision, len(info.commits) - 1
    if isinstance(d, b.Found):
        c = info.commits[d.first_bad]
        if len(d.candidates) == 1:
            return (f"first bad commit: {c.sha} {c.subject} (commit {d.first_bad} of {last}; {table.steps} steps, "
                    f"{table.attempts} attempts)")
        some = ", ".join(f"{info.commits[i].sha[:10]} ({d.verdicts.get(i, '?')})" for i in d.candidates[:-1])
        return (f"the first bad commit is one of {len(d.candidates)}: {some}, or {c.sha[:10]} {c.subject} — skipped "
                f"or undecided commits stand before it ({table.steps} steps)")
    if isinstance(d, b.Stuck):
        return f"no first bad commit: {d.reason}"
    c = info.commits[d.index]
    return f"not finished: {c.sha[:10]} ({c.subject}) is next; resume the run"


def notes(table: Table) -> list[str]:
    return [f"{r.sha[:10]} skipped: {r.note}" for r in table.rows if r.note]


LEGEND = ("median ± CV of the commit's samples (n); vs good, vs bad: its median over that end's, ▼ worse ▲ better "
          "≈ not significant (Mann-Whitney, p < 0.05), [low–high] its 95 % interval")


def page_context(info: BisectInfo, records: Iterable[Record]) -> dict[str, Any]:
    """The page's bisect section (templates/bisect.html.j2)."""
    table = build(info, records)
    found = table.decision.first_bad if isinstance(table.decision, b.Found) else None
    return {"title": heading(info), "headers": list(HEADERS), "answer": answer_line(info, table),
            "found": found is not None,
            "rows": [{"cells": cells(r), "first": r.index == found, "skip": bool(r.note)} for r in table.rows],
            "notes": notes(table), "legend": LEGEND, "good": info.good_ref, "bad": info.bad_ref, "host": info.host}
