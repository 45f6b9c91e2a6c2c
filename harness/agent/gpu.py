"""The host's GPUs through nvidia-smi: what they are, which processes hold memory, waiting for release."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from typing import Optional

from ..common.protocol import GpuInfo
from .hostio import run


def _smi(env: Mapping[str, str], query: str) -> Optional[list[list[str]]]:
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not exe:
        return None
    try:
        p = run([exe, query, "--format=csv,noheader,nounits"], env=env, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return [[x.strip() for x in line.split(",")] for line in p.stdout.decode(errors="replace").splitlines()]


def query_gpus(env: Mapping[str, str]) -> Optional[list[GpuInfo]]:
    """One entry per GPU the server would see (index, uuid, name, compute_cap, memory); None without
    nvidia-smi."""
    rows = _smi(env, "--query-gpu=index,uuid,name,compute_cap,memory.total,memory.used")
    if rows is None:
        return None
    gpus = [{"index": r[0], "uuid": r[1], "name": r[2], "compute_cap": r[3], "memory_total_mib": r[4],
             "memory_used_mib": r[5]} for r in rows if len(r) >= 6]
    return [GpuInfo(**g) for g in visible_gpus(gpus, env.get("CUDA_VISIBLE_DEVICES"))]


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
