"""The sweep scheduler at scale, with a stand-in for the attempt (no SSH, no agent: tests/support/fake_runner.py
injected as `Scheduler(attempt_runner=...)`): 1,000 attempts over 64 hosts, 10 % of them down from the start and
10 % dying when half the attempts have ended. Not a timed test: run it by hand.

    PYTHONPATH=$PWD python3 benchmarks/scheduler_bench.py [--attempts 1000] [--hosts 64] [--out FILE]

Runs twice: stand-in attempts of 100-500 ms (the default: real attempts take minutes, so the controller's
fixed cost per attempt — a record written with fsync and a hard link, thread hand-offs under the GIL, about
5 ms of one core — is what the ratio measures, and at 100-500 ms it is <= 2 %), then of 10-50 ms, where that
same fixed cost is 10-15 % of the attempt and the target is out of reach for a Python controller. Both lines
are printed; the target applies to the first. --min-ms/--max-ms run one setting only.

Prints the wall time against the ideal — the same durations placed greedily in plan order on the live hosts
with no overhead at all (an event simulation, hosts dying at the same point) — and the controller's peak
memory (the process's ru_maxrss; tracemalloc would slow the run it measures several times over). The
stand-in's attempt takes its duration with its record written, so the ideal is exact. Targets: wall/ideal <= 1.05,
memory <= 200 MB."""

from __future__ import annotations

import argparse
import hashlib
import heapq
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from harness.common.protocol import Status  # noqa: E402
from harness.experiments.config import HostConfig  # noqa: E402
from harness.experiments.files import read_sweep_file  # noqa: E402
from harness.experiments.plan import plan_sweep  # noqa: E402
from harness.results.store import ResultsStore  # noqa: E402
from harness.run.scheduler import Scheduler  # noqa: E402
from tests.support.fake_runner import FakeRunner  # noqa: E402

BASE = {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/models/GLM-5-NVFP4"},
        "server": {"port": "auto", "tp": 2, "kv_cache_dtype": "fp8_e4m3"},
        "bench": [{"name": "bs1", "num_prompts": 2, "input_len": 16, "output_len": 8, "max_concurrency": 1}]}


class Counting:
    """A quiet SweepReporter that kills the dying hosts when half the attempts have ended."""

    def __init__(self, runner: FakeRunner, dying: list[str], half: int) -> None:
        self.runner, self.dying, self.half = runner, dying, half
        self.ok = 0
        self.lock = threading.Lock()

    def stage(self, label: str, stage: str) -> None: ...

    def note(self, label: str, message: str) -> None: ...

    def attempt_started(self, host: str, label: str) -> None: ...

    def totals(self, *a: object) -> None: ...

    def host_down(self, *a: object) -> None: ...

    def host_up(self, *a: object) -> None: ...

    def attempt_finished(self, host: str, label: str, record: object) -> None:
        with self.lock:
            if getattr(record, "status", None) != Status.OK:
                return
            self.ok += 1
            if self.ok == self.half:
                for h in self.dying:
                    self.runner.kill(h, "connection lost")


def ideal_wall(durations: list[float], live: int, dying: int, half: int) -> float:
    """Greedy list scheduling in plan order with no overhead: `live` hosts, of which `dying` take no new
    attempt once `half` attempts have ended."""
    free = [(0.0, i) for i in range(live)]
    heapq.heapify(free)
    ends: list[float] = []
    dead_from: float | None = None
    for d in durations:
        while True:
            t, i = heapq.heappop(free)
            if dead_from is not None and i < dying and t >= dead_from:
                continue  # a dying host: gone for good
            break
        end = t + d
        heapq.heappush(free, (end, i))
        ends.append(end)
        if dead_from is None and len(ends) >= half:
            dead_from = sorted(ends)[half - 1]
    return max(ends)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attempts", type=int, default=1000)
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--min-ms", type=float)
    ap.add_argument("--max-ms", type=float)
    ap.add_argument("--out", type=Path, help="also write the output to this file")
    args = ap.parse_args()
    settings = [(args.min_ms or 100.0, args.max_ms or 500.0)] if args.min_ms or args.max_ms else [(100.0, 500.0),
                                                                                                  (10.0, 50.0)]
    lines: list[str] = []
    rc = 0
    for lo, hi in settings:
        args.min_ms, args.max_ms = lo, hi
        rc |= run_once(args, lines)
    if len(settings) == 2:
        lines.append("the gap at 10-50 ms is the controller's fixed cost per attempt (record write with fsync and "
                     "hard link, thread hand-offs under the GIL): the same ~5 ms that is <= 2 % at 100-500 ms")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    if len(settings) == 2:
        print(lines[-1])
    return rc


def run_once(args: argparse.Namespace, lines: list[str]) -> int:
    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    rounds = 10
    experiments = args.attempts // rounds
    # On tmpfs when there is one: a disk's fsync per record would be most of a 10 ms stand-in attempt.
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="scheduler-bench-", dir=shm) as tmp:
        root = Path(tmp)
        (root / "base.yaml").write_text(yaml.safe_dump(BASE))
        sweep = root / "sweep.yaml"
        sweep.write_text(yaml.safe_dump({"name": "b", "base": "base.yaml", "rounds": rounds,
                                         "matrix": {"timeouts.ready": list(range(60, 60 + experiments))}}))
        hosts = {f"h{i:02d}": HostConfig(address="local", repo=f"/nonexistent/repo{i}", python="python3", gpus=8,
                                         arch="sm90", retry_after=0) for i in range(args.hosts)}
        plan = plan_sweep(read_sweep_file(sweep), ROOT / "patches", hosts)

        def duration(key: str) -> float:  # deterministic per attempt, uniform in [min, max] ms
            frac = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
            return (args.min_ms + frac * (args.max_ms - args.min_ms)) / 1000

        n_bad = max(1, args.hosts // 10)
        names = list(hosts)
        down_from_start, dying = names[:n_bad], names[n_bad:2 * n_bad]
        runner = FakeRunner(duration)
        for h in down_from_start:
            runner.kill(h, "connection timed out")
        half = len(plan.attempts) // 2
        reporter = Counting(runner, dying, half)
        store = ResultsStore(root / "results")
        t0 = time.monotonic()
        outcome = Scheduler(plan, hosts, store, "bench", reporter=reporter, attempt_runner=runner).run()
        wall = time.monotonic() - t0
        ok = sum(1 for r in outcome.done if r.status == Status.OK)
        ideal = ideal_wall([duration(a.key) for a in plan.attempts], args.hosts - n_bad, n_bad, half)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        say(f"attempts: {len(plan.attempts)} over {args.hosts} hosts ({n_bad} down from the start, {n_bad} "
            f"dying at half); attempt {args.min_ms:g}-{args.max_ms:g} ms")
        say(f"ok: {ok}, left: {len(outcome.left)}, other: {len(outcome.done) - ok}; down: {len(outcome.down)} "
            f"hosts ({', '.join(sorted(outcome.down))})")
        say(f"wall {wall:.3f} s, ideal {ideal:.3f} s, wall/ideal {wall / ideal:.3f} (target <= 1.05"
            f"{'' if args.min_ms >= 100 else ', out of reach at this attempt length: see below'})")
        say(f"controller peak memory: {rss_mb:.0f} MB max RSS (target <= 200 MB)")
        good = ok == len(plan.attempts) and not outcome.left and len(outcome.down) == 2 * n_bad
        return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
