"""A harness run in MLflow: `harness export RUN --mlflow URI` after the fact, and `harness sweep --mlflow URI`
as the sweep records each attempt (`LiveExport`). One parent run per harness run, one nested child run per
attempt (record), with trackfacts' params, metrics and tags; the record and its log tails as artifacts.

Exporting again never duplicates (docs/tracker.md "Exporting again"): the parent is the experiment's run
tagged harness.run_id = RUN and harness.kind = run; a child is the run tagged harness.attempt_id =
RUN/EXPERIMENT/ATTEMPT. A child whose record is unchanged (harness.record_sha256, written last) is left as it
is; one whose record changed since (a provisional record that became final, a recovery noted in it), or that
was cut short, is deleted and logged anew, since MLflow cannot take a metric back. The facts that need the
whole run (comparability, the answer verdict) and the parent's tags are brought up to date each time, writing
only what differs.
"""

from __future__ import annotations

import queue
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import answers, compare
from ..common.protocol import Status
from ..errors import HarnessError, ResultsError
from ..render.page import log_excerpt
from ..results.attemptdir import AttemptDir
from ..results.metrics import OUTPUT_THROUGHPUT
from ..results.schemas import Record
from ..results.store import ResultsStore
from .mlflowapi import MlflowTracker, TrackedRun
from .trackfacts import (
    ATTEMPT,
    ATTEMPT_ID,
    KIND,
    PARENT,
    RECORD_SHA,
    RUN,
    RUN_ID,
    RUNNING,
    Entry,
    Metric,
    attempt_entry,
    attempt_id,
    run_entry,
    run_facts,
)

BENCH_LOG_LINES = 100  # the tail of a failed bench case's log kept as an artifact (the server log's: page.LOG_LINES)
DEFAULT_EXPERIMENT = "harness"  # for a run without run.json (a single `harness run`)


@dataclass
class ExportSummary:
    experiment: str
    experiment_id: str
    parent: str  # the parent run's id in MLflow
    url: str | None
    logged: int = 0  # children made
    unchanged: int = 0  # children already there with the same record
    replaced: int = 0  # children whose record had changed (or that were cut short): logged anew
    updated: int = 0  # children whose run-level facts (comparability, answers) changed
    counted: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        said = [f"{n} {what}" for n, what in ((self.logged, "logged"), (self.unchanged, "already there"),
                                              (self.replaced, "replaced (record changed, or cut short)"),
                                              (self.updated, "updated (comparability, answers)")) if n]
        return ", ".join(said) or "nothing to log"


def default_experiment(store: ResultsStore, run_id: str) -> str:
    """The MLflow experiment a run goes to unless told: its sweep's name."""
    info = store.find_run(run_id)
    return info.sweep if info is not None else DEFAULT_EXPERIMENT


class RunExport:
    """One harness run into one MLflow experiment: `open` finds (or makes) the parent and what is there,
    `log_record` each attempt, `finish` the run-level facts and the parent's tags and status."""

    experiment_id: str
    parent: TrackedRun
    summary: ExportSummary

    def __init__(self, tracker: MlflowTracker, store: ResultsStore, run_id: str, experiment: str) -> None:
        self.tracker, self.store, self.run_id, self.experiment = tracker, store, run_id, experiment
        self.children: dict[str, TrackedRun] = {}  # attempt id → its child in the tracker
        self.fresh: set[str] = set()  # children logged by this export (their run-level facts are no update)

    def open(self, *, live: bool = False, start_ms: int | None = None) -> None:
        t = self.tracker
        self.experiment_id = t.experiment(self.experiment)
        found = t.runs_tagged(self.experiment_id, RUN_ID, self.run_id)
        # Two exports at once (a sweep logging, `harness export` beside it) may each have made a run: one is kept
        # (a complete child first), the others are deleted.
        self.children = {}
        for r in sorted((r for r in found if r.tags.get(KIND) == ATTEMPT and ATTEMPT_ID in r.tags),
                        key=lambda r: (RECORD_SHA in r.tags, r.run_id), reverse=True):
            if r.tags[ATTEMPT_ID] in self.children:
                t.delete(r.run_id)
            else:
                self.children[r.tags[ATTEMPT_ID]] = r
        self.fresh = set()
        parents = sorted((r for r in found if r.tags.get(KIND) == RUN), key=lambda r: r.run_id)
        for extra in parents[1:]:
            t.delete(extra.run_id)  # its children are moved under the one kept as they are logged again
        entry = run_entry(self.run_id, self.store.find_run(self.run_id), [], live=live)
        if parents:
            self.parent = parents[0]
        else:
            rid = t.start_run(self.experiment_id, entry.name, entry.tags, start_ms)
            self.parent = TrackedRun(rid, entry.status, dict(entry.tags), {}, {})
        if live:
            t.set_status(self.parent.run_id, entry.status)
        self.summary = ExportSummary(self.experiment, self.experiment_id, self.parent.run_id,
                                     t.url(self.experiment_id, self.parent.run_id))

    def log_record(self, rec: Record) -> str:
        """One attempt's child: "logged", "unchanged" or "replaced" (docstring above)."""
        text = rec.to_json()
        entry = attempt_entry(rec, text)
        old = self.children.get(attempt_id(rec))
        if old is not None and old.tags.get(RECORD_SHA) == entry.tags[RECORD_SHA]:
            self.summary.unchanged += int(attempt_id(rec) not in self.fresh)  # not when logged live just now
            if old.tags.get(PARENT) != self.parent.run_id:  # its parent was deleted in MLflow and made again
                self._bring_up_to_date(old, Entry(old.run_id, tags={PARENT: self.parent.run_id}),
                                       int(time.time() * 1000))
            return "unchanged"
        if old is not None:
            self.tracker.delete(old.run_id)
        folder = self.store.attempt_of(rec)
        start_ms, end_ms = self.times(rec)
        # The record's hash is the last thing written: a child cut short (the tracker failed half way) has none,
        # so the next export replaces it instead of taking it for complete.
        sha = {RECORD_SHA: entry.tags[RECORD_SHA]}
        tags = {k: v for k, v in entry.tags.items() if k not in sha}
        rid = self.tracker.start_run(self.experiment_id, entry.name, {**tags, PARENT: self.parent.run_id}, start_ms)
        self.children[attempt_id(rec)] = TrackedRun(rid, RUNNING, tags, {}, {})  # known, should it be cut short
        self.tracker.log(rid, params=entry.params, metrics=entry.metrics, timestamp_ms=end_ms)
        with tempfile.TemporaryDirectory(prefix="harness-export-") as tmp:
            _write_artifacts(Path(tmp), folder, rec, text)
            self.tracker.upload(rid, Path(tmp))
        self.tracker.set_status(rid, entry.status, end_ms)
        self.tracker.log(rid, tags=sha, timestamp_ms=end_ms)
        self.children[attempt_id(rec)] = TrackedRun(rid, entry.status, dict(entry.tags), dict(entry.params),
                                                    _latest(entry.metrics))
        self.fresh.add(attempt_id(rec))
        if old is not None:
            self.summary.replaced += 1
            return "replaced"
        self.summary.logged += 1
        return "logged"

    def sync(self, *, live: bool = False) -> ExportSummary:
        """Every record of the run (what is there already is skipped), then `finish`; the parent ends at the last
        record's time (a live sweep's: now)."""
        records = list(self.store.iter_records(self.run_id))
        for rec in records:
            self.log_record(rec)
        ends = [self.times(rec)[1] for rec in records]
        return self.finish(records, int(time.time() * 1000) if live or not ends else max(ends))

    def times(self, rec: Record) -> tuple[int, int]:
        return _times(self.store.attempt_of(rec), rec)

    def finish(self, records: list[Record], end_ms: int) -> ExportSummary:
        """The run-level facts of every child, then the parent's params (the first time), tags and status."""
        info = self.store.find_run(self.run_id)
        finals = self.store.final_records(self.run_id)
        rows = compare.build_rows(finals, metric=OUTPUT_THROUGHPUT, baseline=info.baseline if info else None)
        answers.attach(rows, finals, self._answers, named_baseline=bool(info and info.baseline))
        now = int(time.time() * 1000)
        for aid, (tags, metrics) in run_facts(rows, finals).items():
            child = self.children.get(aid)
            if child is not None and self._bring_up_to_date(child, Entry(aid, tags=tags, metrics=metrics), now):
                self.summary.updated += int(aid not in self.fresh)
        parent = run_entry(self.run_id, info, records)
        self._bring_up_to_date(self.parent, parent, now)
        self.tracker.set_status(self.parent.run_id, parent.status, end_ms)
        self.summary.counted = {s.value: n for s in Status if (n := sum(1 for r in records if r.status == s))}
        return self.summary

    def _bring_up_to_date(self, run: TrackedRun, want: Entry, now: int) -> bool:
        """Log what `want` has that the tracker's run lacks or holds otherwise (a param only when missing:
        MLflow keeps a param's first value); True when something was written."""
        params = {k: v for k, v in want.params.items() if k not in run.params}
        tags = {k: v for k, v in want.tags.items() if run.tags.get(k) != v}
        metrics = [m for m in want.metrics if run.metrics.get(m.key) != m.value]
        if not (params or tags or metrics):
            return False
        self.tracker.log(run.run_id, params=params, tags=tags, metrics=metrics, timestamp_ms=now)
        run.params.update(params)
        run.tags.update(tags)
        run.metrics.update(_latest(metrics))
        return True

    def _answers(self, rec: Record) -> answers.AnswerSet | str:
        try:
            return answers.parse_answers(self.store.read_answers(rec))
        except (ResultsError, answers.BadAnswers) as exc:
            return str(exc)


def export_run(tracker: MlflowTracker, store: ResultsStore, run_id: str, experiment: str) -> ExportSummary:
    """`harness export RUN --mlflow URI`: every record of the run (final or not: each is an attempt)."""
    export = RunExport(tracker, store, run_id, experiment)
    starts = [export.times(rec)[0] for rec in store.iter_records(run_id)]
    export.open(start_ms=min(starts) if starts else None)
    return export.sync()


class LiveExport:
    """A sweep's records logged as they are written, on a thread of its own (a slow tracker never holds up a
    host). The first failure is said once (`warn`) and ends the live logging; `close` exports the whole run
    once more, so what failed (or was never reported) gets there then, or the error says to export later."""

    def __init__(self, export: RunExport, warn: Callable[[str], None] = lambda message: None) -> None:
        self.export = export
        self.warn = warn
        self.failed: str | None = None
        self._queue: queue.Queue[Record | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="mlflow-export", daemon=True)
        self._thread.start()

    def submit(self, rec: Record) -> None:
        self._queue.put(rec)

    def _drain(self) -> None:
        while (rec := self._queue.get()) is not None:
            if self.failed is not None:
                continue
            try:
                self.export.log_record(rec)
            except (HarnessError, OSError) as exc:  # OSError: the artifacts' temporary folder
                self.failed = exc.message if isinstance(exc, HarnessError) else str(exc)
                self.warn(f"{self.failed}; logging to MLflow stops here, and is tried again when the sweep ends")

    def close(self) -> ExportSummary:
        """Wait for what was submitted, then export the whole run (idempotent: what is there is skipped)."""
        self._queue.put(None)
        self._thread.join()
        return self.export.sync(live=True)


# ============================================================================ artifacts and times


def _write_artifacts(tmp: Path, folder: AttemptDir, rec: Record, record_json: str) -> None:
    """record.json, the server log's tail, and the tail of each bench case's log that did not measure (every
    case's, when the attempt did not end ok): small, and masked as the page's excerpts are."""
    AttemptDir(tmp).record.write_text(record_json, encoding="utf-8")
    logs = tmp / "logs"
    tails: list[tuple[Path, int]] = []
    if folder.server_log.is_file():
        tails.append((folder.server_log, 200))
    for case, log in folder.bench_logs():
        if rec.status != Status.OK or case not in rec.metrics or not rec.metrics[case].repeats:
            tails.append((log, BENCH_LOG_LINES))
    for src, lines in tails:
        logs.mkdir(exist_ok=True)
        try:
            (logs / f"{src.name}.txt").write_text(log_excerpt(src, lines), encoding="utf-8")
        except OSError:
            continue  # a log that cannot be read: the record says what happened


def _times(folder: AttemptDir, rec: Record) -> tuple[int, int]:
    """The attempt's start and end (ms) as the tracker shows them: its record's time, back by its total time."""
    try:
        end = (folder.record if folder.record.is_file() else folder.provisional).stat().st_mtime
    except OSError:
        end = time.time()
    return int((end - rec.timings.get("total_s", 0.0)) * 1000), int(end * 1000)


def _latest(metrics: list[Metric]) -> dict[str, float]:
    """Each metric's value at its highest step: what the tracker reports as the run's value of it."""
    out: dict[str, tuple[int, float]] = {}
    for m in metrics:
        if m.key not in out or m.step >= out[m.key][0]:
            out[m.key] = (m.step, m.value)
    return {k: v for k, (_, v) in out.items()}
