"""The agent's own dead man's switch: a small process that outlives the agent.

The link's dead man's switch covers a controller that dies or a connection that drops; nothing in the
agent can cover the agent itself being killed (SIGKILL, the OOM killer). So, once it holds the repo's
lock, the agent starts this watchdog in its own session. It waits for the agent to end; if the agent
left its journal behind, the watchdog takes the lock (the kernel released the dead agent's), stops the
journal's server, waits for its GPU memory and restores the tree — within seconds, with no controller
and no later harness command involved. Its report is kept in `.git/harness/watchdog.json`, where any
other recovery (a preflight's, `harness recover`) keeps its own too.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from typing import Any

from ..common.protocol import Journal, LockHolder, RecoveryReport
from .hostio import write_json_atomic
from .lock import WATCHDOG, RepoLock
from .procs import STARTED, proc_stat
from .status import stop_recorded_server
from .tree import UNVERIFIED, Tree

POLL_S = 0.2
REPORT = "watchdog.json"


def spawn(repo: str, scratch_dir: str, env: dict[str, str], stop_grace: float, gpu_release: float) -> None:
    """Start the watchdog for this agent (the running zipapp, with `--watchdog`)."""
    me = proc_stat(os.getpid())
    args = {"repo": repo, "scratch": scratch_dir, "agent_pid": os.getpid(), "agent_start": me[3] if me else None,
            "stop_grace": stop_grace, "gpu_release": gpu_release, "path": env.get("PATH", "")}
    encoded = base64.b64encode(json.dumps(args).encode()).decode()
    os.makedirs(scratch_dir, exist_ok=True)
    with open(os.path.join(scratch_dir, "watchdog.log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, sys.argv[0], "--watchdog", encoded], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True, close_fds=True)
    STARTED.add(proc.pid)


def agent_alive(pid: int, start: Any) -> bool:
    st = proc_stat(pid)
    return st is not None and st[0] != "Z" and (start is None or st[3] == start)


def is_dead_agents(journal: Journal, agent_pid: int) -> bool:
    """Is this journal the watched agent's unfinished work? Not when the agent reverted itself and could
    not verify (it kept the journal on purpose, for the next preflight to refuse the tree)."""
    return journal.agent_pid == agent_pid and journal.state != UNVERIFIED


def watch(encoded: str) -> int:
    args = json.loads(base64.b64decode(encoded))
    while agent_alive(args["agent_pid"], args["agent_start"]):
        time.sleep(POLL_S)
    died_at = time.time()
    tree = Tree(args["repo"], args["scratch"])
    harness_dir = tree.open()
    journal = tree.leftover_journal()
    if journal is None or not is_dead_agents(journal, args["agent_pid"]):
        return 0  # the agent finished its own work (or another agent's journal: not ours to touch)
    lock = RepoLock(harness_dir)
    lock.acquire(args["repo"], LockHolder(run_id=journal.run_id, attempt_id=WATCHDOG), 30.0,
                 lambda: time.sleep(POLL_S))
    try:
        journal = tree.leftover_journal()  # unchanged unless someone recovered while we waited
        if journal is None or not is_dead_agents(journal, args["agent_pid"]):
            return 0
        env = dict(os.environ, PATH=args["path"] or os.environ.get("PATH", ""))
        stop = stop_recorded_server(journal, float(args["stop_grace"]), env, float(args["gpu_release"]))
        revert = tree.revert(journal)
        save_report(tree, RecoveryReport(journal=journal, stop=stop, revert=revert, by="watchdog",
                                         took_s=round(time.time() - died_at, 3)))
    finally:
        lock.release()
    return 0


def save_report(tree: Tree, report: RecoveryReport) -> None:
    """Keep what a recovery did — the watchdog's or any other (`harness recover`, a preflight, a controller
    whose agent died, whichever took the lock first) — for the next preflight: GPU memory that stayed held
    must refuse the next attempt, whoever stopped the server."""
    assert tree.harness_dir is not None
    write_json_atomic(os.path.join(tree.harness_dir, REPORT), _without_nones(report.to_dict()))


def last_report(tree: Tree) -> RecoveryReport | None:
    """What the last recovery on this repo did (for `harness recover`, a controller whose agent died, and
    the next preflight's check of GPU memory)."""
    assert tree.harness_dir is not None
    try:
        with open(os.path.join(tree.harness_dir, REPORT)) as f:
            report = json.load(f)
        return RecoveryReport.from_disk(report) if isinstance(report, dict) else None
    except (OSError, ValueError):  # unreadable, or not a report (ProtocolError is a ValueError)
        return None


def _without_nones(report: dict[str, Any]) -> dict[str, Any]:
    """The report as earlier agents wrote it: a stop or revert fact that does not apply is left out."""
    out = dict(report)
    for part in ("stop", "revert"):
        out[part] = {k: v for k, v in out[part].items() if v is not None}
    if out.get("took_s") is None:
        out.pop("took_s", None)
    return out
