"""Processes on the host: process groups, the attempt's marker, stragglers, listening ports.

Only processes the attempt started are ever signalled: its process group, and processes that carry its
marker (HARNESS_ATTEMPT=<run>/<attempt>) in their environment — only ours can carry it. Never by name.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from typing import Optional

from ..common.protocol import StopReport

MARKER_ENV = "HARNESS_ATTEMPT"
TICK_S = 0.05
# Children this agent started on purpose (the server, benchmark clients, its watchdog): never orphans.
STARTED: set[int] = set()


def proc_stat(pid: int) -> Optional[tuple[str, int, int, int]]:
    """(state, ppid, pgid, starttime) from /proc/<pid>/stat, or None when gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    fields = data[data.rfind(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def group_members(pgid: Optional[int]) -> list[int]:
    out = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st and st[2] == pgid and st[0] != "Z":
            out.append(pid)
    return out


def marked_pids(marker: str) -> list[int]:
    """Live processes whose environment carries our attempt marker (only ours can carry it)."""
    needle = ("%s=%s" % (MARKER_ENV, marker)).encode()
    out = []
    for pid in all_pids():
        if pid == os.getpid():
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        st = proc_stat(pid)
        if needle in env and st and st[0] != "Z":
            out.append(pid)
    return out


def live_markers() -> set[str]:
    """The attempt markers live processes carry (`harness gc` keeps those attempts' folders): any repo's, any
    run's, as far as this user may read their environments."""
    prefix = ("%s=" % MARKER_ENV).encode()
    found: set[str] = set()
    for pid in all_pids():
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        found.update(item[len(prefix):].decode("utf-8", "replace") for item in env if item.startswith(prefix))
    return found


def reap_adopted(exclude: Iterable[int] = ()) -> None:
    """Reap zombies re-parented to us (we are a child subreaper), never our own Popen children."""
    me = os.getpid()
    skip = set(exclude)
    for pid in all_pids():
        if pid in skip:
            continue
        st = proc_stat(pid)
        if st and st[1] == me and st[0] == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def adopted_orphans(exclude: Iterable[int] = ()) -> list[int]:
    """Live processes re-parented to us (we are a child subreaper) and all their descendants: what a
    server left behind by double-forking, even with setsid() and a cleared environment (no marker)."""
    if not is_subreaper():
        return []  # orphans go to init, not to us; our children are all ones we (or our host process) started
    skip = set(exclude) | STARTED | {os.getpid()}
    by_parent: dict[int, list[int]] = {}
    for pid in all_pids():
        st = proc_stat(pid)
        if st and st[0] != "Z":
            by_parent.setdefault(st[1], []).append(pid)
    found: list[int] = []
    todo = [p for p in by_parent.get(os.getpid(), []) if p not in skip]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(by_parent.get(pid, []))
    return found


def is_subreaper() -> bool:
    try:
        flag = ctypes.c_int(0)
        ctypes.CDLL(None, use_errno=True).prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        return bool(flag.value)
    except Exception:
        return False


def become_subreaper() -> None:
    """Orphans of the server (a grandchild whose parent died) are re-parented to us, not to init."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_group(popen: Optional[subprocess.Popen[bytes]], pgid: int, marker: str, grace: float) -> StopReport:
    """TERM the group, wait `grace`, KILL it, then end any marked straggler by pid; confirm all gone."""
    t0 = time.monotonic()
    info = StopReport(signal=None, stragglers=[], left=[])

    def alive() -> list[int]:
        reap_adopted(exclude=(popen.pid,) if popen is not None else ())
        if popen is not None:
            popen.poll()
        left = group_members(pgid) + [p for p in marked_pids(marker) if proc_stat(p)]
        if popen is not None:
            left += [p for p in adopted_orphans(exclude=[popen.pid] + left)]
        return left

    def wait_gone(seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not alive():
                return True
            time.sleep(TICK_S)
        return not alive()

    def signal_all(sig: int) -> None:
        # The group, what carries our marker outside it (a benchmark client in its own session) and what was
        # re-parented to us: the grace period is for all of them at once, not one after the other.
        kill_group(pgid, sig)
        members = set(group_members(pgid))
        others = [p for p in marked_pids(marker) if p not in members]
        if popen is not None:
            others += adopted_orphans(exclude=[popen.pid] + others)
        outside.update(others)
        for pid in others:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    outside: set[int] = set()  # ended although outside the group: marked stragglers, orphans
    if alive():
        info.signal = "TERM"
        signal_all(signal.SIGTERM)
        if not wait_gone(grace):
            info.signal = "KILL"
            signal_all(signal.SIGKILL)
            wait_gone(5.0)
    # Escaped the group (setsid) but carries our marker; or carries nothing but was re-parented to us (only
    # the agent that launched the server is their subreaper: a recovering agent has no popen).
    stragglers = marked_pids(marker)
    if popen is not None:
        stragglers += [p for p in adopted_orphans(exclude=(popen.pid,)) if p not in stragglers]
    for pid in stragglers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    info.stragglers = sorted(outside.union(stragglers))
    wait_gone(5.0)
    info.left = alive()
    info.stop_s = round(time.monotonic() - t0, 4)
    return info


def listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            continue
    return inodes


def pids_holding(inodes: set[str], pids: Iterable[int]) -> list[int]:
    holders = []
    targets = set("socket:[%s]" % i for i in inodes)
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)) in targets:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders


def pick_free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((host if host not in ("0.0.0.0", "::") else "", 0))
        return int(s.getsockname()[1])
    finally:
        s.close()


def port_free(host: str, port: int) -> bool:
    if listening_inodes(port):
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()
