"""Looking at a host without changing it (`harness status`), and ending a journal's server on recovery."""

from __future__ import annotations

import os
import signal
from typing import Optional

from ..common.protocol import Journal, RepoStatus, StopReport
from .gpu import gpu_apps, query_gpus, wait_gpu_release
from .hostio import read_json
from .lock import RepoLock
from .procs import group_members, marked_pids, proc_stat, stop_group
from .tree import Git


def host_status(repo: str, env: dict[str, str]) -> RepoStatus:
    """What is going on in a target repo: its lock, a leftover journal, the GPUs."""
    out = RepoStatus(repo=repo, exists=os.path.isdir(repo))
    git = Git(repo)
    gitdir = git.gitdir() if out.exists else None
    if gitdir is None:
        return out
    out.git = True
    hdir = os.path.join(gitdir, "harness")
    out.lock = RepoLock(hdir).probe()
    try:
        data = read_json(os.path.join(hdir, "journal.json"))
        out.journal = Journal.read(data) if isinstance(data, dict) else None
    except (OSError, ValueError):
        out.journal = None
    out.gpus = query_gpus(env)
    apps = gpu_apps(env)
    out.gpu_apps = {str(pid): mib for pid, mib in apps.items()} if apps is not None else None
    head = git("rev-parse", "--verify", "-q", "HEAD", check=False)
    out.head = head.stdout.decode().strip() or None  # None: a repo without commits
    out.dirty = git.status_entries()
    return out


def stop_recorded_server(journal: Journal, grace: float, env: Optional[dict[str, str]] = None,
                         gpu_release: float = 0.0) -> StopReport:
    """Recovery: end the journal's server only if that pid is still the same process (start time), then
    wait for its GPU memory as after a normal stop (what is still held is reported as `gpu_dirty`)."""
    srv = journal.server
    if not srv:
        return StopReport(state="never-launched")
    st = proc_stat(int(srv.pid))
    same = st is not None and srv.start is not None and st[3] == int(srv.start)
    marker = journal.marker
    known = set(group_members(int(srv.pgid)) if same else []) | set(marked_pids(marker)) | {int(srv.pid)}
    info: StopReport
    if not same and not group_members(int(srv.pgid)) and not marked_pids(marker):
        info = StopReport(state="already-gone")
    elif not same:
        # The leader is gone or its pid was reused: only the marker proves which processes are ours.
        pids = marked_pids(marker)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        info = StopReport(state="killed-marked", pids=pids)
    else:
        info = stop_group(None, int(srv.pgid), marker, grace)
        info.state = "stopped"
    if env is not None:
        held = wait_gpu_release(known, env, gpu_release)
        if held:
            info.gpu_dirty = held
    return info
