"""Cool-downs between benchmark runs: a fixed wait, or until the GPUs' SM clock and temperature settle.

The settle rule (`settled`) is pure and the wait (`cool_down`) is given its sampler, clock and sleep, so both
are tested on made-up samples without waiting. Which runs get a cool-down is `needs_cooldown`'s rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import List, Optional

from ..common.protocol import Cooldown, GpuState

Sample = Optional[List[GpuState]]  # one nvidia-smi query's GPUs; None: no nvidia-smi


@dataclass
class Waited:
    seconds: float
    settled: Optional[bool]  # None: no settling asked for, or nothing to settle on (no nvidia-smi)


def needs_cooldown(index: int) -> bool:
    """Every benchmark run but the attempt's first (index 0) waits: between cases, and between a case's
    warm-up and repeats, so each measured run starts from the same settled GPU."""
    return index > 0


def _within(values: Sequence[Optional[float]], tolerance: float) -> bool:
    shown = [v for v in values if v is not None]
    return not shown or max(shown) - min(shown) <= tolerance


def settled(samples: Sequence[list[GpuState]], cfg: Cooldown) -> bool:
    """The last `window` samples agree: on every GPU the SM clock spreads at most `sm_tolerance_mhz` and the
    temperature at most `temp_tolerance_c` (a value nvidia-smi does not show is left out of its spread)."""
    window = max(int(cfg.window), 1)
    if len(samples) < window:
        return False
    last = samples[-window:]
    for index in {g.index for sample in last for g in sample}:
        gpus = [g for sample in last for g in sample if g.index == index]
        if not (_within([g.sm_mhz for g in gpus], cfg.sm_tolerance_mhz)
                and _within([g.temperature_c for g in gpus], cfg.temp_tolerance_c)):
            return False
    return True


def cool_down(cfg: Cooldown, sample: Callable[[], Sample], sleep: Callable[[float], None],
              clock: Callable[[], float]) -> Waited:
    """Wait `seconds`, then (with `until_settled`) sample every `interval_s` until `settled`, at most `max_s`
    in all. Without nvidia-smi there is nothing to settle on: the wait ends there, `settled` None."""
    start = clock()
    if cfg.seconds > 0:
        sleep(cfg.seconds)
    if not cfg.until_settled:
        return Waited(round(clock() - start, 3), None)
    samples: list[list[GpuState]] = []
    while True:
        now = sample()
        if now is None:
            return Waited(round(clock() - start, 3), None)
        samples.append(now)
        if settled(samples, cfg):
            return Waited(round(clock() - start, 3), True)
        if clock() - start + cfg.interval_s > cfg.max_s:
            return Waited(round(clock() - start, 3), False)
        sleep(cfg.interval_s)
