"""What Slurm adds to an attempt: the same small experiment on a simulated target, N times through the local
transport and N times as Slurm jobs on a real one-node cluster (munged, slurmctld, slurmd started here, as
the tests do; needs root and Debian's slurm packages: scripts/test installs them).

Per attempt through Slurm: submit → agent start (sbatch returned → the agent's hello), end → record (the
agent's final report written → record.json on this machine), and the whole attempt against the local one.

    python benchmarks/slurm_overhead.py [--n 5] [--poll 1.0] [--out benchmarks/results/slurm-overhead.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from harness.sim import init_target  # noqa: E402
from tests.support.slurm import Cluster, slurm_missing  # noqa: E402

EXPERIMENT = {"name": "tiny", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
              "server": {"port": "auto", "tp": 2, "kv_cache_dtype": "fp8_e4m3"},
              "bench": [{"name": "bs1", "num_prompts": 2, "input_len": 16, "output_len": 8, "max_concurrency": 1}],
              "timeouts": {"ready": 60, "no_progress": 30, "stop_grace": 5}}


def run(exp: Path, hosts: Path, host: str, results: Path) -> dict:
    before = set(results.glob("*/*/*/record.json")) if results.exists() else set()
    p = subprocess.run([sys.executable, "-m", "harness", "run", str(exp), "--host", host, "--hosts-file", str(hosts),
                        "--results-dir", str(results), "--patches-dir", str(ROOT / "patches")],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"harness run failed:\n{p.stdout}\n{p.stderr}")
    path, = set(results.glob("*/*/*/record.json")) - before
    rec = json.loads(path.read_text())
    rec["_written"] = path.stat().st_mtime
    return rec


def final_time(shared: Path, rec: dict) -> float:
    """When the agent wrote its final report (its own clock: this machine's), from the job's event file."""
    events = next(shared.glob(f"jobs/{rec['run_id']}/*-{rec['attempt']}/events.jsonl"))
    last = json.loads(events.read_text().splitlines()[-1])
    assert last["event"] == "final"
    return last["t"]


def median_range(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--poll", type=float, default=1.0, help="the cluster's `poll:` (seconds between looks)")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as markdown here")
    args = ap.parse_args()
    missing = slurm_missing()
    if missing:
        raise SystemExit(missing)
    tmp = Path(tempfile.mkdtemp(prefix="slurm-overhead-"))
    cluster = Cluster(tmp / "slurm").start()
    os.environ.update(cluster.env)
    try:
        target = init_target(tmp / "sglang", arch="sm90", gpus=8)
        exp = tmp / "tiny.yaml"
        exp.write_text(yaml.safe_dump(EXPERIMENT))
        hosts = tmp / "hosts.yaml"
        common = {"repo": str(target.repo), "python": str(target.python), "arch": "sm90"}
        hosts.write_text(yaml.safe_dump({
            "hosts": {"box": {"address": "local", "gpus": 8, "workdir": str(tmp / "work"), **common}},
            "cluster": {"c1": {"kind": "slurm", "gpus_per_node": 8, "workdir": str(tmp / "shared"), "poll": args.poll,
                               **common}}}))
        local, slurm = [], []
        for _ in range(args.n):  # interleaved, so drift on this machine hits both alike
            local.append(run(exp, hosts, "box", tmp / "results"))
            slurm.append(run(exp, hosts, "c1", tmp / "results"))
        assert all(r["status"] == "ok" for r in local + slurm)
        start = [r["slurm"]["agent_start_s"] for r in slurm]
        end = [r["_written"] - final_time(tmp / "shared", r) for r in slurm]
        extra = [s["timings"]["total_s"] - lo["timings"]["total_s"] for s, lo in zip(slurm, local)]
        lines = [
            f"# Slurm overhead per attempt (`python benchmarks/slurm_overhead.py --n {args.n} --poll {args.poll}`)",
            "",
            f"One-node Slurm {cluster.run('sinfo', '--version').strip()} on this machine ({os.cpu_count()} cores), "
            f"the simulated target, a 2-prompt experiment; {args.n} attempts each way, interleaved.",
            "",
            "| measure | median (min, max) |",
            "| --- | --- |",
            f"| submit → agent start (sbatch returned → the agent's hello) | {median_range(start)} |",
            f"| end → record (the agent's final report on disk → record.json here) | {median_range(end)} |",
            f"| whole attempt, local transport | {median_range([r['timings']['total_s'] for r in local])} |",
            f"| whole attempt, as a Slurm job | {median_range([r['timings']['total_s'] for r in slurm])} |",
            f"| Slurm's extra per attempt (job − local, pairwise) | {median_range(extra)} |",
            "",
        ]
        text = "\n".join(lines)
        print(text)
        if args.out:
            args.out.write_text(text)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
