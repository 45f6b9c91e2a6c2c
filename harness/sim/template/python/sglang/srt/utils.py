"""Common utilities (logging, process trees, GPU capability checks)."""

import logging
import os
import signal
import sys
import traceback

from sglang._sim.gpus import device_capability

logger = logging.getLogger(__name__)


def configure_logger(server_args, prefix=""):
    fmt = "[%(asctime)s{}] %(message)s".format(prefix)
    logging.basicConfig(
        level=getattr(logging, server_args.log_level.upper(), logging.INFO),
        format=fmt,
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )


def get_exception_traceback():
    etype, value, tb = sys.exc_info()
    return "".join(traceback.format_exception(etype, value, tb))


# ------------------------------------------------------------------ hardware


def is_sm90_supported():
    return device_capability()[0] == 9


def is_sm100_supported():
    return device_capability()[0] == 10


def is_sm120_supported():
    return device_capability()[0] == 12


def is_blackwell_supported():
    return device_capability()[0] in (10, 11, 12)


# ------------------------------------------------------------------ processes


def _children_by_parent():
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid):
    children = _children_by_parent()
    if children is None:  # no /proc: fall back to our own multiprocessing children
        import multiprocessing

        return [p.pid for p in multiprocessing.active_children()] if pid == os.getpid() else []
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_process_tree(parent_pid, include_parent=True, skip_pid=None):
    """Kill the process and all its child processes (SIGKILL)."""
    logger.info(
        "kill_process_tree called: parent_pid=%s, include_parent=%s, pid=%s"
        % (parent_pid, include_parent, os.getpid())
    )
    if parent_pid is None:
        parent_pid = os.getpid()
        include_parent = False
    for child in descendants(parent_pid):
        if child == skip_pid:
            continue
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if include_parent:
        if parent_pid == os.getpid():
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
            sys.exit(0)
        try:
            os.kill(parent_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_itself_when_parent_died():
    if sys.platform != "linux":
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
