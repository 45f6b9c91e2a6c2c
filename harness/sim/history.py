"""A history for the simulated target (`harness sim init --history N`): N commits on main after the checkout's
first. Most are harmless (a line in CHANGELOG.md); one (`slow_at`) makes a backend decode slower — it sets
`DECODE_COST_FACTOR` in the backend's own source, which the simulated model runner applies to every decode step
— and one (`broken_at`) breaks the server's start (server_args.py imports a name that does not exist: the server
dies at startup with an ImportError), which the next commit fixes. What `harness bisect` is tried on without a
GPU: the commit ids follow from the layout alone (fixed dates and author), so the same layout gives the same ids.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ATTENTION = "python/sglang/srt/layers/attention"
# SGLang's --attention-backend names → the simulated source files of their decode backends (fa3 and fa4 share one)
SLOW_BACKENDS = {
    "flashinfer": ("flashinfer_mla_backend.py", "flashinfer_backend.py"),
    "trtllm_mla": ("trtllm_mla_backend.py",),
    "cutedsl_mla": ("cutedsl_mla_backend.py",),
    "flashmla": ("flashmla_backend.py",),
    "fa3": ("flashattention_backend.py",),
    "fa4": ("flashattention_backend.py",),
    "triton": ("triton_backend.py",),
    "torch_native": ("torch_native_backend.py",),
}
SERVER_ARGS = "python/sglang/srt/server_args.py"
BROKEN_IMPORT = "from sglang.srt.utils import resolve_served_model_name  # noqa: F401 (moved to utils in #%d)\n"
CHANGELOG = "CHANGELOG.md"
MAX_COMMITS = 2000
SUBJECTS = (
    "docs: say which flags the scheduler reads",
    "tests: cover the tokenizer manager's abort path",
    "refactor: name the KV pool's size constants",
    "ci: pin the lint image",
    "metrics: count retracted requests",
    "server_args: explain --chunked-prefill-size in its help",
    "scheduler: log the batch size with each decode line",
    "bench_serving: round the percentiles it prints",
    "docs: the model config's architecture list",
    "chore: sort the imports of the entrypoints",
    "openai_api: reject an empty prompt list early",
    "tests: a smaller model for the HTTP server's tests",
)


@dataclass(frozen=True)
class Layout:
    """Which of the `commits` commits after the first slows a backend and which breaks the start (1-based)."""

    commits: int = 0
    slow_at: int | None = None
    slow_backend: str = "flashinfer"
    slow_factor: float = 1.15
    broken_at: int | None = None

    def check(self) -> None:
        """ValueError naming what does not fit: every option's range, and the two changes on different commits."""
        n = self.commits
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_COMMITS:
            raise ValueError(f"history must be a number of commits from 0 to {MAX_COMMITS}, got {n!r}")
        if self.slow_at is not None and not 1 <= self.slow_at <= n:
            raise ValueError(f"slow_at must name one of the history's commits, 1 to {n}, got {self.slow_at}")
        if self.broken_at is not None and not 1 <= self.broken_at < n:
            raise ValueError(f"broken_at must be 1 to {n - 1} (the commit after it fixes the start), "
                             f"got {self.broken_at}")
        if self.broken_at is not None and self.broken_at == self.slow_at:
            raise ValueError("slow_at and broken_at must be different commits")
        if self.slow_backend not in SLOW_BACKENDS:
            raise ValueError(f"unknown slow backend {self.slow_backend!r}; choose one of {', '.join(SLOW_BACKENDS)}")
        if not 0.1 <= self.slow_factor <= 10:
            raise ValueError(f"slow_factor must be between 0.1 and 10 (1.15: 15 % slower), got {self.slow_factor}")


def write_history(repo: Path, layout: Layout, commit: Callable[[str, int], str]) -> list[str]:
    """The layout's commits on top of the checkout's first; `commit(subject, k)` commits everything as commit k
    and returns its id. The ids of commits 1..N, in order."""
    ids = []
    for k in range(1, layout.commits + 1):
        subject = f"{SUBJECTS[(k - 1) % len(SUBJECTS)]} (#{k})"
        if k == layout.slow_at:
            subject = f"attention: {layout.slow_backend} re-plans its decode wrapper on every layer (#{k})"
            factor = ("\n# What one decode step of this backend costs against the model's (the simulated model "
                      f"runner applies it).\nDECODE_COST_FACTOR = {layout.slow_factor!r}\n")
            for name in SLOW_BACKENDS[layout.slow_backend]:
                path = repo / ATTENTION / name
                _edit(path, after_docstring(path.read_text(encoding="utf-8"), factor))
        if layout.broken_at is not None and k in (layout.broken_at, layout.broken_at + 1):
            line = "\n" + BROKEN_IMPORT % layout.broken_at
            text = (repo / SERVER_ARGS).read_text(encoding="utf-8")
            _edit(repo / SERVER_ARGS, after_docstring(text, line) if k == layout.broken_at else
                  text.replace(line, "", 1))
        if k == layout.broken_at:
            subject = f"server_args: take resolve_served_model_name from utils (#{k})"
        elif layout.broken_at is not None and k == layout.broken_at + 1 and k != layout.slow_at:
            subject = f"server_args: undo #{layout.broken_at}, the helper never moved (#{k})"
        with open(repo / CHANGELOG, "a", encoding="utf-8") as f:
            f.write(f"- {subject}\n")
        ids.append(commit(subject, k))
    return ids


def after_docstring(text: str, insert: str) -> str:
    """`insert` right after a module's docstring (away from where patch sets' hunks sit: imports, classes, the end)."""
    body = ast.parse(text).body
    first = body[0] if body else None
    at = 0
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        at = first.end_lineno or 0
    lines = text.splitlines(keepends=True)
    return "".join(lines[:at] + [insert] + lines[at:])


def _edit(path: Path, new: str) -> None:
    if new == path.read_text(encoding="utf-8"):
        raise RuntimeError(f"the simulated history could not change {path}")
    path.write_text(new, encoding="utf-8")
