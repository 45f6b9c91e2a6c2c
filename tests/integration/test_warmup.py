"""Issue 36's done-when, on the simulated target: its server builds a prefill kernel the first time a batch
shape (the concurrency it sees) is used, as a JIT build does. A case's warm-up pass
takes that build, so the measured repeats do not; with `warmup: false` the first measured repeat does.
A cool-down between runs and the GPU state at each case's start and end land in the record."""

from __future__ import annotations

import json
import statistics
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

JIT_S = 0.3  # wall seconds a build takes here (SGLANG_SIM_JIT_BUILD_S is device seconds, at a 0.1 time scale)


def case(name: str, input_len: int, **more: object) -> dict[str, object]:
    # Four prompts at once: the server sees a concurrency of 4, which bench_serving's own single warm-up
    # request never shows it (that one only builds the concurrency-1 kernel).
    return {"name": name, "num_prompts": 4, "max_concurrency": 4, "input_len": input_len, "output_len": 8,
            "range_ratio": 1.0, **more}


def experiment(tmp_path: Path, name: str, bench: list[dict[str, object]], **more: object) -> str:
    doc = {"name": name, "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
           "server": {"port": "auto", "tp": 1, "env": {"SGLANG_SIM_STARTUP_SCALE": "0.3",
                                                       "SGLANG_SIM_JIT_BUILD_S": str(JIT_S * 10)}},
           "bench": bench, "timeouts": {"ready": 60, "no_progress": 30, "bench": 60, "stop_grace": 5}, **more}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return f"{name}.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("warmup")
    t = init_target(tmp_path / "h200", arch="sm90")
    hosts = {"h200": HostConfig(address="local", repo=str(t.repo), python=str(t.python), gpus=8, arch="sm90",
                                workdir=str(tmp_path / "work"))}
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "warmup", "experiments": [
        experiment(tmp_path, "warm", [case("cold", 100, repeats=2, num_prompts=8),  # new: built in its warm-up
                                      case("hit", 64, repeats=2, prefix_cache="hit", seed=5),  # primed, reused
                                      case("cold-again", 100, warmup=False),  # the same shape, built already
                                      case("nowarm", 100, repeats=2, warmup=False, num_prompts=16,
                                           max_concurrency=16)]),  # a new concurrency, no warm-up
        experiment(tmp_path, "paced", [case("short", 16, repeats=2)],
                   cooldown={"until_settled": True, "interval_s": 0.05, "window": 2, "max_s": 5})]}))
    store, run_id = ResultsStore(tmp_path / "results"), new_run_id()
    plan = plan_sweep(read_sweep_file(sweep), PATCHES, hosts)
    write_run_file(store, run_id, plan, hosts)
    Scheduler(plan, hosts, store, run_id, reporter=Quiet()).run()
    records = {r.experiment: r for r in store.final_records(run_id)}
    assert {n: r.status for n, r in records.items()} == {"warm": "ok", "paced": "ok"}, \
        {n: r.error for n, r in records.items()}
    return records, store.run_dir(run_id)


def records_of(run):
    return run[0]


def ttfts(record, name: str) -> list[float]:
    return list(record.metrics[name].samples["median_ttft_ms"])


def test_the_build_lands_in_the_warmup_pass_not_in_the_measured_repeats(run):
    records, _ = run
    rec = records["warm"]
    cold = rec.bench_cases["cold"]
    assert cold.warmup and cold.warmup_s is not None and cold.warmup_s > 0
    measured = statistics.median(ttfts(rec, "cold"))
    assert cold.warmup_median_ttft_ms - measured > JIT_S * 1000 / 2  # the warm-up's TTFT shows the build
    already = statistics.median(ttfts(rec, "cold-again"))  # same shape, built before it ran
    assert abs(measured - already) < JIT_S * 1000 / 3, (measured, already)
    assert rec.metrics["cold"].repeats == 2  # the warm-up is no repeat: the metrics never see it


def test_without_warmup_the_first_measured_repeat_takes_the_build(run):
    records, _ = run
    rec = records["warm"]
    first, second = ttfts(rec, "nowarm")
    assert first - second > JIT_S * 1000 / 2, (first, second)
    assert not rec.bench_cases["nowarm"].warmup and rec.bench_cases["nowarm"].warmup_median_ttft_ms is None


def test_the_server_log_names_each_build_once_and_the_warmup_files_come_back(run):
    records, run_dir = run
    (log,) = run_dir.glob("warm/*/server.log")
    builds = [line.split("Loading JIT ops: ")[1] for line in log.read_text().splitlines()
              if "flashinfer.jit: Loading JIT ops: " in line]
    assert builds and len(builds) == len(set(builds)), builds
    assert any("_bs_8_" in b for b in builds) and any("_bs_16_" in b for b in builds)
    warmup = json.loads((log.parent / "bench-cold.warmup.jsonl").read_text().splitlines()[-1])
    measured = json.loads((log.parent / "bench-cold.jsonl").read_text().splitlines()[-1])
    assert (warmup["completed"], measured["completed"]) == (4, 8)  # one wave at its concurrency, not a pass
    assert not (log.parent / "bench-nowarm.warmup.jsonl").exists()


def test_gpu_state_and_cooldowns_are_kept_per_case(run):
    records, _ = run
    paced = records["paced"].bench_cases["short"]
    assert paced.cooldown_s is not None and paced.cooldown_s > 0 and paced.cooldown_settled is True
    for state in (paced.gpu_start, paced.gpu_end):
        assert state and all(g.sm_mhz and g.temperature_c is not None and g.power_w is not None for g in state)
    assert records["warm"].bench_cases["cold"].cooldown_s is None  # no cool-down asked for: none waited


def test_every_repeat_of_a_case_meets_the_prefix_cache_alike(run):
    """Cold: each repeat draws prompts no earlier run sent (bench_serving's own warm-up request flushed), so no
    repeat finds anything cached; hit: the warm-up sent every prompt, so the first repeat hits like the rest.
    The counts are the server's own `#new-token` / `#cached-token` log lines during each run."""
    rec = records_of(run)["warm"]
    cold, hit = rec.bench_cases["cold"], rec.bench_cases["hit"]
    assert cold.prefix_cache == "cold" and len(set(cold.seeds or [])) == 2 and cold.warmup_seed not in cold.seeds
    measured = [p for p in cold.prefill or [] if p.repeat >= 0]
    # (random prompts may share their first word or two with an earlier one: a chance prefix, not a cached prompt)
    assert [p.repeat for p in measured] == [0, 1] and all(p.hit_share is not None and p.hit_share < 0.02 for p in measured), measured
    assert hit.prefix_cache == "hit" and hit.seeds == [5, 5] and hit.warmup_seed == 5
    shares = {p.repeat: p.hit_share for p in hit.prefill or []}
    # the warm-up prefilled them from nothing (but its first prompt, which bench_serving's own warm-up request sent)
    assert shares[-1] is not None and shares[-1] < 0.5
    assert shares[0] is not None and shares[0] > 0.9 and shares[1] is not None and shares[1] > 0.9, shares
