"""The answer check judged (pure): a row's answers.json against the reference's (the baseline's, same prompts).

Per prompt, positions are walked while the two greedy texts agree, collecting |Δ logprob| of the chosen token.
At the first position where the tokens differ the prompt has *diverged*. That is acceptable only as a near-tie:
the row's token is in the reference's top-K there and the reference rated its own token at most `tie_margin`
above it (bf16/fp8 reduction-order noise flips near-ties; the continuations of two different tokens are two
different texts, so nothing after a divergence is compared). Anything else is a *bad* divergence: a wrong
kernel shifts logprobs everywhere, so it flips tokens that are no tie and moves the logprobs before it.

Verdict: pass iff no bad divergence and the largest |Δ logprob| (before divergences) is at most `max_dlogprob`.
`top1` is plain positional equality over every output position (what fraction of the text is the same).
docs/reading-the-table.md ("The answers column") is the user's page of this rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..common.protocol import Status
from .compare import Row, gpu_of
from .schemas import Record

# The request settings that make two answer sets comparable (the thresholds may differ: they judge, they ask
# nothing). Defaults as the experiment YAML's (experiments/config.py AnswersSettings).
SAME_SETTINGS = ("prompts", "input_len", "output_len", "seed", "top_logprobs", "vocab", "prefix_hit")
DEFAULT_MAX_DLOGPROB = 0.25
DEFAULT_TIE_MARGIN = 0.1


class AnswersMismatch(ValueError):
    """Two answer sets that cannot be compared: other prompts or other request settings."""


class BadAnswers(ValueError):
    """An answers.json that is not what the agent writes."""


@dataclass(frozen=True)
class PromptAnswer:
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple[dict[int, float], ...]  # per position: token id → logprob, the top-K the server reported


@dataclass(frozen=True)
class AnswerSet:
    settings: dict[str, Any]
    prompts: tuple[PromptAnswer, ...]

    @property
    def max_dlogprob(self) -> float:
        return float(self.settings.get("max_dlogprob", DEFAULT_MAX_DLOGPROB))

    @property
    def tie_margin(self) -> float:
        return float(self.settings.get("tie_margin", DEFAULT_TIE_MARGIN))


@dataclass(frozen=True)
class AnswerVerdict:
    top1: float  # fraction of all output positions whose token equals the reference's
    max_dlogprob: float  # largest |Δ logprob| of the chosen token, over positions before any divergence
    diverged: int  # prompts whose greedy text left the reference's (near-ties included)
    bad: int  # of those, divergences that are no near-tie
    prompts: int
    positions: int
    passed: bool


def _ints(v: Any, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise BadAnswers(f"{where}: expected a list of token ids")
    return tuple(v)


def _floats(v: Any, where: str) -> tuple[float, ...]:
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise BadAnswers(f"{where}: expected a list of numbers")
    return tuple(float(x) for x in v)


def parse_answers(doc: Any) -> AnswerSet:
    """answers.json (harness/agent/answers.py writes it) → an AnswerSet; anything else is BadAnswers."""
    if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict) or not isinstance(doc.get("prompts"),
                                                                                                   list):
        raise BadAnswers("expected an object with `settings` and `prompts`")
    prompts = []
    for i, p in enumerate(doc["prompts"]):
        where = f"prompt {i}"
        if not isinstance(p, dict):
            raise BadAnswers(f"{where}: expected an object")
        out, lps = _ints(p.get("output_ids"), f"{where}.output_ids"), _floats(p.get("logprobs"), f"{where}.logprobs")
        tops = p.get("top")
        if not isinstance(tops, list) or not len(out) == len(lps) == len(tops):
            raise BadAnswers(f"{where}: output_ids, logprobs and top differ in length")
        top = []
        for k, pos in enumerate(tops):
            if not isinstance(pos, list) or not all(isinstance(e, list) and len(e) == 2 for e in pos):
                raise BadAnswers(f"{where}.top[{k}]: expected [[token_id, logprob], ...]")
            top.append({int(t): float(lp) for t, lp in pos})
        prompts.append(PromptAnswer(_ints(p.get("input_ids"), f"{where}.input_ids"), out, lps, tuple(top)))
    return AnswerSet(dict(doc["settings"]), tuple(prompts))


def _setting_diffs(row: AnswerSet, ref: AnswerSet) -> list[str]:
    return [f"{k} {row.settings.get(k)} vs {ref.settings.get(k)}" for k in SAME_SETTINGS
            if row.settings.get(k) != ref.settings.get(k)]


def compare_answers(row: AnswerSet, ref: AnswerSet, *, max_dlogprob: float | None = None,
                    tie_margin: float | None = None) -> AnswerVerdict:
    """`row` judged against `ref` (the thresholds: the row's own settings unless given). AnswersMismatch when
    the two asked different questions: other settings, or other prompts."""
    diffs = _setting_diffs(row, ref)
    if diffs:
        raise AnswersMismatch("asked with other settings than the reference's: " + ", ".join(diffs))
    if len(row.prompts) != len(ref.prompts):
        raise AnswersMismatch(f"{len(row.prompts)} prompts, the reference {len(ref.prompts)}")
    if any(a.input_ids != b.input_ids for a, b in zip(row.prompts, ref.prompts)):
        bad = next(i for i, (a, b) in enumerate(zip(row.prompts, ref.prompts)) if a.input_ids != b.input_ids)
        raise AnswersMismatch(f"prompt {bad} has other input ids than the reference's")
    limit = row.max_dlogprob if max_dlogprob is None else max_dlogprob
    margin = row.tie_margin if tie_margin is None else tie_margin
    same = positions = diverged = bad_count = 0
    worst = 0.0
    for a, b in zip(row.prompts, ref.prompts):
        n = min(len(a.output_ids), len(b.output_ids))
        positions += max(len(a.output_ids), len(b.output_ids))
        same += sum(1 for k in range(n) if a.output_ids[k] == b.output_ids[k])
        for k in range(n):
            if a.output_ids[k] == b.output_ids[k]:
                worst = max(worst, abs(a.logprobs[k] - b.logprobs[k]))
                continue
            diverged += 1
            ref_of_row_token = b.top[k].get(a.output_ids[k])
            if ref_of_row_token is None or b.logprobs[k] - ref_of_row_token > margin:
                bad_count += 1
            break
        else:
            if len(a.output_ids) != len(b.output_ids):  # one text ended early: it left the other's
                diverged += 1
                bad_count += 1
    return AnswerVerdict(top1=same / positions if positions else 1.0, max_dlogprob=worst, diverged=diverged,
                         bad=bad_count, prompts=len(row.prompts), positions=positions,
                         passed=bad_count == 0 and worst <= limit)


def own_stats(answers: AnswerSet) -> dict[str, Any]:
    """The row's own answer facts, as its record keeps them (no verdict: that needs a reference)."""
    lps = [lp for p in answers.prompts for lp in p.logprobs]
    return {"file": "answers.json", "prompts": len(answers.prompts), "positions": len(lps),
            "mean_logprob": round(sum(lps) / len(lps), 6) if lps else None,
            "min_logprob": round(min(lps), 6) if lps else None}


def verdict_text(v: AnswerVerdict) -> str:
    """The table's cell: `✓ 100% Δ0.004`, `✗ 41% Δ2.31 (3 bad)`; near-tie divergences are counted too."""
    mark = "✓" if v.passed else "✗"
    pct = math.floor(v.top1 * 100) if v.top1 < 1 else 100  # 99.7 % is not "100%"
    extra = []
    if v.bad:
        extra.append(f"{v.bad} bad")
    if v.diverged - v.bad:
        extra.append(f"{v.diverged - v.bad} tie")
    return f"{mark} {pct}% Δ{v.max_dlogprob:.3g}" + (f" ({', '.join(extra)})" if extra else "")


# A record's answers as `attach` reads them: (run id, experiment, attempt) → the parsed set, or why not.
AnswersReader = Callable[[Record], "AnswerSet | str | None"]


def _latest(records: list[Record], read: AnswersReader) -> AnswerSet | str | None:
    """The latest ok record's answers (a string: why its answers.json could not be read)."""
    for rec in reversed(records):
        if rec.status == Status.OK and rec.answers is not None:
            return read(rec)
    return None


def attach(rows: list[Row], records: list[Record], read: AnswersReader, *, named_baseline: bool) -> None:
    """Each row's `answers` cell (and `answer_verdict`): judged against the baseline row of its own run (the same
    GPU when there is one) — only a baseline someone named (the sweep's `baseline:`, or `--baseline`) is a
    reference; the table's stand-in (its first row) is not."""
    by_row: dict[tuple[str, str, str | None], list[Record]] = {}
    for rec in records:
        by_row.setdefault((rec.run_id, rec.experiment, gpu_of(rec)), []).append(rec)
    answers = {id(r): _latest(by_row.get((r.run_id, r.experiment, r.gpu), []), read) for r in rows}
    for row in rows:
        mine = answers[id(row)]
        if mine is None:
            continue
        if isinstance(mine, str):
            row.answers = "?"
            row.notes.append(f"answers: {mine}")
            continue
        if row.is_baseline and named_baseline:
            row.answers = "ref"
            continue
        refs = [r for r in rows if r.is_baseline and r.run_id == row.run_id] if named_baseline else []
        ref_row = next((r for r in refs if r.gpu == row.gpu), refs[0] if refs else None)
        ref = answers[id(ref_row)] if ref_row is not None else None
        if not isinstance(ref, AnswerSet):
            row.answers = "no ref"
            continue
        try:
            row.answer_verdict = compare_answers(mine, ref)
        except AnswersMismatch as exc:
            row.answers = "≠ ref"
            row.notes.append(f"answers not compared with {ref_row.label if ref_row else 'the reference'}: {exc}")
            continue
        row.answers = verdict_text(row.answer_verdict)
