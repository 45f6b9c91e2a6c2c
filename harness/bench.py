"""Benchmark command lines for the host's own SGLang clients, and parsing of their JSONL (pure)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable

from .config import BenchCase, Experiment

# The keys a record keeps per case (SGLang's own names); everything else stays in the JSONL file.
KEY_METRICS = (
    "output_throughput", "request_throughput", "input_throughput", "total_throughput",
    "median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms",
    "median_itl_ms", "mean_itl_ms", "p99_itl_ms",
    "median_tpot_ms", "mean_tpot_ms", "p99_tpot_ms",
    "median_e2e_latency_ms", "duration", "completed", "total_output_tokens", "concurrency",
)


def bench_serving_argv(python: str, exp: Experiment, case: BenchCase) -> list:
    """`python -m sglang.bench_serving …` against the attempt's server; `--output-file` is added on the host."""
    srv = exp.server
    host = "127.0.0.1" if srv.host in ("0.0.0.0", "::", "") else srv.host
    from .spec import port_arg

    argv = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", host, "--port", port_arg(srv.port),
            "--model", exp.model.path, "--dataset-name", case.dataset, "--num-prompts", str(case.num_prompts),
            "--random-input-len", str(case.input_len), "--random-output-len", str(case.output_len),
            "--seed", str(case.seed), "--disable-tqdm"]
    if exp.model.tokenizer:
        argv += ["--tokenizer", exp.model.tokenizer]
    if case.dataset_path:
        argv += ["--dataset-path", case.dataset_path]
    if case.range_ratio is not None:
        argv += ["--random-range-ratio", str(case.range_ratio)]
    if case.max_concurrency is not None:
        argv += ["--max-concurrency", str(case.max_concurrency)]
    if case.request_rate is not None:
        argv += ["--request-rate", str(case.request_rate)]
    if case.warmup_requests is not None:
        argv += ["--warmup-requests", str(case.warmup_requests)]
    return argv + list(case.extra_args)


def parse_jsonl(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def summarize(rows: Iterable[dict]) -> dict:
    """Key metrics of one case over its repeats: the median, plus every repeat's value in `samples`."""
    rows = list(rows)
    out: dict = {"repeats": len(rows), "samples": {}}
    for key in KEY_METRICS:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        if values:
            out[key] = statistics.median(values)
            out["samples"][key] = values
    return out
