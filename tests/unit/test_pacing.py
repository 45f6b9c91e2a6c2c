"""Issue 36's pacing between benchmark runs, tested without a GPU and without waiting: the settle rule and the
cool-down loop on made-up nvidia-smi samples (an injected clock and sleep), nvidia-smi's state row parsed, the
order of warm-up and measured runs, the YAML's `warmup:` / `cooldown:` through to the spec and the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agent.bench import WARMUP, plan_runs
from harness.agent.gpu import state_from_row
from harness.agent.pacing import cool_down, needs_cooldown, settled
from harness.common.protocol import BenchCase, BenchFacts, CaseFacts, Cooldown, Final, GpuState
from harness.errors import ConfigError
from harness.results.attemptdir import bench_outputs
from harness.results.schemas import Record
from harness.run.recording import agent_facts
from tests.unit.test_plan import _key, _top_level_sweep


def gpus(*pairs: tuple[float, float]) -> list[GpuState]:
    """One sample: (SM MHz, °C) per GPU."""
    return [GpuState(index=str(i), sm_mhz=int(sm), temperature_c=t) for i, (sm, t) in enumerate(pairs)]


class FakeClock:
    """Time that moves only when the cool-down sleeps; samples given in order (the last one repeats)."""

    def __init__(self, samples: list[list[GpuState] | None]) -> None:
        self.now, self.samples, self.slept = 0.0, list(samples), []

    def sample(self) -> list[GpuState] | None:
        return self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def clock(self) -> float:
        return self.now


SETTLE = Cooldown(until_settled=True, window=3, interval_s=1.0, max_s=30.0, sm_tolerance_mhz=15,
                  temp_tolerance_c=1.0)


def test_settled_needs_a_full_window_within_both_tolerances_on_every_gpu():
    calm = gpus((1980, 40.0), (1975, 41.0))
    assert not settled([calm, calm], SETTLE)  # two samples: the window is three
    assert settled([calm, calm, calm], SETTLE)
    assert settled([gpus((1500, 70), (1500, 70)), calm, gpus((1990, 40.5), (1980, 41.5)), calm], SETTLE)
    assert not settled([calm, gpus((1980, 40.0), (1940, 41.0)), calm], SETTLE)  # GPU 1's clock still moving
    assert not settled([calm, gpus((1980, 42.5), (1975, 41.0)), calm], SETTLE)  # GPU 0 still cooling


def test_a_value_nvidia_smi_does_not_show_is_left_out_of_its_spread():
    blank = [GpuState(index="0", sm_mhz=None, temperature_c=None)]
    assert settled([blank, gpus((1980, 40)), gpus((1985, 40.5))], SETTLE)


def test_cool_down_until_settled_waits_for_the_clock_and_temperature_to_stop_moving():
    falling = [gpus((1980, t)) for t in (70, 64, 58, 53, 51, 49.5, 49.4, 49.3, 49.3)]
    fake = FakeClock(falling)
    waited = cool_down(SETTLE, fake.sample, fake.sleep, fake.clock)
    # Samples 6, 7, 8 (49.5, 49.4, 49.3) are the first three within 1 °C (51, 49.5, 49.4 spread 1.6): the
    # eighth sample settles it, after seven sleeps.
    assert waited.settled is True and waited.seconds == 7.0 and fake.slept == [1.0] * 7


def test_cool_down_gives_up_at_max_s_and_says_so():
    drifting = [gpus((1980 - 40 * i, 80 - 3 * i)) for i in range(100)]
    fake = FakeClock(drifting)
    waited = cool_down(Cooldown(until_settled=True, window=3, interval_s=1.0, max_s=5.0), fake.sample, fake.sleep,
                       fake.clock)
    assert waited.settled is False and waited.seconds <= 5.0 and len(fake.slept) == 5


def test_a_fixed_cool_down_sleeps_once_and_asks_nothing():
    fake = FakeClock([None])
    waited = cool_down(Cooldown(seconds=12.5), lambda: pytest.fail("sampled"), fake.sleep, fake.clock)
    assert (waited.seconds, waited.settled, fake.slept) == (12.5, None, [12.5])


def test_seconds_then_settling_and_no_nvidia_smi_ends_the_settling():
    fake = FakeClock([None])
    waited = cool_down(Cooldown(seconds=3.0, until_settled=True), fake.sample, fake.sleep, fake.clock)
    assert (waited.seconds, waited.settled, fake.slept) == (3.0, None, [3.0])


def test_every_run_but_the_first_cools_down():
    assert [needs_cooldown(i) for i in range(4)] == [False, True, True, True]


def test_each_case_warms_up_before_its_repeats_unless_told_not_to():
    a = BenchCase(name="a", argv=["x", "--num-prompts", "8"], repeats=2, warmup_argv=["x", "--num-prompts", "4"])
    b = BenchCase(name="b", argv=["x"], repeats=1)
    assert [(c.name, r) for c, r in plan_runs([a, b])] == [("a", WARMUP), ("a", 0), ("a", 1), ("b", 0)]
    assert (a.argv_for(True)[-1], a.argv_for(False)[-1], b.argv_for(True)) == ("4", "8", ["x"])


def test_nvidia_smi_state_row_parsed_with_not_shown_values_as_none():
    row = {"index": "3", "uuid": "GPU-x", "clocks.sm": "1980", "clocks.mem": "3201", "temperature.gpu": "47",
           "power.draw": "[N/A]", "memory.used": "1021.0"}
    assert state_from_row(row) == GpuState(index="3", sm_mhz=1980, mem_mhz=3201, temperature_c=47.0, power_w=None,
                                           memory_used_mib=1021)


def test_case_facts_cross_the_wire_and_land_in_the_record_without_host_paths():
    facts = CaseFacts(name="c8", warmup=True, warmup_s=4.9, warmup_median_ttft_ms=4900.0,
                      warmup_file="/w/bench-c8.warmup.jsonl", gpu_start=gpus((1980, 40)))
    final = Final.from_dict(Final(bench=BenchFacts(files={"c8": "/w/bench-c8.jsonl"}, cases=[facts])).to_dict())
    assert final.bench.cases == [facts]
    rec = Record(run_id="r", experiment="e", attempt="01", host="h", status="ok",
                 **agent_facts(final, fetch_missing=[], profile_error=None))
    runs = json.loads(rec.to_json())["bench_cases"]
    assert runs["c8"]["warmup_median_ttft_ms"] == 4900.0
    assert "warmup_file" not in runs["c8"] and "name" not in runs["c8"]
    assert bench_outputs(final) == [("c8", "/w/bench-c8.jsonl"), ("c8.warmup", "/w/bench-c8.warmup.jsonl")]


def test_warmup_off_or_a_cooldown_makes_another_experiment_and_the_defaults_do_not(tmp_path: Path):
    def sweep(case: dict[str, object] | None = None, **extra: object) -> str:
        return _key(_top_level_sweep(tmp_path, **extra) if case is None else _case_sweep(tmp_path, case))

    def _case_sweep(tmp: Path, case: dict[str, object]) -> Path:
        from tests.unit.test_plan import write
        write(tmp, "base.yaml", {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/m"},
                                 "bench": [{"name": "bs1", "max_concurrency": 1, **case}]})
        return write(tmp, "s.yaml", {"name": "s", "base": "base.yaml"})

    plain = sweep()
    assert sweep({"warmup": True}) == plain
    assert sweep({"warmup": False}) != plain
    assert sweep(cooldown={"seconds": 5}) != plain


def test_a_cooldown_must_ask_for_a_wait(tmp_path: Path):
    with pytest.raises(ConfigError, match="cooldown"):
        _key(_top_level_sweep(tmp_path, cooldown={"max_s": 10}))
    with pytest.raises(ConfigError):
        _key(_top_level_sweep(tmp_path, cooldown={"seconds": ".inf"}))
