"""Night against night (pure): run B's results against run A's, experiment by experiment (matched by name,
and GPU when the records name one) and key metric by key metric, with the comparison table's rules
(compare.py): B's per-repeat samples against A's, the ratio of the medians, the two-sided Mann-Whitney test
at ALPHA, "?" under MIN_SAMPLES a side, noise over NOISY_CV, no verdict across GPUs. What is significantly
worse in B, and what failed in B that ran ok in A, are the regressions, listed first.

Rendering the comparison (markdown, csv, json, the page's context) is nightstext.py's; printing is the CLI's."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..common.protocol import Status
from ..results.metrics import KEY_METRICS
from ..results.schemas import Record
from . import compare, stack

# How fast: the throughputs and the latencies. The rest of KEY_METRICS (duration, completed,
# total_output_tokens, concurrency) say what workload a case ran, not how fast it ran.
SPEED_METRICS = tuple(m for m in KEY_METRICS if m.endswith("_throughput") or m.endswith("_ms"))

# Provenance that says where a record ran rather than on what software: never a change of setup (the GPU is
# judged on its own: another GPU is not comparable at all).
_WHERE = ("gpu", "hostname", "agent_python", "arch")
_FACT_NAMES = {"server_version": "SGLang", "flashinfer_version": "FlashInfer", "base_commit": "base commit",
               "patch_sets": "patch set", "patch_variants": "patch variant", "harness_version": "harness"}
_HASH = re.compile(r"[0-9a-f]{40,64}")

Key = tuple[str, str | None]  # experiment, GPU


@dataclass
class Change:
    """One bench case and metric of an experiment in both runs: A's cell, and B's judged against it (its
    ratio to A's median, p-value and verdict)."""

    case: str
    metric: str
    a: compare.Cell
    b: compare.Cell

    @property
    def percent(self) -> float | None:
        """B's median over A's, as a signed percentage (-16.7: B's median is 16.7 % lower)."""
        return None if self.b.ratio is None else (self.b.ratio - 1) * 100


@dataclass
class Pair:
    """One experiment in both runs: each run's row (status, category, key line), and its changes."""

    label: str
    experiment: str
    a: compare.Row
    b: compare.Row
    comparable: bool = True  # both ran on the same GPU and stack (what matters of it: stack.py)
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """B failed where A ran ok (and B's experiment did not expect it to): a regression."""
        return self.a.status == Status.OK and self.b.status != Status.OK and not self.b.expected


@dataclass
class Regression:
    """A line of the summary: an experiment that failed in B, or a case and metric significantly worse."""

    label: str
    case: str | None  # None: the experiment failed
    metric: str | None
    text: str  # "crashed: kernel-error (ran ok in A)", or "0.83x (-16.7%)"; A and B: the runs
    change: Change | None = None


@dataclass
class Nights:
    run_a: str
    run_b: str
    metrics: list[str]
    pairs: list[Pair]
    added: list[str]  # experiments only in B
    removed: list[str]  # experiments only in A
    setup: list[tuple[str, str, str]]  # what differs between the runs' setups: (what, A's, B's)

    def regressions(self) -> list[Regression]:
        out = []
        for p in self.pairs:
            if p.failed:
                out.append(Regression(p.label, None, None, f"{compare.status_text(p.b)} (ran ok in A)"))
            out += [Regression(p.label, c.case, c.metric, change_text(c), c) for c in p.changes
                    if c.b.verdict == "worse"]
        return out

    def summary(self) -> list[tuple[str, str | None, list[Regression]]]:
        """The regressions grouped as the summary shows them: one line per experiment that failed, and per
        experiment and bench case with metrics significantly worse: (label, case or None, its regressions)."""
        groups: dict[tuple[str, str | None], list[Regression]] = {}
        for r in self.regressions():
            groups.setdefault((r.label, r.case), []).append(r)
        return [(label, case, items) for (label, case), items in groups.items()]


def change_text(c: Change) -> str:
    """'0.83x (-16.7%)': B's median over A's, and by how much it moved."""
    if c.b.ratio is None or c.percent is None:
        return "-"
    return f"{c.b.ratio:.2f}x ({c.percent:+.1f}%)"


def measured_metrics(records: Iterable[Record]) -> set[str]:
    return {m for r in records for case in r.metrics.values() for m, v in case.samples.items() if v}


# ============================================================================ B against A


def against(records_a: list[Record], records_b: list[Record], *, run_a: str, run_b: str,
            metrics: Iterable[str] = SPEED_METRICS) -> Nights:
    """Run B's final records against run A's. `metrics`: those to judge (the ones neither run measured are
    left out)."""
    seen = measured_metrics(records_a + records_b)
    chosen = [m for m in metrics if m in seen]
    rows_a = {m: _by_key(compare.build_rows(records_a, metric=m)) for m in chosen}
    rows_b = {m: _by_key(compare.build_rows(records_b, metric=m)) for m in chosen}
    # status, category and key line do not depend on the metric
    status_a = _by_key(compare.build_rows(records_a, metric=chosen[0] if chosen else SPEED_METRICS[0]))
    status_b = _by_key(compare.build_rows(records_b, metric=chosen[0] if chosen else SPEED_METRICS[0]))
    matched, removed, added = pair_keys(set(status_a), set(status_b))
    several = _on_several_gpus(list(status_a)) | _on_several_gpus(list(status_b))
    groups_a, groups_b = _groups(records_a), _groups(records_b)
    facts_a, facts_b = setup_facts(records_a), setup_facts(records_b)
    run_wide = _run_wide(records_a + records_b, facts_a, facts_b)
    pairs = []
    for ka, kb in matched:
        # another GPU, or a stack that differs in what matters (stack.py): a ratio without a verdict
        other_stack = stack.differences(status_b[kb].stack, status_a[ka].stack)[0]
        pair = Pair(label=_label(kb, several), experiment=ka[0], a=status_a[ka], b=status_b[kb],
                    comparable=ka[1] == kb[1] and not other_stack)
        pair.changes = [c for m in chosen for c in _changes(rows_a[m][ka], rows_b[m][kb], m, pair.comparable)]
        pair.changes.sort(key=lambda c: (c.case, chosen.index(c.metric)))
        pair.notes = (_status_notes(pair) + _gpu_notes(ka, kb) + _stack_notes(other_stack)
                      + _setup_notes(groups_a.get(ka, []), groups_b.get(kb, []), skip=run_wide)
                      + _case_notes(groups_a.get(ka, []), groups_b.get(kb, [])) + _sample_notes(pair))
        pairs.append(pair)
    return Nights(run_a=run_a, run_b=run_b, metrics=chosen, pairs=pairs,
                  added=[_label(k, several) for k in added], removed=[_label(k, several) for k in removed],
                  setup=[d for d in _differences(facts_a, facts_b) if d[0] in run_wide])


def _changes(row_a: compare.Row, row_b: compare.Row, metric: str, comparable: bool) -> list[Change]:
    """Each bench case both rows have, measured on at least one side: B's cell judged against A's."""
    return [Change(case, metric, row_a.cells[case],
                   compare.judge(row_a.cells[case], row_b.cells[case], metric, comparable))
            for case in sorted(set(row_a.cells) & set(row_b.cells)) if row_a.cells[case].n or row_b.cells[case].n]


def pair_keys(keys_a: set[Key], keys_b: set[Key]) -> tuple[list[tuple[Key, Key]], list[Key], list[Key]]:
    """Match experiments across the runs: by name and GPU; an experiment left with one GPU in each run
    (it moved to another GPU) is still a pair — not comparable. Returns (pairs, only in A, only in B)."""
    pairs = [(k, k) for k in keys_a & keys_b]
    only_a, only_b = keys_a - keys_b, keys_b - keys_a
    for exp in sorted({e for e, _ in only_a}):
        ga, gb = [k for k in only_a if k[0] == exp], [k for k in only_b if k[0] == exp]
        if len(ga) == 1 and len(gb) == 1:
            pairs.append((ga[0], gb[0]))
            only_a -= set(ga)
            only_b -= set(gb)
    return sorted(pairs, key=lambda p: _order(p[1])), sorted(only_a, key=_order), sorted(only_b, key=_order)


def setup_facts(records: Iterable[Record]) -> dict[str, set[str]]:
    """What software the records ran on, by name ('SGLang', 'base commit', 'patch set fp8-kv', …) → the
    values seen (hashes cut to 12 characters). Every provenance field but where it ran counts, so a fact the
    records keep later is compared too."""
    out: dict[str, set[str]] = {}
    for rec in records:
        for key, value in rec.provenance.model_dump().items():
            if key in _WHERE or value is None:
                continue
            items = value.items() if isinstance(value, dict) else [("", value)]
            for sub, v in items:
                name = _FACT_NAMES.get(key, key.replace("_", " ")) + (f" {sub}" if sub else "")
                text = str(v)
                out.setdefault(name, set()).add(text[:12] if _HASH.fullmatch(text) else text)
    return out


def _run_wide(records: list[Record], facts_a: dict[str, set[str]], facts_b: dict[str, set[str]]) -> set[str]:
    """The facts of the whole runs (SGLang, the base commit): every record has them, one value in each run.
    The header says their changes once; an experiment's notes say its own (a patch set only it applies)."""
    every = set.intersection(*(set(setup_facts([r])) for r in records)) if records else set()
    return {k for k in every if len(facts_a.get(k, ())) <= 1 and len(facts_b.get(k, ())) <= 1}


def _differences(fa: dict[str, set[str]], fb: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    return [(k, ", ".join(sorted(fa.get(k, ()))) or "-", ", ".join(sorted(fb.get(k, ()))) or "-")
            for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def _by_key(rows: list[compare.Row]) -> dict[Key, compare.Row]:
    return {(r.experiment, r.gpu): r for r in rows}


def _groups(records: list[Record]) -> dict[Key, list[Record]]:
    return {(exp, gpu): recs for (_, exp, gpu), recs in compare.group_records(records).items()}


def _order(k: Key) -> tuple[str, str]:
    return k[0], k[1] or ""


def _on_several_gpus(keys: list[Key]) -> set[str]:
    """The experiments a run measured on more than one GPU: their labels name the GPU."""
    return {e for e, g in keys if len({k[1] for k in keys if k[0] == e}) > 1}


def _label(key: Key, several: set[str]) -> str:
    exp, gpu = key
    return exp + (f" @ {gpu}" if exp in several and gpu else "")


def _status_notes(pair: Pair) -> list[str]:
    a, b = pair.a, pair.b
    key_line = [compare.short_key_line(b.key_line)] if b.key_line and b.status != Status.OK else []
    if pair.failed:
        return [f"{compare.status_text(b)} in B, ran ok in A"] + key_line
    if a.status != Status.OK and b.status == Status.OK:
        return [f"ran ok in B, {compare.status_text(a)} in A"]
    if b.status != Status.OK:
        return [f"{compare.status_text(b)} in B, {compare.status_text(a)} in A"] + key_line
    if b.ok < b.attempts:
        return [f"{b.attempts - b.ok} of {b.attempts} attempts not ok in B"]
    return []


def _gpu_notes(ka: Key, kb: Key) -> list[str]:
    if ka[1] == kb[1]:
        return []
    return [f"not comparable: GPU {ka[1] or '-'} in A, {kb[1] or '-'} in B"]


def _stack_notes(other_stack: list[str]) -> list[str]:
    return [f"not comparable: {', '.join(other_stack)}"] if other_stack else []


def _setup_notes(recs_a: list[Record], recs_b: list[Record], skip: set[str]) -> list[str]:
    """The experiment's own setup changes (a patch set's hash, …); those of the whole run are said once."""
    diffs = [d for d in _differences(setup_facts(recs_a), setup_facts(recs_b)) if d[0] not in skip]
    return ["changed: " + "; ".join(f"{what} {a} → {b}" for what, a, b in diffs)] if diffs else []


def _case_notes(recs_a: list[Record], recs_b: list[Record]) -> list[str]:
    """Bench cases one night measured and the other did not (the sweep's cases changed): nothing to judge."""
    def cases(recs: list[Record]) -> set[str]:
        return {case for r in recs if r.status == Status.OK for case in r.metrics}

    a, b = cases(recs_a), cases(recs_b)
    if not (a and b):  # a night without a number: its status says why
        return []
    return ([f"only in B: {', '.join(sorted(b - a))}"] if b - a else []) + (
        [f"only in A: {', '.join(sorted(a - b))}"] if a - b else [])


def _sample_notes(pair: Pair) -> list[str]:
    """Per bench case: the metrics too noisy to trust (CV over NOISY_CV on a side), too few samples."""
    notes = []
    for case in sorted({c.case for c in pair.changes}):
        changes = [c for c in pair.changes if c.case == case]
        noisy = [f"{c.metric} ({_cvs(c)})" for c in changes if _noisy(c.a) or _noisy(c.b)]
        if noisy:
            notes.append(f"{case}: noisy (CV over {compare.NOISY_CV * 100:.0f}%): " + ", ".join(noisy))
        few = sorted({(c.a.n, c.b.n) for c in changes if 0 < min(c.a.n, c.b.n) < compare.MIN_SAMPLES})
        if few:
            ns = ", ".join(f"n={na} in A, {nb} in B" for na, nb in few)
            notes.append(f"{case}: too few samples for a verdict ({ns}; {compare.MIN_SAMPLES} a side needed)")
    return notes


def _noisy(cell: compare.Cell) -> bool:
    return cell.n > 1 and cell.cv is not None and cell.cv > compare.NOISY_CV


def _cvs(c: Change) -> str:
    return ", ".join(f"{side} {cell.cv * 100:.1f}%" for side, cell in (("A", c.a), ("B", c.b))
                     if _noisy(cell) and cell.cv is not None)
