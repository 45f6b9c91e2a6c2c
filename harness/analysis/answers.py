"""The answer check judged (pure): a row's answers.json against the reference's (the baseline's, same prompts).

Per prompt, positions are walked while the two greedy texts agree; at the first position where the tokens differ
the prompt has *diverged* (nothing after it is compared: two different tokens continue into two different texts).

The rule (issue 44), where the answers hold a prefix-hit pass (`prefix_hit`, the default): at each agreeing
position, the *spread* is the centred RMS of Δ logprob over the tokens both top-K lists hold (a shift shared by
every token is no disagreement); the row's spread is the median of those. Its bar is measured on the reference
itself: the reference's prefix-hit pass against its own cold pass — the same prompts, the hit's prefill reading
the FP8 cache instead of exact K/V, the kind of difference a correct FP8 kernel makes — the *yardstick*. A row
passes iff its spread is at most `spread_bar` (1.75) yardsticks and no divergence is gross (the row's token
outside the reference's top-K, or rated more than GROSS_MARGIN below the reference's own). Live on one H200
(docs/reading-the-table.md, "The answers column"): correct FP8 backends 1.04-1.44, a 5 % wrong KV scale 2.08-2.09,
a 1 % one 1.20 (inside the noise of a correct FP8 kernel: below what this check can see).

Without a prefix-hit pass (older answers) the fixed bars judge: pass iff no divergence is bad (a near-tie: the row's
token in the reference's top-K, rated at most `tie_margin` below) and the largest |Δ logprob| before any divergence
is at most `max_dlogprob`. `top1` is plain positional equality over every output position.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..common.protocol import Status
from ..results.attemptdir import ANSWERS
from ..results.schemas import Record
from .compare import Row, gpu_of

# The request settings that make two answer sets comparable (the thresholds may differ: they judge, they ask
# nothing). Defaults as the experiment YAML's (experiments/config.py AnswersSettings).
SAME_SETTINGS = ("prompts", "input_len", "output_len", "seed", "top_logprobs", "vocab", "prefix_hit")
DEFAULT_MAX_DLOGPROB = 0.25
DEFAULT_TIE_MARGIN = 0.1
DEFAULT_SPREAD_BAR = 1.75  # yardsticks: between correct FP8 backends (<= 1.44 live) and a 5 % wrong KV scale (2.08)
# A reference whose prefix-hit pass equals its cold pass (a BF16 cache, the simulated target) has no noise to
# measure: its yardstick is this (a third of the 1/16 step bf16 logits give logprobs at their magnitude).
YARDSTICK_FLOOR = 0.02
GROSS_MARGIN = 1.0  # a divergence this far from a tie is no rounding flip, however noisy the row
MIN_SPREAD_COMMON = 3  # tokens both top-K lists must hold at a position for its spread to count


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

    @property
    def spread_bar(self) -> float:
        return float(self.settings.get("spread_bar", DEFAULT_SPREAD_BAR))

    @property
    def passes(self) -> tuple[tuple[PromptAnswer, ...], ...]:
        """The prompts by pass: (cold, prefix hit) with `prefix_hit`, else (all,)."""
        n = len(self.prompts) // 2
        if self.settings.get("prefix_hit") and n and len(self.prompts) == 2 * n:
            return self.prompts[:n], self.prompts[n:]
        return (self.prompts,)


@dataclass(frozen=True)
class AnswerVerdict:
    top1: float  # fraction of all output positions whose token equals the reference's
    max_dlogprob: float  # largest |Δ logprob| of the chosen token, over positions before any divergence
    diverged: int  # prompts whose greedy text left the reference's (near-ties included)
    bad: int  # of those, divergences that are no near-tie
    prompts: int
    positions: int
    passed: bool
    spread: float | None = None  # median per-step spread over agreeing positions (None: no position to measure)
    yardstick: float | None = None  # the reference's prefix-hit pass against its cold pass (None: no such pass)
    ratio: float | None = None  # spread / max(yardstick, YARDSTICK_FLOOR): what the rule judges
    steps: int = 0  # agreeing positions the spread was measured on

    @property
    def judged_by_spread(self) -> bool:
        return self.ratio is not None


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
    yard = yardstick(ref)
    limit = row.max_dlogprob if max_dlogprob is None else max_dlogprob
    # With a yardstick only gross divergences are bad; without one, any that is no near-tie (the fixed bars).
    margin = GROSS_MARGIN if yard is not None else row.tie_margin if tie_margin is None else tie_margin
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
    spreads = agreeing_spreads(row.prompts, ref.prompts)
    spread = statistics.median(spreads) if spreads else None
    verdict = AnswerVerdict(top1=same / positions if positions else 1.0, max_dlogprob=worst, diverged=diverged,
                            bad=bad_count, prompts=len(row.prompts), positions=positions,
                            passed=bad_count == 0 and worst <= limit, spread=spread, yardstick=yard, steps=len(spreads))
    if yard is None:
        return verdict
    ratio = (spread if spread is not None else math.inf) / max(yard, YARDSTICK_FLOOR)
    bar = row.spread_bar
    # Too few agreeing positions to measure (fewer than one a prompt) is a failure in itself: every text left
    # the reference's at once.
    passed = bad_count == 0 and ratio <= bar and len(spreads) >= len(row.prompts)
    return dataclasses.replace(verdict, ratio=ratio, passed=passed)


def position_spread(a: PromptAnswer, b: PromptAnswer, k: int) -> float | None:
    """The centred RMS of Δ logprob (a − b) at position k over the tokens both top-K lists hold (at least
    MIN_SPREAD_COMMON of them; else None): how differently the two rate the candidates, a shift common to all
    of them aside."""
    common = [t for t in b.top[k] if t in a.top[k]]
    if len(common) < MIN_SPREAD_COMMON:
        return None
    d = [a.top[k][t] - b.top[k][t] for t in common]
    mean = sum(d) / len(d)
    return math.sqrt(sum((x - mean) ** 2 for x in d) / len(d))


def agreeing_spreads(rows: Sequence[PromptAnswer], refs: Sequence[PromptAnswer]) -> list[float]:
    """Each position's spread, prompt by prompt, while the two greedy texts still agree."""
    out = []
    for a, b in zip(rows, refs):
        for k in range(min(len(a.output_ids), len(b.output_ids))):
            if a.output_ids[k] != b.output_ids[k]:
                break
            s = position_spread(a, b, k)
            if s is not None:
                out.append(s)
    return out


def yardstick(answers: AnswerSet) -> float | None:
    """A set's prefix-hit pass against its own cold pass: the median spread (None without a second pass)."""
    passes = answers.passes
    if len(passes) != 2:
        return None
    spreads = agreeing_spreads(passes[1], passes[0])
    return statistics.median(spreads) if spreads else 0.0


def own_stats(answers: AnswerSet) -> dict[str, Any]:
    """The row's own answer facts, as its record keeps them (no verdict: that needs a reference); `yardstick`, its
    prefix-hit pass against its cold pass, is the per-step noise the rule measures rows against when this row is
    the reference."""
    lps = [lp for p in answers.prompts for lp in p.logprobs]
    yard = yardstick(answers)
    return {"file": ANSWERS, "prompts": len(answers.prompts), "positions": len(lps),
            "mean_logprob": round(sum(lps) / len(lps), 6) if lps else None,
            "min_logprob": round(min(lps), 6) if lps else None,
            "yardstick": round(yard, 6) if yard is not None else None}


def verdict_text(v: AnswerVerdict) -> str:
    """The table's cell: `✓ 57% ×1.31 (20 flips)`, `✗ 37% ×2.09 (1 bad, 14 flips)` (the spread in yardsticks);
    by the fixed bars `✓ 100% Δ0.004`, `✗ 41% Δ2.31 (3 bad, 1 tie)`."""
    mark = "✓" if v.passed else "✗"
    pct = math.floor(v.top1 * 100) if v.top1 < 1 else 100  # 99.7 % is not "100%"
    extra = []
    if v.bad:
        extra.append(f"{v.bad} bad")
    if v.diverged - v.bad:
        extra.append(f"{v.diverged - v.bad} {'flips' if v.judged_by_spread else 'tie'}")
    measure = f"×{v.ratio:.2f}" if v.ratio is not None else f"Δ{v.max_dlogprob:.3g}"
    return f"{mark} {pct}% {measure}" + (f" ({', '.join(extra)})" if extra else "")


# The answers column in every legend: one wording.
LEGEND = ("answers: ✓/✗ the answer check against the baseline's (same tokens %; ×r: the per-step spread in "
          f"yardsticks, ✓ up to {DEFAULT_SPREAD_BAR}; Δ: the largest Δ logprob, where there is no yardstick)")


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
