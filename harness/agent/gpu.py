"""The host's GPUs through nvidia-smi: what they are, which processes hold memory, waiting for release."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from typing import Optional

from ..common.protocol import GpuInfo, GpuState
from .hostio import run

# What `query_gpus` asks nvidia-smi for each GPU (stack.py asks for more in the same call).
GPU_FIELDS = ("index", "uuid", "name", "compute_cap", "memory.total", "memory.used")
# What `gpu_state` asks for at a bench case's start and end, and while a cool-down waits to settle.
STATE_FIELDS = ("index", "uuid", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "memory.used")


def smi_text(env: Mapping[str, str], args: list[str]) -> Optional[str]:
    """nvidia-smi's output; None without nvidia-smi, when it fails (an unknown field: an older driver) or hangs."""
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not exe:
        return None
    try:
        p = run([exe] + args, env=env, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.decode(errors="replace") if p.returncode == 0 else None


def _smi(env: Mapping[str, str], query: str) -> Optional[list[list[str]]]:
    text = smi_text(env, [query, "--format=csv,noheader,nounits"])
    return None if text is None else [[x.strip() for x in line.split(",")] for line in text.splitlines()]


def gpu_rows(env: Mapping[str, str], fields: tuple[str, ...]) -> Optional[list[dict[str, str]]]:
    """One row per GPU the server would see (field → nvidia-smi's words); None without nvidia-smi. `fields`
    start with GPU_FIELDS."""
    rows = _smi(env, "--query-gpu=" + ",".join(fields))
    if rows is None:
        return None
    return visible_gpus([dict(zip(fields, r)) for r in rows if len(r) >= len(fields)],
                        env.get("CUDA_VISIBLE_DEVICES"))


def gpu_info(row: Mapping[str, str]) -> GpuInfo:
    return GpuInfo(index=row["index"], uuid=row["uuid"], name=row["name"], compute_cap=row["compute_cap"],
                   memory_total_mib=row["memory.total"], memory_used_mib=row["memory.used"])


def query_gpus(env: Mapping[str, str]) -> Optional[list[GpuInfo]]:
    """One entry per GPU the server would see (index, uuid, name, compute_cap, memory); None without
    nvidia-smi."""
    rows = gpu_rows(env, GPU_FIELDS)
    return None if rows is None else [gpu_info(r) for r in rows]


def _number(text: Optional[str]) -> Optional[float]:
    """nvidia-smi's number ('1980', '75.12'); None for '[N/A]', '[Not Supported]' or nothing."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _whole(text: Optional[str]) -> Optional[int]:
    value = _number(text)
    return None if value is None else int(round(value))


def state_from_row(row: Mapping[str, str]) -> GpuState:
    """One GPU's clocks, temperature, power draw and memory from its STATE_FIELDS row (`nounits`)."""
    return GpuState(index=row.get("index", ""), sm_mhz=_whole(row.get("clocks.sm")),
                    mem_mhz=_whole(row.get("clocks.mem")), temperature_c=_number(row.get("temperature.gpu")),
                    power_w=_number(row.get("power.draw")), memory_used_mib=_whole(row.get("memory.used")))


def gpu_state(env: Mapping[str, str]) -> Optional[list[GpuState]]:
    """The server's GPUs now (one nvidia-smi query); None without nvidia-smi."""
    rows = gpu_rows(env, STATE_FIELDS)
    return None if rows is None else [state_from_row(r) for r in rows]


def visible_gpus(gpus: list[dict[str, str]], cuda_visible_devices: Optional[str]) -> list[dict[str, str]]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves to a process, in its order. nvidia-smi ignores the variable, so a
    host entry pinned to one GPU of eight would otherwise report (and record) all eight. Entries are indices
    or UUID prefixes ("GPU-8f3c..."); as in CUDA, the list ends at the first entry that names no GPU."""
    if cuda_visible_devices is None:
        return gpus
    seen: list[dict[str, str]] = []
    for token in (t.strip() for t in cuda_visible_devices.split(",")):
        match = [g for g in gpus if token and (g["index"] == token or
                                               (token.startswith("GPU-") and g.get("uuid", "").startswith(token)))]
        if len(match) != 1 or match[0] in seen:
            break
        seen.append(match[0])
    return seen


def gpu_apps(env: Mapping[str, str]) -> Optional[dict[int, int]]:
    """{pid: used MiB} of compute processes on the GPUs; None without nvidia-smi."""
    rows = _smi(env, "--query-compute-apps=pid,used_memory")
    if rows is None:
        return None
    apps: dict[int, int] = {}
    for parts in rows:
        if len(parts) >= 2 and parts[0].isdigit():
            try:
                apps[int(parts[0])] = apps.get(int(parts[0]), 0) + int(float(parts[1]))
            except ValueError:
                continue
    return apps


def wait_gpu_release(pids: Iterable[int], env: Mapping[str, str], timeout: float) -> Optional[dict[str, int]]:
    """Wait until none of `pids` holds GPU memory any more; return what is still held after `timeout`."""
    ours = set(pids)
    end = time.monotonic() + timeout
    while True:
        apps = gpu_apps(env)
        if apps is None:
            return None
        held = {str(pid): mib for pid, mib in apps.items() if pid in ours}
        if not held or time.monotonic() >= end:
            return held or None
        time.sleep(0.25)


def arch_of(compute_cap: object) -> Optional[str]:
    """'9.0' -> 'sm90', '12.0' -> 'sm120' (nvidia-smi's compute_cap)."""
    try:
        major, minor = str(compute_cap).strip().split(".")
        return "sm%d%d" % (int(major), int(minor))
    except ValueError:
        return None
