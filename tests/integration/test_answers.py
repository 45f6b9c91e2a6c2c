"""The answer check end to end: a sweep over a simulated target of stock, a correct patch set and a patch set
that makes the attention kernels read the KV cache slightly mis-scaled (tests/integration/patches/); `harness
compare` passes the first two against the baseline and fails the third, which benchmarks just as well."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli.views import comparison_rows
from harness.experiments.config import HostConfig
from harness.experiments.files import read_sweep_file
from harness.experiments.plan import plan_sweep
from harness.render import tableformats
from harness.results.metrics import OUTPUT_THROUGHPUT
from harness.results.store import ResultsStore, new_run_id
from harness.run.runfile import write_run_file
from harness.run.scheduler import Scheduler
from harness.sim import init_target
from tests.conftest import PATCHES
from tests.integration.test_sweep import Quiet

pytestmark = pytest.mark.integration

TEST_PATCHES = Path(__file__).resolve().parent / "patches"
ANSWERS = {"prompts": 4, "input_len": 16, "output_len": 12, "seed": 7, "top_logprobs": 5}


def experiment(tmp_path: Path, name: str, **over) -> str:
    doc = {"name": name, "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
           "backend_patches": {"flashinfer-mla-gather-cast": ["sim_flashinfer_mla_gather_cast"]},
           "server": {"port": "auto", "tp": 1, "kv_cache_dtype": "fp8_e4m3",
                      "env": {"SGLANG_SIM_STARTUP_SCALE": "0.3"}},
           "bench": [{"name": "bs1", "num_prompts": 1, "input_len": 8, "output_len": 4, "max_concurrency": 1}],
           "answers": ANSWERS, "timeouts": {"ready": 60, "no_progress": 30, "bench": 60, "stop_grace": 5}}
    doc.update(over)
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return f"{name}.yaml"


def test_compare_passes_stock_and_a_correct_patch_and_fails_a_wrong_kv_scale(tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES / "sim_flashinfer_mla_gather_cast", patches / "sim_flashinfer_mla_gather_cast")
    shutil.copytree(TEST_PATCHES / "sim_kv_scale_drift", patches / "sim_kv_scale_drift")
    t = init_target(tmp_path / "h200", arch="sm90")
    hosts = {"h200": HostConfig(address="local", repo=str(t.repo), python=str(t.python), gpus=8, arch="sm90",
                                workdir=str(tmp_path / "work"))}
    files = [experiment(tmp_path, "stock"),
             experiment(tmp_path, "gather", backend="flashinfer-mla-gather-cast"),
             experiment(tmp_path, "drift", patches=["sim_kv_scale_drift"])]
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "answers", "experiments": files, "baseline": "stock"}))
    store, run_id = ResultsStore(tmp_path / "results"), new_run_id()
    plan = plan_sweep(read_sweep_file(sweep), patches, hosts)
    write_run_file(store, run_id, plan, hosts)
    Scheduler(plan, hosts, store, run_id, reporter=Quiet()).run()

    records = {r.experiment: r for r in store.final_records(run_id)}
    assert {name: r.status for name, r in records.items()} == {"stock": "ok", "gather": "ok", "drift": "ok"}, \
        {name: r.error for name, r in records.items()}
    for name, rec in records.items():  # the record keeps its own answer facts, and answers.json is beside it
        # 4 prompts, sent twice (prefix_hit, the default): the second time each prefill is a prefix-cache hit
        assert rec.answers is not None and rec.answers.prompts == 8 and rec.answers.positions == 96
        doc = json.loads((store.run_path(run_id) / name / rec.attempt / "answers.json").read_text())
        assert [len(p["output_ids"]) for p in doc["prompts"]] == [12] * 8 and doc["settings"]["seed"] == 7
        assert [p.get("pass", 1) for p in doc["prompts"]] == [1] * 4 + [2] * 4
        assert [p["input_ids"] for p in doc["prompts"][:4]] == [p["input_ids"] for p in doc["prompts"][4:]]
        stages = list(rec.timings)  # in the order the stages ran
        assert stages.index("answers_s") < stages.index("bench_s"), stages  # the check first: see attempt.py
    assert "verdict" not in json.dumps(records["drift"].model_dump(mode="json")["answers"])

    p = subprocess.run([sys.executable, "-m", "harness", "compare", run_id, "--format", "json",
                        "--results-dir", str(store.root)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = {r["experiment"]: r for r in json.loads(p.stdout)["rows"]}
    assert rows["stock"]["answers"] == "ref"
    assert rows["gather"]["answers"] == "✓ 100% ×0.00"
    gather, drift = rows["gather"]["answer_verdict"], rows["drift"]["answer_verdict"]
    # the simulated model answers the prefix-hit pass exactly as the cold one: no noise, the yardstick's floor
    assert gather["yardstick"] == 0 and drift["yardstick"] == 0
    assert gather["passed"] and gather["bad"] == 0 and gather["spread"] == 0 and gather["max_dlogprob"] == 0
    assert not drift["passed"] and drift["ratio"] > 1.75, drift
    assert rows["drift"]["answers"].startswith("✗ ")
    _, table_rows, _, _ = comparison_rows([(store, run_id)], baseline=None, metric=OUTPUT_THROUGHPUT)
    md = tableformats.to_markdown(table_rows, OUTPUT_THROUGHPUT).splitlines()
    header = md[2].split(" | ")
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ")[header.index("answers")] for line in md[4:]}
    assert cells == {"stock": "ref", "gather": "✓ 100% ×0.00", "drift": rows["drift"]["answers"]}, md
