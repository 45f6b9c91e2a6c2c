"""Resolve an experiment (backend, patch sets) and build the attempt spec the agent runs (pure)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from . import __version__, agent
from .backends import REGISTRY, Backend
from .bench import bench_serving_argv
from .config import Experiment, HostConfig
from .errors import ConfigError
from .patchsets import PatchSet, load_patch_set
from .triage import FATAL_PATTERNS, LINE_PREFIX_PATTERN, READY_PATTERN
from .yamlsrc import load_yaml


@dataclass(frozen=True)
class Resolved:
    """An experiment with its backend looked up and its patch sets read: everything an attempt needs."""

    experiment: Experiment
    file: Path
    backend: Backend | None
    patch_sets: tuple[PatchSet, ...]

    @property
    def name(self) -> str:
        return self.experiment.name

    @property
    def backend_name(self) -> str | None:
        if self.backend:
            return self.backend.name
        return self.experiment.server.attention_backend


def resolve(exp: Experiment, file: Path, patches_dir: Path) -> Resolved:
    doc = load_yaml(file) if file.exists() else None

    def line(*path):
        return doc.line_of(path) if doc else None

    backend = None
    if exp.backend is not None:
        backend = REGISTRY.get(exp.backend)
        if backend is None:
            import difflib

            close = difflib.get_close_matches(exp.backend, list(REGISTRY), n=1)
            raise ConfigError(f"unknown backend {exp.backend!r}", file=file, line=line("backend"),
                              hint=(f"did you mean {close[0]!r}? " if close else "")
                              + "known backends: " + ", ".join(REGISTRY))
        if exp.server.attention_backend is not None:
            raise ConfigError("give either `backend:` or `server.attention_backend:`, not both", file=file,
                              line=line("server", "attention_backend"))
    backend_sets: tuple[str, ...] = backend.patch_sets if backend else ()
    if backend and backend.name in exp.backend_patches:
        backend_sets = exp.backend_patches[backend.name]
    names: list[tuple[str, int | None]] = [(n, line("backend")) for n in backend_sets]
    names += [(n, line("patches", i)) for i, n in enumerate(exp.patches)]
    seen: set[str] = set()
    sets = []
    for name, ln in names:
        if name in seen:
            continue
        seen.add(name)
        sets.append(load_patch_set(patches_dir, name, referenced_from=file, line=ln))
    return Resolved(exp, file, backend, tuple(sets))


# An argv element the agent fills in on the host: the port chosen there when `port: auto`. A dict can
# never come out of a YAML string, so it cannot be forged by one.
PORT_SLOT = {"slot": "port"}


def port_arg(port: int | str) -> str | dict:
    return PORT_SLOT if port == "auto" else str(port)


def server_argv(python: str, r: Resolved) -> list:
    exp, srv = r.experiment, r.experiment.server
    argv = [python, "-m", "sglang.launch_server", "--model-path", exp.model.path, "--host", srv.host,
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


def patch_entries(sets: tuple[PatchSet, ...]) -> tuple[list[dict], list[dict]]:
    patches = [{"set": s.name, "name": p.name, "text": p.text} for s in sets for p in s.patches]
    files = [{"set": s.name, "path": f.path, "mode": f.mode, "content_b64": base64.b64encode(f.content).decode()}
             for s in sets for f in s.files]
    return patches, files


def build_spec(r: Resolved, host: HostConfig, *, run_id: str, attempt_id: str,
               lock_wait_s: float = 0.0) -> dict:
    exp = r.experiment
    patches, files = patch_entries(r.patch_sets)
    env = {**host.env, **exp.server.env}
    return {
        "protocol": agent.PROTOCOL,
        "mode": "attempt",
        "harness_version": __version__,
        "run_id": run_id,
        "attempt_id": attempt_id,
        "experiment": exp.name,
        "repo": host.repo,
        "workdir": host.workdir,
        "allow_dirty": list(host.allow_dirty) + list(exp.allow_dirty),
        "base_ref": exp.base_ref,
        "patches": patches,
        "files": files,
        "server": {"argv": server_argv(host.python, r), "env": env, "host": exp.server.host,
                   "port": exp.server.port},
        "bench": [{"name": c.name, "argv": bench_serving_argv(host.python, exp, c), "repeats": exp.repeats}
                  for c in exp.bench],
        "timeouts": exp.timeouts.model_dump(),
        "fatal_patterns": list(FATAL_PATTERNS),
        "ready_pattern": READY_PATTERN,
        "line_prefix_pattern": LINE_PREFIX_PATTERN,
        "heartbeat_timeout_s": host.heartbeat_timeout,
        "alive_interval_s": 2.0,
        "lock_wait_s": lock_wait_s,
        "expect": exp.expect,
        "profile": _profile_spec(host.python, exp),
        "requirements": {
            "backend": r.backend_name,
            "attention_backend": r.backend.attention_backend if r.backend else exp.server.attention_backend,
            "archs": list(r.backend.archs) if r.backend and r.backend.archs else None,
            "arch": host.arch,
            "gpus": exp.gpus_needed,
        },
    }


def _profile_spec(python: str, exp: Experiment) -> dict | None:
    p = exp.profile
    if p is None:
        return None
    case = next(c for c in exp.bench if c.name == (p.case or exp.bench[0].name))
    if p.num_prompts is not None:
        case = case.model_copy(update={"num_prompts": p.num_prompts})
    return {"steps": p.steps, "activities": list(p.activities), "timeout": p.timeout, "case": case.name,
            "argv": bench_serving_argv(python, exp, case)}
