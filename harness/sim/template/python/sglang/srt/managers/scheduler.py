"""A scheduler that manages a tensor parallel GPU worker (one process per TP rank).

Rank 0 of each TP group runs the batching loop: it receives requests from the
main process, runs prefill and decode batches through the ModelRunner (whose
simulated device time decides how long each step takes) and sends the
generated token counts back. Other ranks only initialize and then idle, as the
model runs "in lockstep" with rank 0.
"""

import logging
import os
import queue
import signal
import sys
import threading
import time
from collections import deque

from sglang._sim import (
    crash_in_bench,
    device_seconds_to_wall,
    ignore_sigterm,
    jit_build_s,
    milestone,
    profile_stall_s,
)
from sglang._sim.gpus import load_facts
from sglang._sim.profiler import Recorder
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers.scheduler_components.profiler_manager import SchedulerProfilerManager
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils import configure_logger, get_exception_traceback, kill_itself_when_parent_died

logger = logging.getLogger(__name__)

EOS_TOKEN_ID = 2
ILLEGAL_MEMORY_ACCESS = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
    "below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


class Req:
    def __init__(self, rid, input_len, max_new_tokens, ignore_eos, internal, keys=()):
        self.rid = rid
        self.input_len = input_len
        self.keys = list(keys)  # the prompt's prefix keys (radix_cache.prefix_keys), for the prefix cache
        self.cached_len = 0  # leading tokens found in the prefix cache when it was prefilled
        self.max_new_tokens = max_new_tokens
        self.internal = internal
        self.output_len = 0
        # Without ignore_eos the simulated model stops on its own after a while.
        natural = 16 + (sum(map(ord, rid)) * 7919) % 240
        self.stop_at = max_new_tokens if ignore_eos else min(max_new_tokens, natural)

    @property
    def seq_len(self):
        return self.input_len + self.output_len

    def finish_reason(self):
        if self.output_len < self.stop_at:
            return None
        if self.stop_at < self.max_new_tokens:
            return {"type": "stop", "matched": EOS_TOKEN_ID}
        return {"type": "length", "length": self.max_new_tokens}


def _pow2(n):
    b = 1
    while b < n:
        b *= 2
    return b


def jit_shape(in_flight):
    """The prefill kernel a batch needs, as a JIT build specializes it: the requests in flight (running plus
    this batch: the concurrency the server sees) in tiles of 1, up to 8, then powers of two. Not the prompts'
    lengths: FlashInfer keys a JIT module on dtypes and head sizes, Triton on its constexprs and on whether an
    integer argument is 1 or a multiple of 16, so a new prompt length at a batch size already served builds
    nothing (a sim that built per length made every measured repeat with new lengths pay a build)."""
    return 1 if in_flight <= 1 else max(8, _pow2(in_flight))


def jit_log(message):
    """FlashInfer's JIT logger, with its own format (not SGLang's prefix), as a real server log shows it."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S") + ",%03d" % (int(time.time() * 1000) % 1000)
    sys.stderr.write("%s - INFO - flashinfer.jit: %s\n" % (stamp, message))
    sys.stderr.flush()


class Scheduler:
    def __init__(self, server_args, port_args, gpu_id, tp_rank, dp_rank=0):
        self.server_args = server_args
        self.tp_rank = tp_rank
        self.dp_rank = dp_rank
        self.model_config = ModelConfig(server_args.model_path, server_args.context_length, server_args.dtype)
        self.model_runner = ModelRunner(
            model_config=self.model_config,
            mem_fraction_static=server_args.mem_fraction_static,
            gpu_id=gpu_id,
            tp_rank=tp_rank,
            tp_size=server_args.tp_size,
            server_args=server_args,
            port_args=port_args,
            dp_rank=dp_rank,
        )
        self.max_total_num_tokens = self.model_runner.max_total_num_tokens
        self.max_running_requests = min(
            server_args.max_running_requests or self.model_runner.req_to_token_pool_size,
            self.model_runner.req_to_token_pool_size,
        )
        self.max_req_input_len = self.model_config.context_len - 1
        self.chunked_prefill_size = server_args.chunked_prefill_size
        if tp_rank == 0:
            logger.info(
                "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
                "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB"
                % (
                    self.max_total_num_tokens,
                    self.chunked_prefill_size,
                    server_args.max_prefill_tokens,
                    self.max_running_requests,
                    self.model_config.context_len,
                    self.model_runner.gpu_memory.available_gb(),
                )
            )
            logger.info(
                "Tree cache initialized: source=default impl=%s hybrid_swa=False hybrid_ssm=False "
                "hierarchical=False streaming_wrapped=False"
                % ("ChunkCache" if server_args.disable_radix_cache else "RadixCache")
            )
        milestone("scheduler-ready")

        self.waiting_queue = deque()
        self.running = []
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.last_decode_stats_tic = time.perf_counter()
        self.last_gen_throughput = 0.0
        self.finished_client_reqs = 0
        self.crash_after = crash_in_bench()
        self._reference_costs = None
        self.forward_ct = 0
        self.tree_cache = RadixCache(self.max_total_num_tokens, disable=server_args.disable_radix_cache)
        self.built_shapes = set()  # prefill shapes whose kernels this server has built (in memory, per server)
        sa = server_args
        backend = sa.decode_attention_backend or sa.attention_backend or "flashinfer"
        self.profiler_manager = SchedulerProfilerManager(
            sa.tp_size, dp_rank, sa.dp_size, lambda: self.forward_ct,
            lambda: Recorder(sa.tp_size, backend, self.model_config.num_hidden_layers, load_facts()["name"]),
        )

    def get_init_info(self):
        return {
            "status": "ready",
            "tp_rank": self.tp_rank,
            "dp_rank": self.dp_rank,
            "pid": os.getpid(),
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_req_input_len": self.max_req_input_len,
            "max_running_requests": self.max_running_requests,
        }

    # ------------------------------------------------------------- event loop

    def event_loop(self, recv_conn, send_conn):
        inbox = queue.Queue()

        def receive():
            try:
                while True:
                    inbox.put(recv_conn.recv())
            except (EOFError, OSError):
                inbox.put(("parent_gone",))

        threading.Thread(target=receive, name="scheduler-recv", daemon=True).start()
        self.send_conn = send_conn
        while True:
            msgs = []
            if not self.running and not self.waiting_queue:
                tic = time.perf_counter()
                msgs.append(inbox.get())  # idle: block until there is work (the real loop spins)
                self.profiler_manager.on_idle(time.perf_counter() - tic)
            while True:
                try:
                    msgs.append(inbox.get_nowait())
                except queue.Empty:
                    break
            for msg in msgs:
                if self.handle(msg) == "exit":
                    return
            if self.waiting_queue:
                self.run_prefill_batch()
            elif self.running:
                self.run_decode_batch()

    def handle(self, msg):
        kind = msg[0]
        if kind in ("shutdown", "parent_gone"):
            return "exit"
        if kind == "req":
            self.waiting_queue.append(Req(*msg[1:]))
        elif kind == "abort":
            rid = msg[1]
            self.waiting_queue = deque(r for r in self.waiting_queue if r.rid != rid)
            self.running = [r for r in self.running if r.rid != rid]
        elif kind == "flush_cache":
            ok = not self.running and not self.waiting_queue
            if ok:
                self.tree_cache.reset()
                logger.info("Cache flushed successfully!")
            else:
                logger.warning(
                    "Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d"
                    % (len(self.waiting_queue), len(self.running))
                )
            self.send_conn.send(("reply", msg[1], ok))
        elif kind == "get_internal_state":
            self.send_conn.send(("reply", msg[1], self.internal_state()))
        elif kind == "profile":
            stall = profile_stall_s()
            if stall:
                time.sleep(stall)  # busy elsewhere: the request waits, and so does its HTTP call
            self.send_conn.send(("reply", msg[1], self.profiler_manager.profile(msg[2])))
        return None

    def internal_state(self):
        if self._reference_costs is None:
            try:
                self._reference_costs = self.model_runner.reference_costs()
            except Exception as e:  # the backend cannot even plan a decode batch
                self._reference_costs = {"error": str(e).splitlines()[0]}
        return {
            "last_gen_throughput": self.last_gen_throughput,
            "avg_spec_accept_length": None,
            "max_total_num_tokens": self.max_total_num_tokens,
            "sim_cost_model": {
                "decode_step_ms": self._reference_costs,
                "reference_seq_len": 1024,
                "time_scale": device_seconds_to_wall(1.0),
                "kv_cache_dtype": repr(self.model_runner.kv_cache_dtype),
                "kv_pool_tokens": self.max_total_num_tokens,
            },
        }

    # ------------------------------------------------------------- batches

    def _check_injected_crash(self, batch_reqs):
        if self.crash_after is None or all(r.internal for r in batch_reqs):
            return
        if self.finished_client_reqs >= self.crash_after:
            raise RuntimeError(ILLEGAL_MEMORY_ACCESS)

    def _jit_build(self, reqs):
        """The first prefill batch of a new shape builds its kernel first (extra time, FlashInfer's two JIT
        lines); later batches of that shape do not. The startup warmup's shapes are built silently with the
        CUDA graphs (SGLang's own startup log shows no JIT lines)."""
        shape = jit_shape(len(self.running) + len(reqs))
        if shape in self.built_shapes:
            return
        self.built_shapes.add(shape)
        cost = jit_build_s()
        if all(r.internal for r in reqs) or cost <= 0:
            return
        name = "batch_prefill_with_ragged_kv_cache_bs_%d_dtype_q_bf16_dtype_kv_bf16" % shape
        jit_log("Loading JIT ops: %s" % name)
        time.sleep(device_seconds_to_wall(cost))
        jit_log("Finished loading JIT ops: %s" % name)

    def _step(self, forward_batch, reqs):
        mode = "decode" if forward_batch.forward_mode.is_decode() else "extend"
        self.forward_ct += 1
        self.profiler_manager.profile_batch_predicate(mode)  # may stop (and export) or start a profile
        tic = time.perf_counter()
        self._check_injected_crash(reqs)
        cost = self.model_runner.forward(forward_batch)
        self.profiler_manager.on_step(mode, forward_batch.batch_size, forward_batch.num_tokens, cost)
        wall = device_seconds_to_wall(sum(cost.values()))
        remaining = wall - (time.perf_counter() - tic)
        if remaining > 0:
            time.sleep(remaining)

    def _emit(self, reqs):
        outputs, still_running = [], []
        for req in reqs:
            req.output_len += 1
            reason = req.finish_reason()
            outputs.append((req.rid, req.output_len, reason))
            if reason is None:
                still_running.append(req)
            elif not req.internal:
                self.finished_client_reqs += 1
        self.send_conn.send(("out", outputs))
        return still_running

    def token_usage(self):
        used = sum(r.seq_len for r in self.running)
        return used / float(self.max_total_num_tokens)

    def run_prefill_batch(self):
        budget = self.chunked_prefill_size
        batch = []
        while self.waiting_queue and len(self.running) + len(batch) < self.max_running_requests:
            req = self.waiting_queue[0]
            if batch and req.input_len > budget:
                break
            batch.append(self.waiting_queue.popleft())
            budget -= req.input_len
            if budget <= 0:
                break
        if not batch:
            self.run_decode_batch()
            return
        for r in batch:
            r.cached_len = self.tree_cache.match_prefix(r.keys)
        forward_batch = ForwardBatch.extend([r.input_len for r in batch], [r.input_len - r.cached_len for r in batch])
        tic = time.perf_counter()
        self._jit_build(batch)
        self._step(forward_batch, batch)
        gap = time.perf_counter() - tic
        if self.tp_rank == 0:
            logger.info(
                "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
                "#running-req: %d, #queue-req: %d, #pending-token: 0, cuda graph: False, "
                "input throughput (token/s): %.2f"
                % (
                    len(batch),
                    forward_batch.num_tokens,
                    sum(r.cached_len for r in batch),
                    self.token_usage(),
                    len(self.running),
                    len(self.waiting_queue),
                    forward_batch.num_tokens / gap if gap > 0 else 0.0,
                )
            )
        for r in batch:
            self.tree_cache.insert(r.keys)
        self.running.extend(self._emit(batch))

    def run_decode_batch(self):
        forward_batch = ForwardBatch.decode([r.seq_len for r in self.running])
        self._step(forward_batch, self.running)
        batch_size = len(self.running)
        self.running = self._emit(self.running)
        self.forward_ct_decode += 1
        self.num_generated_tokens += batch_size
        if self.forward_ct_decode % self.server_args.decode_log_interval == 0:
            now = time.perf_counter()
            gap = now - self.last_decode_stats_tic
            self.last_gen_throughput = self.num_generated_tokens / gap if gap > 0 else 0.0
            self.num_generated_tokens = 0
            self.last_decode_stats_tic = now
            graph = (
                self.model_runner.cuda_graph_runner is not None
                and self.model_runner.cuda_graph_runner.can_run(forward_batch)
            )
            logger.info(
                "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, cuda graph: %s, "
                "gen throughput (token/s): %.2f, #queue-req: %d"
                % (
                    batch_size,
                    forward_batch.seq_lens_sum,
                    self.token_usage(),
                    graph,
                    self.last_gen_throughput,
                    len(self.waiting_queue),
                )
            )


def _follow_rank0(req_reader):
    """Ranks other than 0 wait until the server shuts down (or the parent is gone)."""
    try:
        while req_reader.recv()[0] != "shutdown":
            pass
    except (EOFError, OSError):
        pass


def run_scheduler_process(
    server_args, port_args, gpu_id, tp_rank, dp_rank, pipe_writer, req_reader, parent_pid
):
    kill_itself_when_parent_died()
    if os.getppid() != parent_pid:
        os._exit(0)
    if ignore_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # As SGLang: a rank is named only along the dimensions that have more than one (" DP1 TP3"; nothing at TP1).
    prefix = ""
    if server_args.dp_size > 1:
        prefix += " DP%d" % dp_rank
    if server_args.pp_size > 1:
        prefix += " PP0"
    if server_args.tp_size > 1:
        prefix += " TP%d" % tp_rank
    if server_args.ep_size > 1:
        prefix += " EP%d" % (tp_rank // max(server_args.tp_size // server_args.ep_size, 1))
    configure_logger(server_args, prefix=prefix)

    scheduler = None
    try:
        scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
        pipe_writer.send(scheduler.get_init_info())
        if tp_rank == 0:
            scheduler.event_loop(req_reader, pipe_writer)
        else:
            _follow_rank0(req_reader)
    except Exception:
        traceback = get_exception_traceback()
        logger.error(f"Scheduler hit an exception: {traceback}")
        if os.getppid() == parent_pid:
            os.kill(parent_pid, signal.SIGQUIT)
        # The parent kills the whole process tree now; do not race it by exiting.
        time.sleep(5)
    finally:
        if scheduler is not None:
            scheduler.model_runner.gpu_memory.release()
