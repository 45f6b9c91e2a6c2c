"""The bench-side settings of an experiment YAML (pure pydantic models): its benchmark cases, the cool-down
between runs, the profile and the answer check. `config.py` builds an Experiment from them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..common.protocol import Cooldown as WireCooldown  # the agent's cool-down defaults
from ..common.protocol import Timeouts as Wire  # the agent's timeouts, as the spec carries them
from .basecfg import Finite, Name, Strict


class BenchCase(Strict):
    name: Name
    client: Literal["bench_serving"] = "bench_serving"
    dataset: str = "random-ids"
    dataset_path: str | None = None
    num_prompts: int = Field(16, ge=1)
    input_len: int = Field(1024, ge=1)
    output_len: int = Field(256, ge=1)
    range_ratio: float | None = Field(None, ge=0, le=1)
    max_concurrency: int | None = Field(None, ge=1)
    request_rate: float | None = Field(None, gt=0)
    seed: int = 1
    warmup_requests: int | None = Field(None, ge=0)
    extra_args: tuple[str, ...] = ()
    repeats: int | None = Field(None, ge=1, description="runs of this case per attempt (default: the "
                                                         "experiment's `repeats`)")
    warmup: bool = Field(True, description="before its measured repeats, run one wave of the case (as many "
                                           "prompts as `max_concurrency`, same lengths; every prompt for a `hit` "
                                           "case), discarded: a first-use compile of its shape lands there")
    prefix_cache: Literal["cold", "hit"] = Field(
        "cold", description="what every repeat measures: `cold`, prompts no earlier run sent (each repeat draws "
                            "its own from `seed`, and the cache is flushed after bench_serving's warm-up request); "
                            "`hit`, the same prompts each repeat, all of them sent once in the warm-up first, so "
                            "each prefill finds its prompt cached")

    @model_validator(mode="after")
    def _one_cache_state(self) -> BenchCase:
        if self.prefix_cache == "hit" and not self.warmup:
            raise ValueError("a `prefix_cache: hit` case primes its prompts in its warm-up: drop `warmup: false`")
        if self.prefix_cache == "hit" and "--flush-cache" in self.extra_args:
            raise ValueError("`--flush-cache` empties the cache a `prefix_cache: hit` case measures: drop it "
                             "from extra_args (a `cold` case flushes by itself)")
        return self


class CooldownSettings(Strict):
    """A wait before every benchmark run but the attempt's first: `seconds`, then (with `until_settled`) until
    the GPUs' SM clock and temperature settle (the last `window` samples within the tolerances), at most `max_s`."""

    seconds: Finite = Field(0.0, ge=0)
    until_settled: bool = False
    max_s: Finite = Field(WireCooldown.max_s, gt=0)
    interval_s: Finite = Field(WireCooldown.interval_s, gt=0)
    window: int = Field(WireCooldown.window, ge=2)
    sm_tolerance_mhz: Finite = Field(WireCooldown.sm_tolerance_mhz, ge=0)
    temp_tolerance_c: Finite = Field(WireCooldown.temp_tolerance_c, ge=0)

    @model_validator(mode="after")
    def _something(self) -> CooldownSettings:
        if not self.seconds and not self.until_settled:
            raise ValueError("cooldown: give `seconds: N`, `until_settled: true`, or both")
        return self


class Timeouts(Strict):  # names and defaults are the agent's (Wire, the one list); the bounds are the YAML's
    ready: Finite = Field(Wire.ready, gt=0, description="launch → ready, seconds")
    no_progress: Finite = Field(Wire.no_progress, gt=0, description="log silent this long while not ready → hung")
    bench: Finite = Field(Wire.bench, gt=0, description="per benchmark case run")
    stop_grace: Finite = Field(Wire.stop_grace, ge=0, description="SIGTERM → SIGKILL")
    fatal_grace: Finite = Field(Wire.fatal_grace, ge=0, description="fatal log line while alive → crash after this")
    gpu_release: Finite = Field(Wire.gpu_release, ge=0, description="after stop: wait this long for GPU memory "
                               "to be freed")


class ProfileSettings(Strict):
    """Capture a torch-profiler trace after the benchmark, under a short load from one bench case.

    The profile starts at the first forward step after the load's warmup and records `steps` of them
    (docs/reference/sglang-0.5.16-profiler.md says how SGLang does it)."""

    steps: int = Field(5, ge=1, description="forward steps to record (SGLang's num_steps)")
    case: Name | None = Field(None, description="the bench case that drives the load (default: the first)")
    num_prompts: int | None = Field(None, ge=1, description="a shorter load than the case's own")
    activities: tuple[Literal["CPU", "GPU", "MEM"], ...] = ("CPU", "GPU")
    with_stack: bool = Field(False, description="Python stacks in the trace (SGLang's own default is on: its "
                                                "Python tracer makes the trace, and the stop, far larger)")
    record_shapes: bool = Field(False, description="operator input shapes in the trace")
    timeout: float = Field(300.0, gt=0, description="seconds the whole profile stage may take (load, capture, "
                                                     "trace files); a profile not done by then is a profile_error")


class AnswersSettings(Strict):
    """The answer check: fixed prompts (token ids drawn with `seed`, no tokenizer needed) sent greedy, with their
    top logprobs, before the bench cases (twice with `prefix_hit`); `harness compare` judges them against the
    baseline's
    (docs/reading-the-table.md, "The answers column")."""

    prompts: int = Field(16, ge=1, le=1024, description="how many prompts (one batched request)")
    input_len: int = Field(128, ge=1, description="token ids per prompt")
    output_len: int = Field(32, ge=1, description="tokens generated per prompt (greedy, ignore_eos)")
    seed: int = Field(7, ge=0, description="draws the prompts' token ids: same seed, same prompts")
    top_logprobs: int = Field(20, ge=3, le=100, description="top-K logprobs kept per output position (the spread "
                              "compares the tokens both lists hold: the rule was measured with 20)")
    prefix_hit: bool = Field(True, description="send the prompts a second time: each prefill is then a prefix-cache "
                             "hit (a paged prefill over the cached rows), so that path is checked as well as decode")
    vocab: int = Field(32000, ge=101, description="token ids are drawn from [100, vocab)")
    max_dlogprob: Finite = Field(0.25, ge=0, description="largest |Δ logprob| of the chosen token (before a "
                                "divergence) that still passes")
    tie_margin: Finite = Field(0.1, ge=0, description="a divergence passes only as a near-tie: the reference's "
                              "logprob of its own token minus that of the row's token at most this")
    spread_bar: Finite = Field(1.75, gt=0, description="with `prefix_hit`: the largest per-step spread against the "
                               "reference's, in yardsticks (the reference's hit pass against its cold pass)")
