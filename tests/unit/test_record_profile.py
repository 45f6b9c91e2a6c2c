"""The record's profile summary never costs the record: a trace that cannot be read, or a summariser that
cannot be imported where the controller runs, becomes the record's `profile_error` (seen live on an H200 whose
image lacked ijson: the attempt served, benchmarked, profiled and reverted, and then no record was written)."""

from __future__ import annotations

import gzip
import json
import sys

from harness.results.attemptdir import AttemptDir
from harness.run.recording import _profile_summary


def _trace_dir(tmp_path, data: bytes):
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "1.0-TP-0.trace.json.gz").write_bytes(data)
    return AttemptDir(tmp_path)


def test_a_missing_summariser_dependency_is_the_records_profile_error(tmp_path, monkeypatch):
    trace = gzip.compress(json.dumps({"traceEvents": []}).encode())
    monkeypatch.delitem(sys.modules, "harness.triage.profile", raising=False)
    monkeypatch.setitem(sys.modules, "ijson", None)  # `import ijson` raises ImportError
    profile, error = _profile_summary(_trace_dir(tmp_path, trace))
    assert profile is None
    assert error is not None and "1.0-TP-0.trace.json.gz" in error and "ijson" in error


def test_a_trace_cut_short_is_the_records_profile_error(tmp_path):
    trace = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "dur": 1}] * 500}).encode())
    profile, error = _profile_summary(_trace_dir(tmp_path, trace[: len(trace) // 2]))
    assert profile is None and error is not None and error.startswith("cannot read 1.0-TP-0.trace.json.gz")
