"""Where the decode step's time goes: a summary of a torch-profiler trace (pure, streamed).

Real traces are hundreds of MB of Chrome trace JSON (often gzipped). The events are streamed with
ijson, never loaded whole: GPU kernels (`cat: kernel`) are summed by the framework op that launched
them — linked through their `External id` to the CPU op (`cat: cpu_op`) with the same id — and each op's
share of all GPU time is reported, with its top kernels. Memory grows with the number of distinct ids
(ints), not with the file.
"""

from __future__ import annotations

import gzip
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import ijson

# CPU ops that only wrap others: a kernel is credited to the innermost op, but these never name one.
WRAPPERS = ("aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone")
# One forward step: SGLang's span around each model forward (`step[DECODE bs=8]`, `step[EXTEND bs=1 toks=38]`;
# model_runner.py, profile_utils.build_step_span_name), or torch's own `ProfilerStep#N` where a caller steps it.
STEP_RE = re.compile(r"step\[|ProfilerStep#")


@dataclass
class OpTime:
    name: str
    gpu_us: float
    share: float
    calls: int
    kernels: list[tuple[str, float]] = field(default_factory=list)  # top kernels: (name, gpu_us)


@dataclass
class TraceSummary:
    total_gpu_us: float
    steps: int
    top: list[OpTime]
    kernels: int

    @property
    def per_step_us(self) -> float | None:
        return self.total_gpu_us / self.steps if self.steps else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_step_us"] = self.per_step_us
        d["top"] = [{**asdict(o), "kernels": [{"name": k, "gpu_us": us} for k, us in o.kernels]} for o in self.top]
        return d


def _open(path: Path) -> IO[bytes]:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """Trace events one by one: `{"traceEvents": [...]}` (torch) or a bare list of events."""
    with _open(path) as f:
        first = f.read(1)
        while first and first.isspace():
            first = f.read(1)
    prefix = "item" if first == b"[" else "traceEvents.item"
    with _open(path) as f:
        try:
            yield from ijson.items(f, prefix, use_float=True)
        except (ijson.JSONError, EOFError, gzip.BadGzipFile) as exc:  # mapped at the edge: callers see ValueError
            raise ValueError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from None


def summarize_trace(path: Path, top: int = 10) -> TraceSummary:
    op_of: dict[int, int] = {}  # External id → interned op name
    names: dict[str, int] = {}
    kernel_time: dict[int, float] = defaultdict(float)  # External id → kernel µs launched under it
    unlinked: dict[str, float] = defaultdict(float)
    by_kernel_for_ext: dict[int, int] = {}
    kernel_interned: dict[str, int] = {}
    steps = 0
    total = 0.0
    kernels = 0
    for ev in iter_events(path):
        cat = ev.get("cat")
        if ev.get("ph") != "X":
            continue
        if cat == "kernel" or cat == "gpu_memcpy" or cat == "gpu_memset":
            dur = float(ev.get("dur") or 0.0)
            total += dur
            kernels += 1
            ext = (ev.get("args") or {}).get("External id")
            name = ev.get("name") or "?"
            if ext is None:
                unlinked[name] += dur
                continue
            kernel_time[ext] += dur
            by_kernel_for_ext.setdefault(ext, kernel_interned.setdefault(name, len(kernel_interned)))
        elif cat == "cpu_op":
            name = ev.get("name") or "?"
            ext = (ev.get("args") or {}).get("External id")
            if ext is not None and name not in WRAPPERS:
                op_of[ext] = names.setdefault(name, len(names))
        elif cat == "user_annotation" and STEP_RE.match(str(ev.get("name", ""))):
            steps += 1
    op_names = {i: n for n, i in names.items()}
    kernel_by_id = {i: n for n, i in kernel_interned.items()}
    per_op: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    per_op_kernels: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for ext, us in kernel_time.items():
        kname = kernel_by_id[by_kernel_for_ext[ext]]
        name = op_names[op_of[ext]] if ext in op_of else kname
        per_op[name] += us
        calls[name] += 1
        per_op_kernels[name][kname] += us
    for kname, us in unlinked.items():
        per_op[kname] += us
        calls[kname] += 1
        per_op_kernels[kname][kname] += us
    ranked = sorted(per_op.items(), key=lambda kv: -kv[1])[:top]
    ops = [OpTime(name, round(us, 3), round(us / total, 4) if total else 0.0, calls[name],
                  sorted(((k, round(v, 3)) for k, v in per_op_kernels[name].items()), key=lambda kv: -kv[1])[:3])
           for name, us in ranked]
    return TraceSummary(round(total, 3), steps, ops, kernels)


# A CUDA kernel's demangled name is a C++ function's: `void ns::Kernel<Traits<…>, …>(params)`, hundreds of
# characters, whose first word is its return type.
_CLOSE = {"<": ">", "(": ")", "[": "]", "{": "}"}
_NAMED = re.compile(r"[A-Za-z_][\w:]*")


def kernel_label(name: str) -> str:
    """A kernel's name as a table shows it: a demangled `void ns::Kernel<A, B>(params)` becomes `ns::Kernel<A…>`
    (the return type and the parameters go; of the template arguments, the last name of the first named one
    stays: the functor an elementwise kernel runs). Any other name is kept as it is."""
    if not name.startswith("void "):
        return name
    body = name[len("void "):].strip()
    cut = next((i for i, ch in enumerate(body) if ch in "<("), len(body))
    base = body[:cut]
    if not base:  # `void (anonymous namespace)::…`: no plain name to show
        return name
    if cut == len(body) or body[cut] != "<":
        return base
    first = next((m.group() for a in _template_args(body[cut + 1:])
                  if (m := _NAMED.match(a.strip())) and m.group() not in ("true", "false")), None)
    return f"{base}<{first.rsplit('::', 1)[-1]}…>" if first else f"{base}<…>"


def _template_args(text: str) -> list[str]:
    """The top-level comma-separated arguments of `text`, which starts right after a template's `<`."""
    args: list[str] = []
    depth, start = [">"], 0
    for i, ch in enumerate(text):
        if ch in _CLOSE:
            depth.append(_CLOSE[ch])
        elif depth and ch == depth[-1]:
            depth.pop()
            if not depth:
                return args + [text[start:i]]
        elif ch == "," and len(depth) == 1:
            args.append(text[start:i])
            start = i + 1
    return args + [text[start:]]

