"""The host's GPUs through nvidia-smi: what they are, which processes hold memory, waiting for release."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from typing import Optional

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


def query_gpus(env: Mapping[str, str]) -> Optional[list[dict[str, str]]]:
    """One entry per GPU (index, name, compute_cap, memory); None without nvidia-smi."""
    rows = _smi(env, "--query-gpu=index,name,compute_cap,memory.total,memory.used")
    if rows is None:
        return None
    return [{"index": r[0], "name": r[1], "compute_cap": r[2], "memory_total_mib": r[3], "memory_used_mib": r[4]}
            for r in rows if len(r) >= 5]


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
