"""The attempt spec: the one JSON document the agent runs an attempt from (pure).

Built from a resolved experiment (resolve.py) and the host's settings; the command lines in it come
from commands.py, the log patterns the agent watches from triage/signatures.py. Nothing is read or run here.
"""

from __future__ import annotations

import base64
import random
from typing import Any

from .. import __version__
from ..common.protocol import (
    AnswersSpec,
    BenchCase,
    Cooldown,
    FileEntry,
    PatchEntry,
    ProfileSpec,
    Requirements,
    ServerSpec,
    Spec,
    Timeouts,
)
from ..triage.signatures import FATAL_PATTERNS, LINE_PREFIX_PATTERN, PREFILL_PATTERN, READY_PATTERN
from .commands import bench_serving_argv, profile_argv, profile_case, repeat_seeds, server_argv, warmup_case
from .config import AnswersSettings, Experiment, HostConfig
from .config import BenchCase as CaseSettings
from .patchsets import PatchSet
from .resolve import Resolved


def patch_entries(sets: tuple[PatchSet, ...]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The patch sets as spec entries: patch texts inline, new files base64-encoded. Every variant of a
    set with per-version variants travels, each entry saying its targets; the agent keeps the one for
    the host's SGLang (which only the host knows)."""
    patches: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for s in sets:
        for v in s.variants:
            tag = {"applies_to": list(v.applies_to)} if s.has_variants else {}
            patches += [{"set": s.name, "name": p.name, "text": p.text, **tag} for p in v.patches]
            files += [{"set": s.name, "path": f.path, "mode": f.mode,
                       "content_b64": base64.b64encode(f.content).decode(), **tag} for f in v.files]
    return patches, files


def build_spec(r: Resolved, host: HostConfig, *, run_id: str, attempt_id: str,
               lock_wait_s: float = 0.0) -> Spec:
    exp = r.experiment
    patches, files = patch_entries(r.patch_sets)
    profile = _profile_spec(host.python, exp)
    return Spec(
        run_id=run_id,
        attempt_id=attempt_id,
        repo=host.repo,
        harness_version=__version__,
        experiment=exp.name,
        workdir=host.workdir,
        allow_dirty=list(host.allow_dirty) + list(exp.allow_dirty),
        base_ref=exp.base_ref,
        patches=[PatchEntry(**p) for p in patches],
        files=[FileEntry(**f) for f in files],
        server=ServerSpec(argv=server_argv(host.python, r), env={**host.env, **exp.server.env},
                          host=exp.server.host, port=exp.server.port),
        bench=[bench_case(host.python, exp, c) for c in exp.bench],
        timeouts=Timeouts(**exp.timeouts.model_dump()),
        fatal_patterns=list(FATAL_PATTERNS),
        ready_pattern=READY_PATTERN,
        line_prefix_pattern=LINE_PREFIX_PATTERN,
        prefill_pattern=PREFILL_PATTERN,
        heartbeat_timeout_s=host.heartbeat_timeout,
        lock_wait_s=lock_wait_s,
        expect=exp.expect,
        profile=ProfileSpec(**profile) if profile else None,
        answers=answers_spec(exp.answers) if exp.answers else None,
        bench_one_process=exp.bench_clients == "one-process",
        cooldown=Cooldown(**exp.cooldown.model_dump()) if exp.cooldown else None,
        checkout=r.checkout,
        requirements=Requirements(
            backend=r.backend_name,
            attention_backend=r.backend.attention_backend if r.backend else exp.server.attention_backend,
            archs=list(r.backend.archs) if r.backend and r.backend.archs else None,
            arch=host.arch,
            gpus=exp.gpus_needed,
            flashinfer_min=dict(r.backend.flashinfer_min) if r.backend and r.backend.flashinfer_min else None,
        ),
    )


def bench_case(python: str, exp: Experiment, c: CaseSettings) -> BenchCase:
    """One bench case as the agent runs it: its command line with the seed left to fill per run, each
    measured repeat's seed, and its warm-up (one wave, or every prompt of a hit case)."""
    repeats = c.repeats or exp.repeats
    return BenchCase(name=c.name, argv=bench_serving_argv(python, exp, c), repeats=repeats,
                     warmup_argv=bench_serving_argv(python, exp, warmup_case(c)) if c.warmup else None,
                     seeds=repeat_seeds(c, repeats), warmup_seed=c.seed if c.warmup else None,
                     prefix_cache=c.prefix_cache)


def _profile_spec(python: str, exp: Experiment) -> dict[str, Any] | None:
    p = exp.profile
    if p is None:
        return None
    return {"steps": p.steps, "activities": list(p.activities), "timeout": p.timeout, "case": profile_case(exp).name,
            "argv": profile_argv(python, exp), "with_stack": p.with_stack, "record_shapes": p.record_shapes}


def answer_prompts(a: AnswersSettings) -> list[list[int]]:
    """The answer check's fixed prompts: `prompts` lists of `input_len` token ids from [100, vocab), drawn with
    `seed` (same settings, same prompts, on any machine and Python: random.Random's sequence is stable)."""
    rng = random.Random(a.seed)
    return [[rng.randrange(100, a.vocab) for _ in range(a.input_len)] for _ in range(a.prompts)]


def answers_spec(a: AnswersSettings) -> AnswersSpec:
    return AnswersSpec(input_ids=answer_prompts(a), output_len=a.output_len, top_logprobs=a.top_logprobs,
                       settings=a.model_dump(mode="json"), passes=2 if a.prefix_hit else 1)
