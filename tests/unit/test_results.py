"""Records are written atomically and never overwritten; disk-full gives a clear error."""

import errno
import json

import pytest

from harness.bench import parse_jsonl, summarize
from harness.errors import ResultsError
from harness.results import Record, ResultsStore, load_record


def record(**kw):
    base = dict(run_id="r", experiment="e", attempt="01", host="h", status="ok")
    base.update(kw)
    return Record(**base)


def test_attempt_dirs_are_numbered_and_records_never_overwritten(tmp_path):
    store = ResultsStore(tmp_path)
    d1 = store.new_attempt_dir("r", "e")
    d2 = store.new_attempt_dir("r", "e")
    assert (d1.name, d2.name) == ("01", "02")
    store.write_record(d1, record())
    with pytest.raises(ResultsError, match="never overwritten"):
        store.write_record(d1, record(status="crashed"))
    assert load_record(d1 / "record.json").status == "ok"
    assert json.loads((d1 / "record.json").read_text())["schema"] == 1
    assert [p.name for p in d1.iterdir()] == ["record.json"]  # no temp file left


def test_disk_full_is_a_clear_error_and_leaves_no_partial_record(tmp_path, monkeypatch):
    import os

    d = ResultsStore(tmp_path).new_attempt_dir("r", "e")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ResultsError, match="no space left"):
        ResultsStore(tmp_path).write_record(d, record())
    assert list(d.iterdir()) == []


def test_record_rejects_unknown_status():
    with pytest.raises(ValueError):
        record(status="fine")


def test_summarize_takes_median_over_repeats_and_keeps_samples():
    rows = parse_jsonl('{"output_throughput": 10, "median_ttft_ms": 5}\nnot json\n'
                       '{"output_throughput": 30, "median_ttft_ms": 7}\n{"output_throughput": 20}\n')
    s = summarize(rows)
    assert s["repeats"] == 3
    assert s["output_throughput"] == 20 and s["samples"]["output_throughput"] == [10, 30, 20]
    assert s["median_ttft_ms"] == 6
