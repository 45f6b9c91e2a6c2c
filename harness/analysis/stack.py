"""Whether two records ran on the same stack (pure): the facts of a record's environment fingerprint that
matter to a measurement, a short id of them, and what differs between two.

The rule (docs/reading-the-table.md "Same stack?"): rows whose fingerprints differ in a fact that changes
what the GPU runs — torch, the CUDA runtime, the driver's major version, sgl-kernel, Triton, FlashInfer,
SGLang, the GPU model, the power limit, set clocks — are not comparable. Rows that differ only in the
packages hash (any other installed distribution) or the driver's minor version get a note: such a change
rarely touches the serving path, and calling every two nights apart after a routine `pip install` would
make the verdicts useless; the note says where to look when a ratio surprises. A fact one side did not
record (an older record, no nvidia-smi) is never called a difference.
"""

from __future__ import annotations

import hashlib
import json

from ..common.outcome import GpuClocks
from ..results.schemas import Record

Fingerprint = dict[str, str | None]

# The facts that make two rows not comparable, in the order notes name them (the GPU model is in the id too,
# but its difference is the table's own `gpu` check, not repeated here).
MATTERS = ("torch", "CUDA runtime", "driver", "sgl-kernel", "Triton", "FlashInfer", "sglang", "power limit",
           "clocks")
NOTE_ONLY = ("driver version", "packages")


def _distinct(values: list[str]) -> str | None:
    seen = list(dict.fromkeys(values))
    return "/".join(seen) if seen else None


def _power(gpus: list[GpuClocks]) -> str | None:
    if not gpus or any(g.power_limit_w is None for g in gpus):
        return None
    return _distinct([f"{g.power_limit_w:g} W" for g in gpus])


def _clocks(gpus: list[GpuClocks]) -> str | None:
    """"default", or the application clocks set apart from the GPU's defaults (`nvidia-smi -ac`)."""
    pairs = [((g.app_sm_mhz, g.app_mem_mhz), (g.default_app_sm_mhz, g.default_app_mem_mhz)) for g in gpus]
    if not pairs or any(None in app or None in default for app, default in pairs):
        return None
    set_ = _distinct([f"SM {app[0]}/mem {app[1]} MHz" for app, default in pairs if app != default])
    return f"set {set_}" if set_ else "default"


def fingerprint(rec: Record) -> Fingerprint | None:
    """The facts of a record's stack that its comparability is judged on; None for a record without one."""
    s = rec.provenance.stack
    if s is None:
        return None
    gpus = s.gpus or []
    names = [str(g.get("name")) for g in rec.provenance.gpu or [] if g.get("name")]
    return {"torch": s.torch, "CUDA runtime": s.cuda_runtime,
            "driver": s.driver.split(".")[0] if s.driver else None, "sgl-kernel": s.sgl_kernel,
            "Triton": s.triton, "FlashInfer": s.flashinfer, "sglang": s.sglang, "GPU": _distinct(names),
            "power limit": _power(gpus), "clocks": _clocks(gpus),
            "driver version": s.driver, "packages": s.packages_sha256[:8] if s.packages_sha256 else None}


def stack_id(fp: Fingerprint | None) -> str | None:
    """8 hex digits naming the facts that matter (and the GPU model): equal ids, comparable stacks."""
    if fp is None:
        return None
    key = {k: fp.get(k) for k in MATTERS + ("GPU",)}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]


def _differ(row: Fingerprint, base: Fingerprint, names: tuple[str, ...]) -> list[str]:
    return [f"{k} {row[k]} vs {base[k]}" for k in names
            if row.get(k) is not None and base.get(k) is not None and row[k] != base[k]]


def differences(row: Fingerprint | None, base: Fingerprint | None) -> tuple[list[str], list[str]]:
    """(what makes `row` not comparable to `base`, what only deserves a note), each as "torch A vs B"."""
    if row is None or base is None:
        return [], []
    matters = _differ(row, base, MATTERS)
    notes = _differ(row, base, NOTE_ONLY)
    if any(m.startswith("driver ") for m in matters):  # the major version said it already
        notes = [n for n in notes if not n.startswith("driver version ")]
    return matters, notes


def mixed(records: list[Record]) -> list[str]:
    """The stack ids of records pooled in one row, when there are several (a sweep over unlike hosts)."""
    ids = {i for i in (stack_id(fingerprint(r)) for r in records) if i}
    return sorted(ids) if len(ids) > 1 else []


def legend(stacks: list[tuple[str, Fingerprint]]) -> list[str]:
    """One line per stack after the first (rows' order): how it differs from the first, what matters first."""
    seen = dict(stacks)
    if len(seen) < 2:
        return []
    (first, base), *others = seen.items()
    out = []
    for sid, fp in others:
        matters, notes = differences(fp, base)
        out.append(f"stack {sid} differs from {first} in " + (", ".join(matters + notes) or "facts the other lacks"))
    return out
