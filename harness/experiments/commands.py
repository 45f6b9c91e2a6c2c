"""Every command line the harness has the host run: the SGLang server, its benchmark client, and the
profiling load (pure: argv lists from settings, nothing read, nothing run).

Strings from YAML stay single argv elements; nothing here is ever parsed by a shell.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias

from .backends import Backend
from .config import BenchCase, Experiment

# An argv element the agent fills in on the host: the port chosen there when `port: auto`. A dict can
# never come out of a YAML string, so it cannot be forged by one.
PORT_SLOT = {"slot": "port"}

Arg: TypeAlias = "str | dict[str, str]"  # a plain argument, or a slot the agent fills in (PORT_SLOT)

# Addresses a server listens on that a client cannot connect to as such ("every interface").
ANY_ADDRESS = ("0.0.0.0", "::", "")


def connectable_host(host: str) -> str:
    """Where a client on the same machine reaches a server listening on `host`."""
    return "127.0.0.1" if host in ANY_ADDRESS else host


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


def warmup_case(case: BenchCase) -> BenchCase:
    """The case's warm-up: its arguments with one wave of prompts, as many as run at once (`max_concurrency`,
    all of them without one). That reaches the case's batch size and lengths, so a first-use compile or graph
    capture of its shape lands there; the rest of a full pass would only double the bench time."""
    wave = min(case.num_prompts, case.max_concurrency or case.num_prompts)
    return case.model_copy(update={"num_prompts": wave})


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
    """The benchmark client run as the load while the server records its profile."""
    return bench_serving_argv(python, exp, profile_case(exp))
