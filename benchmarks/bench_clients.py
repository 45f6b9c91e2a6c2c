"""SGLang's benchmark client run N times: a process per run against one process for all (agent/bench_driver.py).

    python benchmarks/bench_clients.py --python PY --port PORT --model DIR [--runs 4]

PY is a Python with SGLang installed (its `sglang.bench_serving` is what runs), PORT a server that answers
SGLang's API (a live one, or the simulated target: `harness sim` / `.venv/bin/python -m sglang.launch_server`),
DIR a model folder with a tokenizer (the client reads it). Prints the seconds each way took and checks that
both wrote the same number of result lines with the same input token counts (same seeded prompts).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DRIVER = Path(__file__).resolve().parents[1] / "harness" / "agent" / "bench_driver.py"


def client_args(port: int, model: str, out: Path) -> list[str]:
    return ["--backend", "sglang", "--host", "127.0.0.1", "--port", str(port), "--model", model,
            "--dataset-name", "random-ids", "--random-input-len", "64", "--random-output-len", "8",
            "--random-range-ratio", "1.0", "--seed", "1", "--disable-tqdm", "--num-prompts", "4",
            "--max-concurrency", "1", "--output-file", str(out)]


def per_process(python: str, port: int, model: str, runs: int, folder: Path) -> tuple[float, Path]:
    out = folder / "per-process.jsonl"
    t0 = time.monotonic()
    for _ in range(runs):
        with open(folder / "per-process.log", "ab") as log:
            subprocess.run([python, "-m", "sglang.bench_serving", *client_args(port, model, out)], stdout=log,
                           stderr=subprocess.STDOUT, check=True)
    return time.monotonic() - t0, out


def one_process(python: str, port: int, model: str, runs: int, folder: Path) -> tuple[float, Path]:
    out = folder / "one-process.jsonl"
    plan = {"status": str(folder / "status.jsonl"), "runs": [
        {"module": "sglang.bench_serving", "args": client_args(port, model, out), "log": str(folder / "one.log"),
         "output": str(out)} for _ in range(runs)]}
    (folder / "plan.json").write_text(json.dumps(plan))
    t0 = time.monotonic()
    subprocess.run([python, str(DRIVER), str(folder / "plan.json")], check=True)
    return time.monotonic() - t0, out


def summary(out: Path) -> list[int]:
    return [json.loads(line)["total_input_tokens"] for line in out.read_text().splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        each_s, each = per_process(args.python, args.port, args.model, args.runs, folder)
        one_s, one = one_process(args.python, args.port, args.model, args.runs, folder)
        same = summary(each) == summary(one)
        print(f"{args.runs} runs of sglang.bench_serving: a process each {each_s:.1f} s, one process {one_s:.1f} s "
              f"({each_s / one_s:.1f}x); result lines {len(summary(each))} / {len(summary(one))}, "
              f"same input tokens: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
