"""Every command line the harness has the host run: the SGLang server, its benchmark client, and the
profiling load (pure: argv lists from settings, nothing read, nothing run).

Strings from YAML stay single argv elements; nothing here is ever parsed by a shell.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias

from ..common.hostaddr import connectable_host
from ..common.protocol import PORT_SLOT, SEED_SLOT
from .backends import Backend
from .config import BenchCase, Experiment

Arg: TypeAlias = "str | dict[str, str]"  # a plain argument, or a slot the agent fills in (PORT_SLOT, SEED_SLOT)
# A cold case's repeat r draws its prompts with seed + SEED_STRIDE * (r + 1), its warm-up with the case's own
# seed: no two runs of a case share a prompt, and cases whose seeds differ by less than the stride share none.
SEED_STRIDE = 1000
FLUSH_CACHE = "--flush-cache"  # bench_serving: flush the server's cache after its warm-up request

def port_arg(port: int | str) -> Arg:
    return PORT_SLOT if port == "auto" else str(port)


class ServerChoice(Protocol):
    """What the server command line is made from: an experiment and the backend it resolved to."""

    @property
    def experiment(self) -> Experiment: ...

    @property
    def backend(self) -> Backend | None: ...


def server_argv(python: str, r: ServerChoice) -> list[Arg]:
    """`python -m sglang.launch_server …` for the experiment, its backend's flags, then `extra_args`."""
    exp, srv = r.experiment, r.experiment.server
    argv: list[Arg] = [python, "-m", "sglang.launch_server", "--model-path", exp.model.path, "--host", srv.host,
                       "--port", port_arg(srv.port), "--tp-size", str(srv.tp)]
    valued = (("--dp-size", srv.dp), ("--kv-cache-dtype", srv.kv_cache_dtype),
              ("--mem-fraction-static", srv.mem_fraction_static), ("--cuda-graph-max-bs", srv.cuda_graph_max_bs),
              ("--page-size", srv.page_size), ("--context-length", srv.context_length),
              ("--chunked-prefill-size", srv.chunked_prefill_size),
              ("--max-running-requests", srv.max_running_requests),
              ("--tokenizer-path", exp.model.tokenizer), ("--served-model-name", exp.model.served_name),
              ("--attention-backend", srv.attention_backend))
    for flag, value in valued:
        if value is not None:
            argv += [flag, str(value)]
    if srv.disable_cuda_graph:
        argv.append("--disable-cuda-graph")
    if srv.trust_remote_code:
        argv.append("--trust-remote-code")
    if r.backend is not None:
        argv += r.backend.server_args()
    return argv + list(srv.extra_args)


def bench_serving_argv(python: str, exp: Experiment, case: BenchCase) -> list[Arg]:
    """`python -m sglang.bench_serving …` against the attempt's server; `--output-file` is added on the host."""
    srv = exp.server
    argv: list[Arg] = [python, "-m", "sglang.bench_serving", "--backend", "sglang",
                       "--host", connectable_host(srv.host), "--port", port_arg(srv.port),
                       "--model", exp.model.path, "--dataset-name", case.dataset,
                       "--num-prompts", str(case.num_prompts),
                       "--random-input-len", str(case.input_len), "--random-output-len", str(case.output_len),
                       "--seed", SEED_SLOT, "--disable-tqdm"]
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
    if case.prefix_cache == "cold" and FLUSH_CACHE not in case.extra_args:
        argv.append(FLUSH_CACHE)
    return argv + list(case.extra_args)


def warmup_case(case: BenchCase) -> BenchCase:
    """The case's warm-up. Cold: its arguments with one wave of prompts, as many as run at once
    (`max_concurrency`, all of them without one), drawn apart from the repeats' (`warmup_seed`): that reaches the
    case's batch size and lengths, so a first-use compile or graph capture of its shape lands there, and caches
    no prompt a repeat sends. Hit: every prompt of the case, which primes the cache each repeat then hits."""
    wave = min(case.num_prompts, case.max_concurrency or case.num_prompts)
    return case.model_copy(update={"num_prompts": case.num_prompts if case.prefix_cache == "hit" else wave})


def repeat_seeds(case: BenchCase, repeats: int) -> list[int]:
    """The prompts' seed of each measured repeat: the case's own for a hit case (the prompts its warm-up
    primed), a new one per repeat for a cold case."""
    if case.prefix_cache == "hit":
        return [case.seed] * repeats
    return [case.seed + SEED_STRIDE * (r + 1) for r in range(repeats)]


def profile_case(exp: Experiment) -> BenchCase:
    """The bench case that drives the load while a profile is captured (its own `num_prompts` if set)."""
    p = exp.profile
    if p is None:
        raise ValueError(f"experiment {exp.name!r} has no profile settings")
    case = next(c for c in exp.bench if c.name == (p.case or exp.bench[0].name))
    if p.num_prompts is not None:
        case = case.model_copy(update={"num_prompts": p.num_prompts})
    return case


def profile_argv(python: str, exp: Experiment) -> list[Arg]:
    """The benchmark client run as the load while the server records its profile (the case's own seed)."""
    case = profile_case(exp)
    return [str(case.seed) if a == SEED_SLOT else a for a in bench_serving_argv(python, exp, case)]
