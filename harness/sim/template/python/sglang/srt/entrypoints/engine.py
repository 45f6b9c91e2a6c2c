"""Launch the scheduler processes and watch them (main process).

Crash handling follows SGLang: a scheduler that hits an exception sends SIGQUIT
to this process, which kills the whole process tree, itself included (SIGKILL,
so the shell sees exit status 137).
"""

import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import signal
import tempfile
import threading

from sglang._sim import ignore_sigterm, milestone
from sglang.srt.managers.scheduler import run_scheduler_process
from sglang.srt.managers.tokenizer_manager import SchedulerGroup, TokenizerManager
from sglang.srt.server_args import PortArgs
from sglang.srt.utils import configure_logger, kill_process_tree

logger = logging.getLogger(__name__)

_state = {"tokenizer_manager": None, "dist_dir": None}


def _cleanup_dist_dir():
    path = _state.get("dist_dir")
    if path:
        shutil.rmtree(path, ignore_errors=True)
        _state["dist_dir"] = None


def sigquit_handler(signum, frame):
    if _state.get("dying"):
        return
    _state["dying"] = True
    tokenizer_manager = _state["tokenizer_manager"]
    if tokenizer_manager is not None and tokenizer_manager.running_phase:
        logger.error(f"SIGQUIT received. {signum=}, {frame=}. It usually means one child failed.")
    else:
        logger.error("Received sigquit from a child process. It usually means the child failed.")
    _cleanup_dist_dir()
    kill_process_tree(os.getpid())


def _set_envs_and_config(server_args):
    if ignore_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The child processes will send SIGQUIT to this process when any error happens.
    # This process then cleans up the whole process tree.
    signal.signal(signal.SIGQUIT, sigquit_handler)


def _scheduler_died(rank, proc):
    proc.join(timeout=10)
    return RuntimeError(
        f"Rank {rank} scheduler died during initialization "
        f"(exit code: {proc.exitcode}). "
        f"If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. "
        f"Run `dmesg -T | grep -i oom` to check."
    )


def _launch_subprocesses(server_args):
    """Start one scheduler process per (DP, TP) rank; return the TokenizerManager once all are ready."""
    configure_logger(server_args)
    logger.info(f"server_args={server_args}")
    milestone("server-args")
    # The tokenizer side (TemplateManager) before the schedulers start; no chat template given.
    logger.info("Using default HuggingFace chat template with detected content format: string")
    _set_envs_and_config(server_args)

    ctx = mp.get_context("spawn")
    _state["dist_dir"] = tempfile.mkdtemp(prefix="sglang-sim-dist-")
    groups, pending = [], {}
    for dp_rank in range(server_args.dp_size):
        port_args = PortArgs(
            nccl_port=server_args.port + 100 + dp_rank,
            dist_dir=os.path.join(_state["dist_dir"], "dp%d" % dp_rank),
        )
        procs, send_conns, recv_conn = [], [], None
        for tp_rank in range(server_args.tp_size):
            rank = dp_rank * server_args.tp_size + tp_rank
            gpu_id = server_args.base_gpu_id + rank * server_args.gpu_id_step
            reader, writer = ctx.Pipe(duplex=False)
            req_reader, req_writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=run_scheduler_process,
                args=(server_args, port_args, gpu_id, tp_rank, dp_rank, writer, req_reader, os.getpid()),
                name="scheduler_%d" % rank,
            )
            proc.start()
            writer.close()
            req_reader.close()
            procs.append(proc)
            send_conns.append(req_writer)
            pending[reader] = (rank, proc)
            if tp_rank == 0:
                recv_conn = reader
        groups.append(SchedulerGroup(dp_rank, procs, send_conns, recv_conn))

    # Wait for every rank to report its init info (or to die trying).
    infos = []
    sentinels = {proc.sentinel: (rank, proc) for rank, proc in pending.values()}
    while pending:
        ready = mp.connection.wait(list(pending) + list(sentinels))
        for obj in ready:
            if obj in pending:
                rank, proc = pending[obj]
                try:
                    infos.append(obj.recv())
                except EOFError:
                    raise _scheduler_died(rank, proc)
                del pending[obj]
                sentinels.pop(proc.sentinel, None)
            elif obj in sentinels:
                rank, proc = sentinels[obj]
                raise _scheduler_died(rank, proc)

    rank0 = [info for info in infos if info["tp_rank"] == 0]
    scheduler_info = {
        "max_total_num_tokens": min(info["max_total_num_tokens"] for info in infos),
        "max_req_input_len": rank0[0]["max_req_input_len"],
        "max_running_requests": sum(info["max_running_requests"] for info in rank0),
    }
    tokenizer_manager = TokenizerManager(server_args, groups, scheduler_info)
    _state["tokenizer_manager"] = tokenizer_manager
    return tokenizer_manager, scheduler_info


def start_subprocess_watchdog(tokenizer_manager):
    """Notice a scheduler that dies without telling us (segfault, SIGKILL, ...)."""
    procs = [proc for group in tokenizer_manager.groups for proc in group.procs]
    names = {proc.sentinel: proc for proc in procs}

    def watch():
        alive = dict(names)
        while alive:
            for sentinel in mp.connection.wait(list(alive)):
                proc = alive.pop(sentinel)
                proc.join(timeout=1)
                if tokenizer_manager.gracefully_exit or proc.exitcode == 0:
                    continue
                logger.error(
                    f"Subprocess {proc.name} (pid={proc.pid}) crashed "
                    f"with exit code {proc.exitcode}. "
                    f"Triggering SIGQUIT for cleanup..."
                )
                os.kill(os.getpid(), signal.SIGQUIT)
                return

    thread = threading.Thread(target=watch, name="subprocess-watchdog", daemon=True)
    thread.start()
    return thread


def shutdown_subprocesses(tokenizer_manager, timeout=2.0):
    """Ask the schedulers to exit, wait a little, then kill what is left."""
    tokenizer_manager.shutdown_schedulers()
    procs = [proc for group in tokenizer_manager.groups for proc in group.procs]
    deadline_each = timeout / max(len(procs), 1)
    for proc in procs:
        proc.join(timeout=deadline_each)
    stragglers = [proc.pid for proc in procs if proc.is_alive()]
    if stragglers:
        logger.warning(f"Schedulers still alive after ShutdownReq, killing them: {stragglers}")
    kill_process_tree(os.getpid(), include_parent=False)
    _cleanup_dist_dir()
