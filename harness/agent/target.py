"""What the host's target allows: SGLang's version and attention backends (read from its source, since
importing SGLang takes seconds and a GPU stack), and whether the experiment fits this host's GPUs."""

from __future__ import annotations

import ast
import os
import re
from typing import Any, Optional

from ..protocol import PatchEntry, Requirements
from .gpu import arch_of

VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)""", re.MULTILINE)
BACKEND_CHOICES_FILES = ("python/sglang/srt/arg_groups/choices.py", "python/sglang/srt/server_args.py")


def read_server_version(repo: str) -> Optional[str]:
    """SGLang's version from its source: _version.py (written by the build) first, then version.py;
    only module-level assignments count (version.py also holds a '0.0.0.dev0' fallback)."""
    for rel in ("python/sglang/_version.py", "python/sglang/version.py"):
        try:
            with open(os.path.join(repo, rel)) as f:
                m = VERSION_RE.search(f.read())
            if m:
                return m.group(1)
        except OSError:
            continue
    return None


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


def fit_problems(req: Requirements, repo: str, gpus: Optional[list[dict[str, Any]]], server_version: Optional[str],
                 patches: list[PatchEntry], facts: dict[str, Any]) -> list[str]:
    """Why the experiment cannot run here: a backend this SGLang does not know, a GPU arch the backend's
    kernels do not support, too few GPUs. What was learned on the way goes into `facts`."""
    detected = arch_of(gpus[0]["compute_cap"]) if gpus else None
    arch = req.arch or detected
    facts["arch"] = arch
    problems = []
    backend = req.attention_backend
    if backend:
        choices = read_backend_choices(repo)
        facts["attention_backend_choices"] = choices
        added = any(('"%s"' % backend) in p.text or ("'%s'" % backend) in p.text for p in patches)
        if choices is not None and backend not in choices and not added:
            problems.append("SGLang %s on this host does not accept --attention-backend %s (valid: %s)"
                            % (server_version or "?", backend, ", ".join(choices)))
    if req.archs and arch and arch not in req.archs:
        gpu_name = gpus[0]["name"] if gpus else "this GPU"
        problems.append("backend %s needs %s; this host's GPU is %s (%s)"
                        % (req.backend or backend, "/".join(req.archs), arch, gpu_name))
    need = int(req.gpus or 0)
    if gpus is not None and need > len(gpus):
        problems.append("the experiment needs %d GPUs; nvidia-smi on this host shows %d" % (need, len(gpus)))
    return problems
