"""Records are written atomically and never overwritten; disk-full gives a clear error."""

import errno
import json

import pytest
from pydantic import ValidationError

from harness.common.protocol import LockHolder, Status
from harness.errors import ConfigError, ResultsError
from harness.results.metrics import parse_jsonl, summarize
from harness.results.schemas import FINAL_STATUSES, PlannedEntry, Record, Recovered, RunInfo
from harness.results.store import ResultsStore, load_record


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


def test_a_provisional_record_is_replaced_in_place_and_counts_only_until_the_final_one(tmp_path):
    """`record.partial.json` keeps what arrived while the attempt runs; a killed controller leaves it."""
    store = ResultsStore(tmp_path)
    d1, d2 = store.new_attempt_dir("r", "e"), store.new_attempt_dir("r", "e")
    store.write_provisional(d1, record(status="aborted", provisional=True))
    store.write_provisional(d1, record(status="ok", provisional=True))
    assert [p.name for p in d1.iterdir()] == ["record.partial.json"]  # replaced, no temp file left
    store.write_provisional(d2, record(attempt="02", status="ok", provisional=True))
    store.write_record(d2, record(attempt="02", status="crashed"))
    recs = list(store.iter_records("r"))
    assert [(r.attempt, r.status, r.provisional) for r in recs] == [("01", "ok", True), ("02", "crashed", None)]
    assert [r.attempt for r in store.final_records("r")] == ["01", "02"]
    store.drop_provisional(d2)
    store.drop_provisional(d2)  # gone already: fine
    assert [p.name for p in d2.iterdir()] == ["record.json"]


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
    assert s.repeats == 3
    assert s.output_throughput == 20 and s.samples["output_throughput"] == [10, 30, 20]
    assert s.median_ttft_ms == 6 and s.median("median_ttft_ms") == 6 and s.median("median_itl_ms") is None


def test_a_repeat_without_a_finite_number_is_kept_as_none_and_left_out_of_the_median():
    """JSON holds no NaN: such a repeat is written null (as records always did) and read back the same."""
    s = summarize([{"output_throughput": 10.0}, {"output_throughput": float("nan")}, {"output_throughput": 30}])
    assert s.samples["output_throughput"] == [10.0, None, 30] and s.output_throughput == 20.0
    assert s.values("output_throughput") == [10.0, 30.0]
    rec = Record(run_id="r", experiment="e", attempt="01", host="h", status="ok", metrics={"c": s})
    assert Record.model_validate_json(rec.to_json()).metrics == {"c": s}
    assert json.loads(rec.to_json())["metrics"]["c"] == {"repeats": 3, "samples": {"output_throughput": [10.0, None, 30]},
                                                        "output_throughput": 20.0}


# ============================================================================ the record's fields and statuses

FULL = {
    "schema": 1, "run_id": "20250101-000000-abcd", "experiment": "s-flashinfer-mla", "attempt": "01", "host": "h200",
    "backend": "flashinfer-mla", "status": "crashed", "error": "server exited 1",
    "verdict": {"verdict": "crash", "category": "jit-compile-error", "key_line": "static_assert failed",
                "phase": "warmup", "hint": "read the compiler error"},
    "timings": {"lock_s": 0.01, "total_s": 3.5}, "detect_latency_s": 0.4,
    "metrics": {"bs1": {"repeats": 2, "samples": {"output_throughput": [10, 12]}, "output_throughput": 11}},
    "provenance": {"base_commit": "c" * 40, "patch_sets": {"p": "0" * 64}, "harness_version": "0.1.0",
                   "server_version": "0.5.23", "gpu": [{"name": "NVIDIA H200", "compute_cap": "9.0"}],
                   "arch": "sm90", "agent_python": "3.11.7", "hostname": "box"},
    "revert": {"verified": True, "tree_before": "t1", "tree_after": "t1", "diff": []},
    "expect": "crash", "expectation_met": True, "experiment_file": "/x/e.yaml",
    "server": {"argv": ["python", "-m", "sglang.launch_server", "--port", {"slot": "port"}],
               "env": {"HF_TOKEN": "<redacted>"}, "port": 30001, "exit_code": 1,
               "stop": {"signal": "TERM", "stragglers": [], "left": [], "stop_s": 0.2}},
    "changed_paths": {"restore": ["a.py"], "delete": ["new.py"]},
    "recovered": {"journal": {"attempt_id": "old-01"}, "stop": {"state": "already-gone"},
                  "revert": {"verified": True, "tree_before": "t0", "tree_after": "t0", "diff": []}},
    "abort_reason": None,
    "profile": {"total_gpu_us": 100.0, "steps": 3, "kernels": 4, "per_step_us": 33.3, "trace": "profile/a-TP-0.json",
                "files": ["profile/a-TP-0.json"],
                "top": [{"name": "aten::copy_", "gpu_us": 60.0, "share": 0.6, "calls": 3,
                         "kernels": [{"name": "copy_kernel", "gpu_us": 60.0}]}]},
    "key": "k1", "round": 2, "sweep": "s", "try": 1,
    "dirty": ["notes.txt"], "locked_by": {"run_id": "other", "pid": 7}, "fetch_missing": ["/w/bench.jsonl"],
    "port_in_use": 30000, "cannot_run": ["needs sm100"], "preflight_warnings": ["cutlass_mla unknown"],
    "arch": "sm90", "budget_exceeded": True, "gpu_dirty": {"123": 512}, "profile_error": "no trace",
    "provisional": True,
}


def test_every_field_is_declared_and_read_as_an_attribute(tmp_path):
    d = ResultsStore(tmp_path).new_attempt_dir("r", "e")
    (d / "record.json").write_text(json.dumps(FULL, indent=2) + "\n")
    rec = load_record(d / "record.json")
    assert rec.model_extra is None  # nothing undeclared
    assert rec.status is Status.CRASHED and rec.expectation_met is True and rec.expect == "crash"
    assert rec.server is not None and rec.server.port == 30001 and rec.server.argv[-1] == {"slot": "port"}
    assert rec.server.stop is not None and rec.server.stop.signal == "TERM" and rec.server.stop.gpu_dirty is None
    assert rec.recovered is not None and rec.recovered.stop.state == "already-gone" and rec.recovered.revert.verified
    assert rec.changed_paths is not None and rec.changed_paths.delete == ["new.py"]
    assert rec.profile is not None and rec.profile.top[0].kernels[0].name == "copy_kernel"
    assert (rec.key, rec.round, rec.sweep, rec.try_) == ("k1", 2, "s", 1)
    assert rec.provenance.gpu == [{"name": "NVIDIA H200", "compute_cap": "9.0"}] and rec.provenance.arch == "sm90"
    assert rec.gpu_dirty == {"123": 512} and rec.locked_by == LockHolder(run_id="other", pid=7)
    assert json.loads(rec.to_json()) == FULL  # the same keys and values back on disk


def test_an_undeclared_field_is_refused():
    with pytest.raises(ValueError, match="bogus"):
        record(bogus=1)
    with pytest.raises(ValueError, match="surprise"):  # a part is the agent's dataclass: its fields, no other
        record(revert={"verified": True, "surprise": 1})


def test_statuses_are_one_enum_written_as_the_same_strings(tmp_path):
    store = ResultsStore(tmp_path)
    for status in Status:
        d = store.new_attempt_dir("r", "e")
        store.write_record(d, record(status=status.value))
        text = (d / "record.json").read_text()
        assert f'"status": "{status.value}"' in text
        assert load_record(d / "record.json").status is status
    assert [s.value for s in Status] == ["ok", "crashed", "hung", "apply-failed", "preflight-failed", "bench-failed",
                                         "infra-error", "aborted"]


def test_fields_not_given_are_not_written_and_a_record_round_trips_byte_for_byte(tmp_path):
    store = ResultsStore(tmp_path)
    d = store.new_attempt_dir("r", "e")
    rec = record(expect="ok", expectation_met=False, abort_reason=None, cannot_run=["no host fits"])
    store.write_record(d, rec)
    text = (d / "record.json").read_text()
    data = json.loads(text)
    assert list(data)[:14] == ["schema", "run_id", "experiment", "attempt", "host", "backend", "status", "error",
                               "verdict", "timings", "detect_latency_s", "metrics", "provenance", "revert"]
    assert data["provenance"] == {} and data["abort_reason"] is None and data["cannot_run"] == ["no host fits"]
    assert not {"key", "round", "try", "server", "dirty", "budget_exceeded"} & set(data)
    assert load_record(d / "record.json").to_json() == text


def test_final_statuses_are_defined_once():
    assert FINAL_STATUSES == {Status.OK, Status.CRASHED, Status.HUNG, Status.APPLY_FAILED, Status.PREFLIGHT_FAILED,
                              Status.BENCH_FAILED}
    assert all(record(status=s.value).is_final() for s in FINAL_STATUSES)
    assert not record(status="aborted").is_final() and not record(status="infra-error").is_final()
    assert record(status="aborted", budget_exceeded=True).is_final()  # stopped for its budget: a result


# ============================================================================ reading run folders, checked


def test_a_record_of_another_schema_is_a_clear_error(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(json.dumps({**FULL, "schema": 2}))
    with pytest.raises(ResultsError) as e:
        load_record(path)
    assert str(path) in str(e.value) and "schema 2" in str(e.value) and "schema 1" in str(e.value)
    assert "hint:" in str(e.value)
    path.write_text(json.dumps({k: v for k, v in FULL.items() if k != "schema"}))
    with pytest.raises(ResultsError, match="schema None"):
        load_record(path)


def test_an_invalid_or_damaged_record_is_a_clear_error_not_a_traceback(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(json.dumps({**FULL, "status": "fine", "surprise": 1}))
    with pytest.raises(ResultsError) as e:
        load_record(path)
    assert not isinstance(e.value, ValidationError)
    msg = str(e.value)
    assert str(path) in msg and "status" in msg and "surprise" in msg and "Traceback" not in msg
    path.write_text('{"schema": 1, "run_id": ')
    with pytest.raises(ResultsError, match="not valid JSON"):
        load_record(path)
    path.write_text("[1]")
    with pytest.raises(ResultsError, match="not an object"):
        load_record(path)


def run_info(run_id, keys=("k1", "k2"), sweep_file="/x/sweep.yaml"):
    return RunInfo(run_id=run_id, sweep="s", sweep_file=sweep_file, baseline="s-base", hosts=["h"],
                   attempts=[PlannedEntry(key=k, experiment="e", round=1, order=i) for i, k in enumerate(keys)])


def test_run_file_is_written_and_read_back_checked(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_run(run_info("r1"))
    store.write_run(run_info("r1", keys=("k3",)))  # resuming replaces the plan
    data = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert list(data) == ["schema", "run_id", "sweep", "sweep_file", "created", "baseline", "hosts", "hosts_file",
                          "patches_dir", "host_gpus", "key_signature", "key_archs", "attempts"]
    assert data["schema"] == 1 and data["attempts"] == [{"key": "k3", "experiment": "e", "round": 1, "order": 0,
                                                         "backend": None, "arch": None}]
    run = store.read_run("r1")
    assert run.plan_keys() == {"k3"} and run.baseline == "s-base"
    store.write_run(run_info("r2", sweep_file=str((tmp_path / "other.yaml").resolve())))
    assert store.runs_of_sweep(tmp_path / "other.yaml") == ["r2"]
    with pytest.raises(ConfigError, match="no run 'nope'") as e:
        store.read_run("nope")
    assert "r1, r2" in str(e.value)
    (tmp_path / "r1" / "run.json").write_text(json.dumps({**data, "schema": 7}))
    with pytest.raises(ResultsError, match="run.json: run file schema 7; this harness reads schema 1"):
        store.read_run("r1")
    (tmp_path / "r1" / "run.json").write_text(json.dumps({**data, "attempts": [{"key": "k"}]}))
    with pytest.raises(ResultsError, match="attempts.0.experiment"):
        store.read_run("r1")


def test_records_by_key_and_final_records_of_the_current_plan(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_run(run_info("r", keys=("k1", "k2")))
    for key, status in (("k1", "infra-error"), ("k1", "ok"), ("k2", "aborted"), ("stale", "ok")):
        store.write_record(store.new_attempt_dir("r", "e"), record(run_id="r", status=status, key=key))
    store.write_record(store.new_attempt_dir("r", "single"), record(run_id="r", status="crashed"))  # no key
    by_key = store.records_by_key("r")
    assert {k: [r.status for r in v] for k, v in by_key.items()} == {"k1": ["infra-error", "ok"], "k2": ["aborted"],
                                                                   "stale": ["ok"]}
    assert sorted((r.key or "-", r.status.value) for r in store.final_records("r")) == [("-", "crashed"), ("k1", "ok")]
    bad = store.new_attempt_dir("r", "e")
    (bad / "record.json").write_text(json.dumps({**FULL, "schema": 9}))
    with pytest.raises(ResultsError, match=str(bad / "record.json")):
        store.records_by_key("r")


def test_a_recovery_is_noted_only_in_a_provisional_record_of_this_store_named_by_the_journal(tmp_path):
    """The journal's ids come from the host: one that names no run of this store, or an attempt that has its
    record.json already, changes nothing."""
    store = ResultsStore(tmp_path / "results")
    d = store.new_attempt_dir("r1", "e", "01")
    store.write_provisional(d, record(run_id="r1", experiment="e", attempt="01", status="aborted", provisional=True))
    revert = {"verified": True, "tree_before": "a" * 64, "tree_after": "a" * 64, "diff": []}
    recovered = Recovered.model_validate({"journal": {"run_id": "../r1", "attempt_id": "e-01"}, "stop": {},
                                          "revert": revert, "by": "recover"})
    assert store.note_recovery(recovered) is None
    recovered.journal = {"run_id": "r1", "attempt_id": "e-01"}
    store.write_record(d, record(run_id="r1", experiment="e", attempt="01", status="ok"))
    assert store.note_recovery(recovered) is None
    (d / "record.json").unlink()
    assert store.note_recovery(recovered) == d / "record.partial.json"
    rec = load_record(d / "record.partial.json")
    assert rec.revert is not None and rec.revert.verified and rec.recovered is not None and rec.provisional


def test_a_repeat_without_a_number_is_left_out_of_the_cell_not_a_crash():
    from harness.analysis.compare import build_rows

    samples = {"median_ttft_ms": [10.0, float("nan"), None, 12.0, 11.0]}  # SGLang writes NaN and null
    rec = record(metrics={"bs1": {"samples": samples}})
    cell = build_rows([rec], metric="median_ttft_ms")[0].cells["bs1"]
    assert (cell.median, cell.n, cell.samples) == (11.0, 3, [10.0, 12.0, 11.0])


def test_answers_are_read_beside_the_record_or_from_their_gzipped_copy(tmp_path):
    import gzip

    store = ResultsStore(tmp_path)
    d = store.new_attempt_dir("r1", "e")
    rec = Record(run_id="r1", experiment="e", attempt=d.name, host="h", status="ok", answers={"prompts": 1})
    doc = {"settings": {}, "prompts": []}
    with pytest.raises(ResultsError, match="cannot read"):
        store.read_answers(rec)
    (d / "answers.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert store.read_answers(rec) == doc  # an archived run keeps them packed
    (d / "answers.json").write_text(json.dumps({**doc, "version": 2}))
    assert store.read_answers(rec) == {**doc, "version": 2}  # the plain file wins where both are
