"""What the host's target allows: SGLang's attention backends (read from its source, since importing SGLang
takes seconds and a GPU stack), and whether the experiment fits this host's GPUs. Its version and identity:
harness.common.targetid, which the controller uses too."""

from __future__ import annotations

import ast
import os
import re
from typing import Any, Optional

from ..common.protocol import FileEntry, GpuInfo, PatchEntry, PreflightFacts, Requirements
from .gpu import arch_of

BACKEND_CHOICES_FILES = ("python/sglang/srt/arg_groups/choices.py", "python/sglang/srt/server_args.py")


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.6.14' → (0, 6, 14); '0.7.2rc1' / '0.6.14+cu130' → the leading numbers only."""
    nums = []
    for part in version.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        nums.append(int(m.group()))
        if m.end() != len(part):
            break
    return tuple(nums)


def choose_variants(patches: list[PatchEntry], files: list[FileEntry], target: Optional[str]
                    ) -> tuple[list[PatchEntry], list[FileEntry], dict[str, str], list[str]]:
    """Keep, of each patch set with per-version variants, the variant made for this host's target (see
    `target_identity`); a set without variants travels whole. Returns the kept entries, set → chosen
    target, and problems."""
    targets: dict[str, set[str]] = {}
    for e in list(patches) + list(files):
        if e.applies_to is not None:
            targets.setdefault(e.set, set()).update(e.applies_to)
    chosen = {name: target for name, ts in targets.items() if target in ts}
    problems = ["patch set %s has variants for %s; this host's target is %s"
                % (name, ", ".join(sorted(ts)), target or "SGLang of unknown version (no python/sglang/version.py)")
                for name, ts in sorted(targets.items()) if name not in chosen]

    def keep(e: Any) -> bool:
        return e.applies_to is None or (e.set in chosen and chosen[e.set] in e.applies_to)
    return [p for p in patches if keep(p)], [f for f in files if keep(f)], chosen, problems


def read_backend_choices(repo: str) -> Optional[list[str]]:
    """The --attention-backend choices of the SGLang checkout; None when no literal list is found."""
    for rel in BACKEND_CHOICES_FILES:
        try:
            with open(os.path.join(repo, rel)) as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ATTENTION_BACKEND_CHOICES"
                                                    for t in node.targets):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    return None
                return [str(v) for v in value]
    return None


def fit_problems(req: Requirements, repo: str, gpus: Optional[list[GpuInfo]], server_version: Optional[str],
                 patches: list[PatchEntry], facts: PreflightFacts) -> list[str]:
    """Why the experiment cannot run here: a backend this SGLang does not know, a GPU arch the backend's
    kernels do not support, too few GPUs. What was learned on the way goes into `facts`."""
    detected = arch_of(gpus[0].compute_cap) if gpus else None
    arch = req.arch or detected
    facts.arch = arch
    problems = []
    backend = req.attention_backend
    if backend:
        choices = read_backend_choices(repo)
        facts.attention_backend_choices = choices
        added = any(('"%s"' % backend) in p.text or ("'%s'" % backend) in p.text for p in patches)
        if choices is not None and backend not in choices and not added:
            problems.append("SGLang %s on this host does not accept --attention-backend %s (valid: %s)"
                            % (server_version or "?", backend, ", ".join(choices)))
    low = (req.flashinfer_min or {}).get(arch or "", (req.flashinfer_min or {}).get("*"))
    fi = facts.flashinfer_version
    if low and fi and version_tuple(fi) < version_tuple(low):
        problems.append("backend %s needs FlashInfer >= %s on %s; this host's FlashInfer is %s"
                        % (req.backend or backend, low, arch or "this GPU", fi))
    if req.archs and arch and arch not in req.archs:
        gpu_name = gpus[0].name if gpus else "this GPU"
        problems.append("backend %s needs %s; this host's GPU is %s (%s)"
                        % (req.backend or backend, "/".join(req.archs), arch, gpu_name))
    need = int(req.gpus or 0)
    if gpus is not None and need > len(gpus):
        problems.append("the experiment needs %d GPUs; nvidia-smi on this host shows %d" % (need, len(gpus)))
    return problems
