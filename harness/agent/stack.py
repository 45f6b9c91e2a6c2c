"""The environment fingerprint: what the server runs on beside SGLang's source — torch, its CUDA runtime,
sgl-kernel, Triton, FlashInfer, every installed distribution (as one hash), the driver, the clocks and the
power limit. Read at preflight, changing nothing; a fact that cannot be read is None, never an error.

Two processes: one probe in the target's Python (the server's interpreter, with the server's environment),
which reads package metadata and torch/version.py without importing anything heavy (importing torch takes
seconds on a GPU host), and one `nvidia-smi --query-gpu` that also lists the GPUs (`query_gpus`' fields),
plus `nvidia-smi --version` for the CUDA version of the driver. Parsing is pure (`stack_from_probe`,
`clocks_from_row`, `cuda_from_version_text`), tested on the texts the tools print.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Mapping
from typing import Any, Optional

from ..common.protocol import GpuClocks, GpuInfo, StackFacts
from .gpu import GPU_FIELDS, gpu_info, gpu_rows, query_gpus, smi_text
from .hostio import run

PROBE_TIMEOUT_S = 30.0

# Distribution names, each fact's first that is installed (PEP 503-normalised).
DISTS = {"torch": ("torch",), "sgl_kernel": ("sgl-kernel", "sglang-kernel"), "triton": ("triton", "pytorch-triton"),
         "flashinfer": ("flashinfer-python",), "sglang": ("sglang",)}

# Runs in the target's Python (>= 3.8, standard library): every distribution it sees, first on sys.path winning
# as for an import, and the literal assignments of torch/version.py (what torch.version.cuda returns, written by
# torch's build), found with find_spec, which imports nothing for a top-level name.
PROBE = r"""
import ast, importlib.util, json, os, re
out = {"dists": None, "torch_version_py": None}
try:
    import importlib.metadata as md
    seen = {}
    for d in md.distributions():
        name = d.metadata["Name"]
        if name:
            seen.setdefault(re.sub(r"[-_.]+", "-", name).lower(), d.version)
    out["dists"] = seen
except Exception:
    pass
try:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            tree = ast.parse(f.read())
        found = {}
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None
            if isinstance(target, ast.Name):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    continue
                if value is None or isinstance(value, (str, bool, int)):
                    found[target.id] = value
        out["torch_version_py"] = found
except Exception:
    pass
print(json.dumps(out))
"""

# nvidia-smi's names of the fingerprint's per-GPU facts, asked in the same call as the GPUs' own.
CLOCK_FIELDS = {"clocks.sm": "sm_mhz", "clocks.mem": "mem_mhz", "clocks.max.sm": "sm_max_mhz",
                "clocks.max.mem": "mem_max_mhz", "clocks.applications.graphics": "app_sm_mhz",
                "clocks.applications.memory": "app_mem_mhz",
                "clocks.default_applications.graphics": "default_app_sm_mhz",
                "clocks.default_applications.memory": "default_app_mem_mhz",
                "enforced.power.limit": "power_limit_w", "power.default_limit": "default_power_limit_w",
                "persistence_mode": "persistence_mode"}
SMI_FIELDS = GPU_FIELDS + ("driver_version",) + tuple(CLOCK_FIELDS)


# ============================================================================ parsing (pure)


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them: `Flashinfer_Python` is `flashinfer-python`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def packages_sha256(dists: Mapping[str, str]) -> str:
    """The packages hash: sha256 of the sorted `name==version` lines (names normalised)."""
    lines = sorted(f"{normalized(n)}=={v}" for n, v in dists.items())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def stack_from_probe(text: str) -> StackFacts:
    """The package facts from the probe's output (one JSON object); whatever is missing or malformed is None."""
    try:
        data = json.loads(text)
    except ValueError:
        return StackFacts()
    if not isinstance(data, dict):
        return StackFacts()
    raw = data.get("dists")
    dists = {normalized(str(k)): str(v) for k, v in raw.items() if isinstance(v, str)} if isinstance(raw, dict) \
        else None
    facts = StackFacts()
    if dists is not None:
        for fact, names in DISTS.items():
            setattr(facts, fact, next((dists[n] for n in names if n in dists), None))
        facts.packages, facts.packages_sha256 = len(dists), packages_sha256(dists)
    torch_py = data.get("torch_version_py")
    if isinstance(torch_py, dict):
        cuda = torch_py.get("cuda")
        facts.cuda_runtime = cuda if isinstance(cuda, str) else None
        if facts.torch is None and isinstance(torch_py.get("__version__"), str):
            facts.torch = torch_py["__version__"]  # a torch without metadata (a source build on the path)
    return facts


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", ""


def clocks_from_row(row: Mapping[str, str]) -> GpuClocks:
    """One GPU's clocks and power limit from its nvidia-smi row (field → its words, `nounits`)."""
    out = GpuClocks(index=row.get("index", ""))
    for field, name in CLOCK_FIELDS.items():
        text = row.get(field, "").strip()
        if name == "persistence_mode":
            value: Any = {"Enabled": True, "Disabled": False}.get(text)
        else:
            number = _number(text)
            value = None if number is None else number if name.endswith("_w") else int(number)
        setattr(out, name, value)
    return out


def cuda_from_version_text(text: str) -> Optional[str]:
    """The driver's CUDA version from `nvidia-smi --version` ("CUDA Version : 12.8") or its summary table's
    header ("CUDA Version: 12.8")."""
    m = re.search(r"CUDA Version\s*:\s*([0-9][0-9.]*)", text)
    return m.group(1) if m else None


def driver_of(rows: list[dict[str, str]]) -> Optional[str]:
    versions = {r.get("driver_version", "").strip() for r in rows} - {"", "[N/A]", "N/A"}
    return ", ".join(sorted(versions)) or None


# ============================================================================ reading the host


def probe_packages(python: str, env: Mapping[str, str]) -> StackFacts:
    """The package facts as the server's Python sees them (its PYTHONPATH included): one process, bounded."""
    try:
        p = run([python, "-c", PROBE], env=env, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return StackFacts()
    return stack_from_probe(p.stdout.decode(errors="replace")) if p.returncode == 0 else StackFacts()


def read_stack(python: Optional[str], env: Mapping[str, str]) -> tuple[StackFacts, Optional[list[GpuInfo]]]:
    """The fingerprint, and the GPUs the server sees (what `query_gpus` answers, from the same nvidia-smi
    call). An nvidia-smi that refuses a field (an older driver) still lists the GPUs: asked again for those
    alone, its clocks unknown."""
    facts = probe_packages(python, env) if python else StackFacts()
    rows = gpu_rows(env, SMI_FIELDS)
    if rows is None:
        return facts, query_gpus(env)
    facts.driver = driver_of(rows)
    facts.gpus = [clocks_from_row(r) for r in rows]
    version = smi_text(env, ["--version"])
    facts.cuda_driver = cuda_from_version_text(version) if version else None
    return facts, [gpu_info(r) for r in rows]
