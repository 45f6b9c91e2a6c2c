"""What an MLflow export keeps of records (harness.tracker.trackfacts, pure), and the harness without mlflow:
it imports and runs, and asking for an export says what to install. The export against a real tracking
server: tests/integration/test_mlflow.py."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from harness.analysis import compare
from harness.analysis.answers import AnswerVerdict
from harness.cli.app import app
from harness.errors import ConfigError, TrackerError
from harness.results.schemas import Record, RunInfo
from harness.results.store import ResultsStore
from harness.tracker import trackfacts
from harness.tracker.export import LiveExport, RunExport, export_run
from harness.tracker.mlflowapi import TrackedRun

H200 = [{"name": "NVIDIA H200"}] * 8
B200 = [{"name": "NVIDIA B200"}] * 8


def record(experiment: str = "e", status: str = "ok", **over) -> Record:
    doc = {"run_id": "r1", "experiment": experiment, "attempt": "01", "host": "h", "backend": "flashinfer-mla",
           "status": status, "provenance": {"gpu": H200, "server_version": "0.5.23", "base_commit": "c" * 40,
                                            "patch_sets": {"p1": "a" * 64}, "harness_version": "0.1.0",
                                            "flashinfer_version": "0.7.2", "agent_python": "3.11.7"},
           "key": f"k-{experiment}", "round": 1, "sweep": "s", "try": 1}
    doc.update(over)
    return Record.model_validate(doc)


def bench(*throughputs: float) -> dict:
    return {"bs1": {"repeats": len(throughputs), "samples": {"output_throughput": list(throughputs),
                                                             "completed": [4] * len(throughputs)},
                    "output_throughput": sorted(throughputs)[len(throughputs) // 2], "completed": 4}}


# ---------------------------------------------------------------------------- one attempt


def test_server_flags_are_the_launchers_flags_without_where_it_listens():
    argv = ["/v/bin/python", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1", "--port",
            {"slot": "port"}, "--tp-size", "2", "--enable-torch-compile", "--mem-fraction-static", "0.8",
            "--offset", "-1", "--dtype=bfloat16"]
    assert trackfacts.server_flags(argv) == {"model-path": "/m", "tp-size": "2", "enable-torch-compile": "true",
                                             "mem-fraction-static": "0.8", "offset": "-1", "dtype": "bfloat16"}


def test_an_ok_attempt_keeps_every_repeat_as_a_step_its_median_and_what_it_ran_on():
    rec = record(metrics=bench(70.0, 74.0, 72.0), timings={"total_s": 9.5, "bench_s": 1.5},
                 server={"argv": ["python", "-m", "sglang.launch_server", "--tp-size", "2"], "env": {"A": "1"}})
    entry = trackfacts.attempt_entry(rec, rec.to_json())
    assert entry.status == trackfacts.FINISHED and entry.name == "e #01"
    steps = [(m.step, m.value) for m in entry.metrics if m.key == "bs1.output_throughput"]
    assert steps == [(0, 70.0), (1, 74.0), (2, 72.0)]
    medians = {m.key: m.value for m in entry.metrics if m.key.endswith(".median")}
    assert medians == {"bs1.output_throughput.median": 72.0, "bs1.completed.median": 4.0}
    assert {m.key: m.value for m in entry.metrics if m.key.startswith("time.")} == {"time.total_s": 9.5,
                                                                                  "time.bench_s": 1.5}
    p = entry.params
    assert (p["gpu"], p["patch_sets"], p["patch_set.p1"], p["server.tp-size"], p["env.A"]) == (
        "NVIDIA H200 x8", "p1", "a" * 64, "2", "1")
    assert (p["version.server"], p["version.flashinfer"], p["version.python"]) == ("0.5.23", "0.7.2", "3.11.7")
    t = entry.tags
    assert (t["status"], t["host"], t["round"], t["try"], t[trackfacts.ATTEMPT_ID]) == ("ok", "h", "1", "1",
                                                                                       "r1/e/01")
    assert t[trackfacts.RECORD_SHA] == trackfacts.record_sha(rec.to_json()) != trackfacts.record_sha("{}")


def test_a_crash_carries_its_triage_verdict_and_a_status_that_says_whether_it_was_expected():
    verdict = {"verdict": "crash", "category": "oom", "key_line": "torch.OutOfMemoryError: CUDA out of memory.",
               "phase": "cuda-graph", "hint": "lower --mem-fraction-static"}
    crashed = trackfacts.attempt_entry(r := record(status="crashed", verdict=verdict, error="x\ny"), r.to_json())
    assert crashed.status == trackfacts.FAILED
    assert (crashed.tags["category"], crashed.tags["phase"], crashed.tags["error"]) == ("oom", "cuda-graph", "x")
    assert crashed.tags["key_line"].startswith("torch.OutOfMemoryError")
    expected = record(status="crashed", verdict=verdict, expect="crash", expectation_met=True)
    assert trackfacts.run_status(expected) == trackfacts.FINISHED
    assert trackfacts.run_status(record(status="aborted")) == trackfacts.KILLED
    assert trackfacts.run_status(record(status="infra-error")) == trackfacts.KILLED


def test_names_mlflow_refuses_are_made_safe_and_long_values_clipped():
    rec = record(provenance={"patch_sets": {"a:b*c": "d"}}, error="e" * 9000)
    entry = trackfacts.attempt_entry(rec, rec.to_json())
    assert entry.params["patch_set.a_b_c"] == "d"
    assert len(entry.tags["error"]) == trackfacts.TAG_MAX and entry.tags["error"].endswith("…")


# ---------------------------------------------------------------------------- the run


def test_comparability_and_the_answer_verdict_come_from_the_comparison_rows():
    base = record("base", metrics=bench(70.0))
    same = record("same", metrics=bench(71.0))
    other = record("other", metrics=bench(90.0), provenance={"gpu": B200, "server_version": "0.5.23",
                                                             "base_commit": "c" * 40})
    crashed = record("crashed", status="crashed")
    records = [base, same, other, crashed]
    rows = compare.build_rows(records, metric="output_throughput", baseline="base")
    row = next(r for r in rows if r.experiment == "same")
    row.answers, row.answer_verdict = "✓ 100% Δ0.004", AnswerVerdict(1.0, 0.004, 0, 0, 8, 64, True)
    answered = record("same", metrics=bench(71.0), answers={"prompts": 8})
    facts = trackfacts.run_facts(rows, [base, answered, other, crashed])
    tags = {aid: t for aid, (t, _) in facts.items()}
    assert tags["r1/base/01"] == {"comparability": "baseline"}
    assert tags["r1/same/01"] == {"comparability": "comparable", "answers": "✓ 100% Δ0.004"}
    assert tags["r1/other/01"]["comparability"].startswith("not comparable to the baseline: gpu NVIDIA B200")
    assert "r1/crashed/01" not in facts
    metrics = {m.key: m.value for m in facts["r1/same/01"][1]}
    assert metrics == {"answers.top1": 1.0, "answers.max_dlogprob": 0.004, "answers.diverged": 0.0,
                       "answers.bad": 0.0, "answers.passed": 1.0}


def test_the_parent_is_finished_only_when_every_planned_attempt_has_a_final_record():
    info = RunInfo.model_validate({"run_id": "r1", "sweep": "s", "sweep_file": "/s.yaml", "hosts": ["h"],
                                   "attempts": [{"key": "k-a", "experiment": "a", "round": 1, "order": 0},
                                                {"key": "k-b", "experiment": "b", "round": 1, "order": 1}]})
    done = trackfacts.run_entry("r1", info, [record("a"), record("b", status="crashed")])
    assert done.status == trackfacts.FINISHED and done.tags["left"] == "0" and done.tags["ok"] == "1"
    assert done.params == {"sweep": "s", "sweep_file": "/s.yaml"} and done.tags[trackfacts.KIND] == "run"
    left = trackfacts.run_entry("r1", info, [record("a"), record("b", status="aborted")])
    assert left.status == trackfacts.KILLED and left.tags["left"] == "1"
    assert trackfacts.run_entry("r1", info, [], live=True).status == trackfacts.RUNNING


# ---------------------------------------------------------------------------- without mlflow


def test_export_without_mlflow_installed_is_a_clear_config_error(tmp_path, monkeypatch):
    from harness.tracker.mlflowapi import MlflowTracker

    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` now fails, as it does when not installed
    with pytest.raises(ConfigError, match="needs the mlflow package") as caught:
        MlflowTracker("http://127.0.0.1:5000")
    assert "pip install 'harness[mlflow]'" in (caught.value.hint or "")
    (tmp_path / "results" / "r1").mkdir(parents=True)
    result = CliRunner().invoke(app, ["export", "r1", "--mlflow", "http://127.0.0.1:5000", "--results-dir",
                                      str(tmp_path / "results")])
    assert result.exit_code == 2, result.output
    assert "needs the mlflow package" in result.output and "pip install 'harness[mlflow]'" in result.output
    assert "Traceback" not in result.output


def test_a_sweep_asked_to_log_to_mlflow_without_it_refuses_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"h": {"address": "local", "repo": str(tmp_path),
                                                                         "python": sys.executable}}}))
    (tmp_path / "e.yaml").write_text(yaml.safe_dump({"name": "e", "backend": "flashinfer-mla",
                                                     "model": {"path": "/m"}, "server": {"tp": 1}}))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "experiments": ["e.yaml"]}))
    results = tmp_path / "results"
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "s.yaml"), "--hosts-file", str(tmp_path / "hosts.yaml"),
                                      "--results-dir", str(results), "--mlflow", "http://127.0.0.1:5000"])
    assert result.exit_code == 2 and "pip install 'harness[mlflow]'" in result.output, result.output
    assert not any(results.glob("*/run.json")), "a run was started"


def test_the_harness_imports_and_runs_without_importing_mlflow():
    code = ("import sys; sys.modules['mlflow'] = None\n"  # as if not installed: any import of it fails
            "from typer.testing import CliRunner\nfrom harness.cli.app import app\n"
            "r = CliRunner().invoke(app, ['export', '--help'])\nassert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['mlflow']"  # only the stand-in this test put there


# ---------------------------------------------------------------------------- exporting again (a tracker in memory)


class MemoryTracker:
    """MlflowTracker's surface over a dict: what a tracking server keeps of runs, deletion included."""

    def __init__(self, fail_upload: int = 0):
        self.runs: dict[str, dict] = {}
        self.fail_upload = fail_upload  # this many uploads fail, as a tracker that went away would

    def experiment(self, name):
        return "1"

    def runs_tagged(self, experiment_id, tag, value):
        return [TrackedRun(rid, r["status"], dict(r["tags"]), dict(r["params"]), dict(r["metrics"]))
                for rid, r in self.runs.items() if not r["deleted"] and r["tags"].get(tag) == value]

    def start_run(self, experiment_id, name, tags, start_ms):
        rid = f"run{len(self.runs)}"
        self.runs[rid] = {"status": "RUNNING", "tags": dict(tags), "params": {}, "metrics": {}, "deleted": False}
        return rid

    def log(self, run_id, *, params=None, metrics=(), tags=None, timestamp_ms):
        run = self.runs[run_id]
        assert not set(params or {}) & set(run["params"]), "MLflow refuses a param logged twice"
        run["params"].update(params or {})
        run["tags"].update(tags or {})
        run["metrics"].update({m.key: m.value for m in metrics})

    def upload(self, run_id, folder):
        if self.fail_upload:
            self.fail_upload -= 1
            raise TrackerError("MLflow at memory: uploading artifacts failed: gone")

    def set_status(self, run_id, status, end_ms=None):
        self.runs[run_id]["status"] = status

    def delete(self, run_id):
        self.runs[run_id]["deleted"] = True

    def url(self, experiment_id, run_id):
        return None

    def active(self, kind):
        return [r for r in self.runs.values() if not r["deleted"] and r["tags"][trackfacts.KIND] == kind]


def stored_run(tmp_path, *recs: Record) -> ResultsStore:
    store = ResultsStore(tmp_path / "results")
    for rec in recs:
        store.write_record(store.new_attempt_dir(rec.run_id, rec.experiment, rec.attempt), rec)
    return store


def test_exporting_again_adds_nothing_and_a_child_cut_short_is_replaced(tmp_path):
    store = stored_run(tmp_path, record("a", metrics=bench(70.0, 72.0)), record("b", status="crashed"))
    tracker = MemoryTracker(fail_upload=1)
    with pytest.raises(TrackerError):
        export_run(tracker, store, "r1", "x")  # a's child is made, then the tracker fails mid-way
    assert len(tracker.active("attempt")) == 1
    summary = export_run(tracker, store, "r1", "x")
    assert (summary.logged, summary.replaced, summary.unchanged) == (1, 1, 0)
    again = export_run(tracker, store, "r1", "x")
    assert (again.logged, again.replaced, again.unchanged, again.updated) == (0, 0, 2, 0)
    assert len(tracker.active("run")) == 1 and len(tracker.active("attempt")) == 2
    parent = next(rid for rid, r in tracker.runs.items() if r["tags"][trackfacts.KIND] == "run")
    assert all(c["tags"][trackfacts.PARENT] == parent and trackfacts.RECORD_SHA in c["tags"]
               for c in tracker.active("attempt"))


def test_a_changed_record_is_logged_anew_and_run_level_facts_are_updated_in_place(tmp_path):
    store = stored_run(tmp_path, record("a", metrics=bench(70.0)), record("b", metrics=bench(71.0)))
    tracker = MemoryTracker()
    export_run(tracker, store, "r1", "x")
    path = store.run_path("r1") / "b" / "01" / "record.json"
    changed = record("b", metrics=bench(71.0), provenance={"gpu": B200})  # now on another GPU: not comparable
    path.write_text(changed.to_json())
    summary = export_run(tracker, store, "r1", "x")
    assert (summary.logged, summary.replaced, summary.unchanged) == (0, 1, 1)
    children = {r["tags"]["harness.attempt_id"]: r for r in tracker.active("attempt")}
    assert len(children) == 2 and children["r1/b/01"]["tags"]["comparability"].startswith("not comparable")
    assert children["r1/a/01"]["tags"]["comparability"] == "baseline"


def test_a_sweep_logging_as_it_goes_says_a_failure_once_and_sends_everything_when_it_ends(tmp_path):
    a, b = record("a", metrics=bench(70.0)), record("b", metrics=bench(71.0))
    store = stored_run(tmp_path, a, b)
    tracker = MemoryTracker(fail_upload=1)
    export = RunExport(tracker, store, "r1", "x")
    export.open(live=True)
    assert [r["status"] for r in tracker.active("run")] == ["RUNNING"]
    warnings: list[str] = []
    live = LiveExport(export, warn=warnings.append)
    live.submit(a)  # cut short by the failing upload: said, and no more live logging
    live.submit(b)
    summary = live.close()  # the whole run once more
    assert len(warnings) == 1 and "tried again when the sweep ends" in warnings[0]
    assert (summary.logged, summary.replaced, summary.unchanged) == (1, 1, 0)
    assert len(tracker.active("attempt")) == 2 and [r["status"] for r in tracker.active("run")] == ["FINISHED"]


def test_runs_two_exports_made_at_once_are_folded_into_one_parent_and_one_child_per_attempt(tmp_path):
    store = stored_run(tmp_path, record("a", metrics=bench(70.0)), record("b", metrics=bench(71.0)))
    tracker = MemoryTracker()
    export_run(tracker, store, "r1", "x")
    twins = {rid: f"twin-{rid}" for rid in tracker.runs}  # what a second export, started at the same time, made
    for rid, twin in twins.items():
        run = copy.deepcopy(tracker.runs[rid])
        if trackfacts.PARENT in run["tags"]:
            run["tags"][trackfacts.PARENT] = twins[run["tags"][trackfacts.PARENT]]
        tracker.runs[twin] = run
    assert (len(tracker.active("run")), len(tracker.active("attempt"))) == (2, 4)
    summary = export_run(tracker, store, "r1", "x")
    assert (len(tracker.active("run")), len(tracker.active("attempt"))) == (1, 2) and summary.unchanged == 2
    parent = next(rid for rid, r in tracker.runs.items() if not r["deleted"] and r["tags"][trackfacts.KIND] == "run")
    assert all(c["tags"][trackfacts.PARENT] == parent for c in tracker.active("attempt"))
