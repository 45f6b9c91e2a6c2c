"""Sweep scaling over four hosts: network namespaces with their own sshd and simulated target.

16 attempts (4 experiments × 4 rounds) over 4 hosts. The ideal wall time is the total attempt time
divided by 4; target: the sweep's wall time within 1.3× of that.

Run (as root, needs iproute2 and openssh-server):
    python benchmarks/sweep_scale.py [--json benchmarks/results/sweep_scale.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from harness.experiments.files import read_sweep_file  # noqa: E402
from harness.experiments.plan import plan_sweep  # noqa: E402
from harness.results.store import ResultsStore, new_run_id  # noqa: E402
from harness.run.runfile import write_run_file  # noqa: E402
from harness.run.scheduler import Scheduler  # noqa: E402
from tests.support import netns  # noqa: E402


class Quiet:
    def stage(self, *a): pass
    def note(self, *a): pass
    def attempt_started(self, *a): pass
    def attempt_finished(self, host, label, record): print(f"{host}: {label} -> {record.status}", flush=True)
    def totals(self, *a): pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    why = netns.available()
    if why:
        sys.exit(f"cannot run: {why}")
    with tempfile.TemporaryDirectory(prefix="sweep-scale-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "base.yaml").write_text(yaml.safe_dump({
            "name": "base", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
            "server": {"port": 30000, "tp": 8, "kv_cache_dtype": "fp8_e4m3"},
            "bench": [{"name": "bs1", "num_prompts": 4, "input_len": 64, "output_len": 32, "max_concurrency": 1}],
            "timeouts": {"ready": 120, "no_progress": 60, "stop_grace": 10}}))
        (tmp / "sweep.yaml").write_text(yaml.safe_dump({
            "name": "scale", "base": "base.yaml",
            "matrix": {"server.mem_fraction_static": [0.80, 0.82, 0.84, 0.86]}, "rounds": 4}))
        with netns.sim_hosts_in_namespaces(4, tmp, uuid.uuid4().hex[:4]) as hosts:
            plan = plan_sweep(read_sweep_file(tmp / "sweep.yaml"), ROOT / "patches", hosts)
            store = ResultsStore(tmp / "results")
            run_id = new_run_id()
            write_run_file(store, run_id, plan, hosts)
            t0 = time.monotonic()
            Scheduler(plan, hosts, store, run_id, reporter=Quiet()).run()
            wall = time.monotonic() - t0
        records = [r for v in store.records_by_key(run_id).values() for r in v]
    total = sum(r.timings["total_s"] for r in records)
    ideal = total / 4
    per_host = {}
    for r in records:
        per_host[r.host] = per_host.get(r.host, 0) + 1
    result = {"attempts": len(records), "ok": sum(r.status == "ok" for r in records), "hosts": 4,
              "attempts_per_host": per_host, "sum_attempt_s": round(total, 2), "ideal_wall_s": round(ideal, 2),
              "wall_s": round(wall, 2), "ratio": round(wall / ideal, 3), "target_ratio": 1.3,
              "pass": wall / ideal <= 1.3 and len(records) == 16}
    print(f"16 attempts on 4 namespace hosts: {result['ok']} ok, per host {per_host}")
    print(f"sum of attempt times {total:.1f} s -> ideal wall {ideal:.1f} s; measured wall {wall:.1f} s; "
          f"ratio {wall / ideal:.2f} (target <= 1.3) -> {'PASS' if result['pass'] else 'FAIL'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
