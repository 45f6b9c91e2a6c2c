"""The bench stage's two ways to run SGLang's client against a simulated target: all runs in one process of the
target's Python (the default: the client's imports paid once) and a process per run. Same cases, repeats and
result lines either way; the agent's attempt folder shows which ran."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.experiments.config import HostConfig
from harness.experiments.files import read_sweep_file
from harness.experiments.plan import plan_sweep
from harness.results.store import ResultsStore, new_run_id
from harness.run.runfile import write_run_file
from harness.run.scheduler import Scheduler
from harness.sim import init_target
from tests.conftest import PATCHES
from tests.integration.test_sweep import Quiet

pytestmark = pytest.mark.integration


def experiment(tmp_path: Path, name: str, clients: str) -> str:
    doc = {"name": name, "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
           "server": {"port": "auto", "tp": 1, "kv_cache_dtype": "fp8_e4m3",
                      "env": {"SGLANG_SIM_STARTUP_SCALE": "0.3"}},
           "bench": [{"name": "bs1", "num_prompts": 1, "input_len": 8, "output_len": 4, "max_concurrency": 1},
                     {"name": "bs2", "num_prompts": 2, "input_len": 8, "output_len": 4, "max_concurrency": 2,
                      "repeats": 2}],
           "bench_clients": clients,
           "timeouts": {"ready": 60, "no_progress": 30, "bench": 60, "stop_grace": 5}}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return f"{name}.yaml"


def test_one_process_and_a_process_per_run_measure_the_same_cases(tmp_path):
    t = init_target(tmp_path / "h200", arch="sm90")
    work = tmp_path / "work"
    hosts = {"h200": HostConfig(address="local", repo=str(t.repo), python=str(t.python), gpus=8, arch="sm90",
                                workdir=str(work))}
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "clients", "experiments": [
        experiment(tmp_path, "one", "one-process"), experiment(tmp_path, "each", "per-run")]}))
    store, run_id = ResultsStore(tmp_path / "results"), new_run_id()
    plan = plan_sweep(read_sweep_file(sweep), PATCHES, hosts)
    write_run_file(store, run_id, plan, hosts)
    Scheduler(plan, hosts, store, run_id, reporter=Quiet()).run()

    records = {r.experiment: r for r in store.final_records(run_id)}
    assert {n: r.status for n, r in records.items()} == {"one": "ok", "each": "ok"}, \
        {n: r.error for n, r in records.items()}
    for rec in records.values():
        assert {case: m.repeats for case, m in rec.metrics.items()} == {"bs1": 1, "bs2": 2}
        assert all(len(m.samples["completed"]) == m.repeats for m in rec.metrics.values())
    drivers = sorted(p.parent.name for p in work.rglob("bench-driver.plan.json"))
    assert len(drivers) == 1, drivers  # only the one-process attempt ran the driver
    status = next(work.rglob("bench-driver.status.jsonl")).read_text().splitlines()
    assert len(status) == 2 * 5  # five runs: bs1 once, bs2 twice, each after its warm-up; a start and an end
    for rec in records.values():  # the warm-ups ran either way, kept beside the metrics, never in them
        assert rec.bench_cases is not None and set(rec.bench_cases) == {"bs1", "bs2"}
        assert all(c.warmup and c.warmup_median_ttft_ms is not None for c in rec.bench_cases.values())
