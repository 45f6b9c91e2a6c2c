"""MLflow export end to end: a real tracking server on loopback (`mlflow server`, sqlite and a local artifact
folder), one simulated sweep run with `--mlflow` (logged as it goes), then `harness export` of that run twice,
read back with MlflowClient: one parent, a child per attempt, the params, per-repeat metrics and tags the
records hold. docs/tracker.md is the user's page of what is checked here."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import PATCHES, wait_until
from tests.integration.test_sweep import HARNESS, local_hosts
from tests.support.sshd import free_port

# One tracking server and one sweep for the module: a parallel run keeps its tests on one worker. mlflow is
# imported by the tests that use it, not at collection (seconds on every worker of every test run).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("mlflow"),
              pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                 reason="the `test` extra installs mlflow (pyproject.toml)")]

QUIET = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
         "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory) -> str:
    """`mlflow server` on a free loopback port, up when its /health answers; the whole process group ends
    with the module."""
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = open(d / "server.log", "w")
    # No job runner: it starts a pool of consumer processes this test has no use for (seconds of start-up).
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{d / 'db.sqlite'}",
                             "--artifacts-destination", str(d / "artifacts"), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            try:  # the server's exit is the event awaited between two polls
                proc.wait(0.2)
                pytest.fail(f"mlflow server exited {proc.returncode}:\n{(d / 'server.log').read_text()[-3000:]}")
            except subprocess.TimeoutExpired:
                pass
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def experiment_doc(name: str, backend: str, **over) -> dict:
    doc = {"name": name, "backend": backend, "model": {"path": "/models/GLM-5-NVFP4"},
           "backend_patches": {"flashinfer-mla-gather-cast": ["sim_flashinfer_mla_gather_cast"]},
           "server": {"port": "auto", "tp": 2, "kv_cache_dtype": "fp8_e4m3"},
           "bench": [{"name": "bs1", "num_prompts": 2, "input_len": 16, "output_len": 8, "max_concurrency": 1,
                      "repeats": 2}],
           "timeouts": {"ready": 60, "no_progress": 30, "stop_grace": 5}}
    doc.update(over)
    return doc


def client(url: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(url)


@dataclass
class LiveSweep:
    results: Path
    run_id: str
    proc: subprocess.CompletedProcess
    seen_live: dict  # what MLflow held while the sweep was still running


@pytest.fixture(scope="module")
def live_sweep(tracking_server, tmp_path_factory) -> LiveSweep:
    """`harness sweep --mlflow`: refused at the start (cutlass_mla on sm90), ok (with a patch set, two repeats),
    then a server that never gets ready. Once the ok attempt's child is in MLflow — while the sweep still
    waits on the hung server, so it got there as the sweep went — Ctrl-C ends the sweep."""
    tmp = tmp_path_factory.mktemp("sweep")
    hosts = local_hosts(tmp, {"h": "sm90"})
    (tmp / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {n: h.model_dump(mode="json") for n, h in hosts.items()}}))
    docs = {"refused": experiment_doc("refused", "cutlass_mla"),
            "ok": experiment_doc("ok", "flashinfer-mla-gather-cast", server={
                "port": "auto", "tp": 2, "kv_cache_dtype": "fp8_e4m3", "env": {"SGLANG_SIM_STARTUP_SCALE": "0"}}),
            "hang": experiment_doc("hang", "flashinfer-mla", server={
                "port": "auto", "tp": 2, "env": {"SGLANG_SIM_HANG_AFTER": "server-args"}},
                timeouts={"ready": 300, "no_progress": 300, "stop_grace": 5})}
    for name, doc in docs.items():
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    sweep = tmp / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "nightly", "experiments": [f"{n}.yaml" for n in docs], "baseline": "ok"}))
    results = tmp / "results"
    proc = subprocess.Popen(HARNESS + ["sweep", str(sweep), "--results-dir", str(results), "--patches-dir",
                                       str(PATCHES), "--mlflow", tracking_server],
                            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **QUIET})
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "start hang" in line:
            break
    run_id = next(p.name for p in results.iterdir() if (p / "run.json").exists())
    mlflow = client(tracking_server)
    exp = mlflow.get_experiment_by_name("nightly")
    found: list = []

    def ok_child_logged() -> bool:
        found[:] = mlflow.search_runs([exp.experiment_id], f"tags.`harness.attempt_id` = '{run_id}/ok/01'")
        return bool(found)

    assert wait_until(ok_child_logged, timeout=60) is not None, "".join(lines)
    seen = {"sweep_running": proc.poll() is None, "hang_recorded": (results / run_id / "hang" / "01" / "record.json").exists(),
            "ok_metrics": dict(found[0].data.metrics), "ok_status": found[0].info.status}
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    proc.wait(120)
    return LiveSweep(results, run_id, subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + rest),
                     seen)


def runs_of(url: str, experiment: str, run_id: str) -> tuple[list, list]:
    """(parents, children) of a harness run in an MLflow experiment, deleted runs left out."""
    from mlflow.entities import ViewType

    mlflow = client(url)
    exp = mlflow.get_experiment_by_name(experiment)
    runs = mlflow.search_runs([exp.experiment_id], f"tags.`harness.run_id` = '{run_id}'",
                              run_view_type=ViewType.ACTIVE_ONLY)
    return ([r for r in runs if r.data.tags["harness.kind"] == "run"],
            [r for r in runs if r.data.tags["harness.kind"] == "attempt"])


def records(sweep: LiveSweep) -> dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text())
            for p in (sweep.results / sweep.run_id).glob("*/*/record.json")}


def test_the_sweep_logs_each_attempt_as_it_is_recorded(live_sweep, tracking_server):
    seen = live_sweep.seen_live
    assert seen["sweep_running"] and not seen["hang_recorded"], "the ok attempt's child came only at the end"
    assert seen["ok_status"] == "FINISHED" and seen["ok_metrics"]["bs1.output_throughput.median"] > 0
    assert live_sweep.proc.returncode == 130, live_sweep.proc.stdout
    parents, children = runs_of(tracking_server, "nightly", live_sweep.run_id)
    assert len(parents) == 1 and len(children) == 3, live_sweep.proc.stdout
    # interrupted: the hang attempt is not final, so the run is not finished
    assert parents[0].info.status == "KILLED" and parents[0].data.tags["left"] == "1"
    assert parents[0].info.run_name == f"nightly {live_sweep.run_id}"  # named once run.json said its sweep
    by_name = {c.data.params["experiment"]: c for c in children}
    assert {n: c.info.status for n, c in by_name.items()} == {"refused": "FAILED", "ok": "FINISHED", "hang": "KILLED"}
    assert by_name["hang"].data.tags["status"] == "aborted"


def test_export_twice_gives_one_parent_and_a_child_per_attempt_with_the_records_facts(live_sweep, tracking_server,
                                                                                     monkeypatch):
    from typer.testing import CliRunner

    from harness.cli.app import app

    for name, value in QUIET.items():
        monkeypatch.setenv(name, value)
    argv = ["export", live_sweep.run_id, "--mlflow", tracking_server, "--experiment", "exported",
            "--results-dir", str(live_sweep.results)]
    first = CliRunner().invoke(app, argv)
    assert first.exit_code == 0, first.output
    assert "3 logged" in first.output
    second = CliRunner().invoke(app, argv)
    assert second.exit_code == 0 and "3 already there" in second.output, second.output

    mlflow = client(tracking_server)
    parents, children = runs_of(tracking_server, "exported", live_sweep.run_id)
    assert len(parents) == 1 and len(children) == len(records(live_sweep)) == 3
    parent = parents[0]
    assert parent.data.params == {"sweep": "nightly", "sweep_file": str(live_sweep.results.parent / "sweep.yaml")}
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)

    recs = records(live_sweep)
    child = {c.data.params["experiment"]: c for c in children}
    ok, rec = child["ok"], recs["ok"]
    prov = rec["provenance"]
    patch_set, digest = next(iter(prov["patch_sets"].items()))
    assert patch_set == "sim_flashinfer_mla_gather_cast"
    want = {"backend": "flashinfer-mla-gather-cast", "patch_sets": patch_set, f"patch_set.{patch_set}": digest,
            "version.server": prov["server_version"], "version.flashinfer": prov["flashinfer_version"],
            "version.harness": prov["harness_version"], "version.python": prov["agent_python"],
            "gpu": f"{prov['gpu'][0]['name']} x{len(prov['gpu'])}", "server.tp-size": "2",
            "server.kv-cache-dtype": "fp8_e4m3", "server.attention-backend": "flashinfer",
            "env.SGLANG_SIM_STARTUP_SCALE": "0"}
    assert want.items() <= ok.data.params.items(), ok.data.params
    want = {"status": "ok", "host": "h", "round": "1", "try": "1", "comparability": "baseline",
            "harness.attempt_id": f"{live_sweep.run_id}/ok/01"}
    assert want.items() <= ok.data.tags.items(), ok.data.tags
    samples = rec["metrics"]["bs1"]["samples"]
    assert len(samples["output_throughput"]) == 2
    for name, values in samples.items():  # every bench key the record keeps, one step per repeat
        history = mlflow.get_metric_history(ok.info.run_id, f"bs1.{name}")
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == list(enumerate(values)), name
        assert ok.data.metrics[f"bs1.{name}.median"] == rec["metrics"]["bs1"][name]
    refused = child["refused"]
    assert refused.data.tags["status"] == "preflight-failed" and "cutlass_mla" in refused.data.tags["error"]
    artifacts = {a.path for a in mlflow.list_artifacts(ok.info.run_id)} | {
        a.path for a in mlflow.list_artifacts(ok.info.run_id, "logs")}
    assert {"record.json", "logs/server.log.txt"} <= artifacts
    hang_logs = {a.path for a in mlflow.list_artifacts(child["hang"].info.run_id, "logs")}
    assert hang_logs == {"logs/server.log.txt"}  # interrupted before any bench ran

    # Exporting into the sweep's own experiment, where it logged as it went: nothing is added.
    again = CliRunner().invoke(app, argv[:4] + ["--results-dir", str(live_sweep.results)])
    assert again.exit_code == 0 and "3 already there" in again.output, again.output
    assert [len(x) for x in runs_of(tracking_server, "nightly", live_sweep.run_id)] == [1, 3]


def test_a_record_that_changed_replaces_its_child(live_sweep, tracking_server, monkeypatch, tmp_path):
    """A provisional record that became final (or a recovery noted in it) is logged anew, never twice."""
    from typer.testing import CliRunner

    from harness.cli.app import app

    for name, value in QUIET.items():
        monkeypatch.setenv(name, value)
    results = tmp_path / "results"
    shutil.copytree(live_sweep.results / live_sweep.run_id, results / live_sweep.run_id)
    argv = ["export", live_sweep.run_id, "--mlflow", tracking_server, "--experiment", "changed",
            "--results-dir", str(results)]
    assert CliRunner().invoke(app, argv).exit_code == 0
    before = {c.data.params["experiment"]: c.info.run_id for c in runs_of(tracking_server, "changed", live_sweep.run_id)[1]}
    path = results / live_sweep.run_id / "hang" / "01" / "record.json"
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, "abort_reason": "noted later"}, indent=2) + "\n")
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0 and "1 replaced" in result.output and "2 already there" in result.output, result.output
    after = {c.data.params["experiment"]: c.info.run_id for c in runs_of(tracking_server, "changed", live_sweep.run_id)[1]}
    assert after["hang"] != before["hang"] and {k: v for k, v in after.items() if k != "hang"} == {
        k: v for k, v in before.items() if k != "hang"}


def test_an_unreachable_tracker_is_one_clear_error_and_a_sweep_asked_to_log_there_runs_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from harness.cli.app import app

    for name, value in QUIET.items():
        monkeypatch.setenv(name, value)
    results = tmp_path / "results"
    (results / "r1").mkdir(parents=True)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(app, ["export", "r1", "--mlflow", url, "--results-dir", str(results)])
    assert result.exit_code == 1, result.output
    assert f"MLflow at {url}" in result.output and "Traceback" not in result.output

    # No `gpus:`: a sweep asks the host for them (its agent, shipped into the host's workdir) before it plans.
    hosts = {n: h.model_copy(update={"gpus": None}) for n, h in local_hosts(tmp_path, {"h": "sm90"}).items()}
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {n: h.model_dump(mode="json") for n, h in hosts.items()}}))
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(experiment_doc("e", "flashinfer-mla")))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "experiments": ["e.yaml"]}))
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "s.yaml"), "--hosts-file", str(tmp_path / "hosts.yaml"),
                                      "--results-dir", str(results), "--patches-dir", str(PATCHES), "--mlflow", url])
    assert result.exit_code == 1 and f"MLflow at {url}" in result.output, result.output
    assert not list(results.glob("*/run.json")) and not list(results.glob("*/*/*/record.json")), "the sweep ran"
    assert not (tmp_path / "h-work").exists(), "the host was asked for its GPUs before the tracker"
