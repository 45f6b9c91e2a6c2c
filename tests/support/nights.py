"""Two simulated nights of a sweep, written through the results store as a sweep writes them: each record
with every key metric a bench case keeps, derived from one decode speed per repeat the way bench_serving's
numbers hang together (throughputs from the duration, latencies from the inter-token latency), 2 rounds × 3
repeats per case. Tonight can make one backend slower. Used by tests/unit/test_nights.py and
tests/integration/test_nights_cli.py."""

from __future__ import annotations

import random

from harness.results.metrics import summarize
from harness.results.schemas import PlannedEntry, Record, RunInfo
from harness.results.store import ResultsStore

GPU = [{"name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771}] * 8
# backend → (inter-token latency ms, time to first token ms) at concurrency 1: the simulated MLA backends
BACKENDS = {"sim-flashinfer-mla": (11.8, 84.0), "sim-triton": (14.6, 97.0), "sim-flashmla": (10.9, 80.0),
            "sim-fa3": (12.4, 88.0)}
CASES = {"c1": 1, "c8": 8}  # bench case → concurrency
PROMPTS, INPUT_LEN, OUTPUT_LEN = 64, 1024, 256
ROUNDS, REPEATS = 2, 3
CRASHES = "sim-fp8-kv-into-mla-plan"  # crashes warmup in both nights
KEY = "ValueError: Exactly one of ckv_scale or ckv_scale_arr is required when kv_data_type is FP8."


def jsonl_row(itl: float, ttft: float, concurrency: int, jitter: float) -> dict[str, float]:
    """One repeat's bench_serving numbers from its decode speed: the tails a little noisier than the medians."""
    e2e = ttft + itl * (OUTPUT_LEN - 1)
    duration = PROMPTS / concurrency * e2e / 1000
    row = {"duration": duration, "completed": PROMPTS, "concurrency": concurrency,
           "total_output_tokens": PROMPTS * OUTPUT_LEN,
           "request_throughput": PROMPTS / duration, "input_throughput": PROMPTS * INPUT_LEN / duration,
           "output_throughput": PROMPTS * OUTPUT_LEN / duration,
           "total_throughput": PROMPTS * (INPUT_LEN + OUTPUT_LEN) / duration, "median_e2e_latency_ms": e2e}
    for name, median in (("ttft", ttft), ("itl", itl), ("tpot", itl * 1.01)):
        row.update({f"median_{name}_ms": median, f"mean_{name}_ms": median * 1.03,
                    f"p99_{name}_ms": median * (1.4 + jitter)})
    return row


def speeds(seed: int) -> list[tuple[float, float]]:
    """Each repeat's (speed factor, tail jitter): a quiet box, about 1 % CV."""
    rng = random.Random(seed)
    return [(rng.gauss(1.0, 0.01), rng.gauss(0.0, 0.01)) for _ in range(ROUNDS * REPEATS)]


def write_night(store: ResultsStore, run: str, *, slower: str | None = None, factor: float = 1.2,
                tonight: bool = False, commit: str = "a" * 40) -> None:
    """Night A (`tonight=False`) or B: the same sweep. B re-measures every backend (its repeats in another order,
    each a hair off: an unchanged backend measures the same); `slower` decodes `factor` times slower in B (its
    patch set changed). One experiment crashes in both nights; one is only in A, one only in B."""
    exps = list(BACKENDS) + (["sim-trtllm_mla"] if tonight else ["sim-cutlass_mla"])
    plan = [PlannedEntry(key=f"{exp}-{rnd}", experiment=exp, round=rnd, order=i)
            for i, (rnd, exp) in enumerate((r, e) for r in range(ROUNDS) for e in exps + [CRASHES])]
    store.write_run(RunInfo(run_id=run, sweep="nightly", sweep_file="/x/nightly.yaml", baseline="sim-flashinfer-mla",
                            attempts=plan))
    for i, exp in enumerate(exps):
        itl, ttft = BACKENDS.get(exp, (11.0, 82.0))
        draws = speeds(i)
        if tonight:
            draws = [(s * (1 + (-1) ** k * 0.001), j) for k, (s, j) in enumerate(reversed(draws))]
        slow = factor if exp == slower else 1.0
        patch = ("ff" if tonight and exp == slower else "ee") * 32
        for rnd in range(ROUNDS):
            cases = {}
            for case, conc in CASES.items():
                load = 1 + 0.08 * (conc - 1)  # a fuller batch decodes each token slower
                cases[case] = summarize([jsonl_row(itl * load * s * slow, ttft * load * s * slow, conc, j)
                                         for s, j in draws[rnd * REPEATS:(rnd + 1) * REPEATS]])
            write(store, Record(run_id=run, experiment=exp, attempt=f"{rnd + 1:02d}", host="sim-h200", backend=exp,
                                status="ok", metrics=cases, key=f"{exp}-{rnd}", round=rnd,
                                provenance=provenance(commit, {f"{exp}-tune": patch})))
    write(store, Record(run_id=run, experiment=CRASHES, attempt="01", host="sim-h200", key=f"{CRASHES}-0", round=0,
                        backend="sim-flashinfer-mla", status="crashed", provenance=provenance(commit, {}),
                        verdict={"verdict": "crash", "category": "kernel-error", "key_line": KEY,
                                 "phase": "cuda-graph-capture"}))


def provenance(commit: str, patch_sets: dict[str, str]) -> dict:
    return {"gpu": GPU, "server_version": "0.5.23", "flashinfer_version": "0.7.2", "base_commit": commit,
            "patch_sets": patch_sets, "harness_version": "0.1.0", "arch": "sm90", "hostname": "box-1"}


def write(store: ResultsStore, rec: Record) -> None:
    store.write_record(store.new_attempt_dir(rec.run_id, rec.experiment, rec.attempt), rec)


def two_nights(store: ResultsStore, *, slower: str | None = "sim-triton", factor: float = 1.2) -> tuple[str, str]:
    """Last night and tonight (SGLang's main moved on between them); tonight `slower` is `factor` slower."""
    write_night(store, "night-a", commit="a" * 40)
    write_night(store, "night-b", slower=slower, factor=factor, tonight=True, commit="b" * 40)
    return "night-a", "night-b"
