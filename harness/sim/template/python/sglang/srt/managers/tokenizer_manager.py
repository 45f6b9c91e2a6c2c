"""TokenizerManager: the main-process side of requests (tokenize, dispatch, detokenize)."""

import itertools
import logging
import queue
import threading
import time
import uuid

logger = logging.getLogger(__name__)

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no what up more out who said "
    "time some could them into only other then do these its two may first about new now people any over"
).split()


def count_tokens(text):
    """The simulated tokenizer: one token per whitespace-separated word."""
    return max(1, len(text.split()))


def detokenize(rid, num_tokens):
    seed = sum(map(ord, rid))
    return "".join(" " + _WORDS[(seed + 7 * i) % len(_WORDS)] for i in range(num_tokens))


class ReqState:
    def __init__(self, rid, prompt_tokens, internal):
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.internal = internal
        self.created = time.time()
        self.events = queue.Queue()
        self.completion_tokens = 0
        self.finish_reason = None
        self.finished = False

    def next_output(self, timeout=None):
        """Wait for the next scheduler output: (completion_tokens, finish_reason) or None on shutdown."""
        return self.events.get(timeout=timeout)


class SchedulerGroup:
    """The pipes to the schedulers of one data-parallel group (rank 0 does the work)."""

    def __init__(self, dp_rank, procs, send_conns, recv_conn):
        self.dp_rank = dp_rank
        self.procs = procs
        self.send_conns = send_conns  # one per TP rank; [0] is rank 0
        self.recv_conn = recv_conn  # rank 0's outputs
        self.send_lock = threading.Lock()

    def send(self, msg):
        with self.send_lock:
            self.send_conns[0].send(msg)


class TokenizerManager:
    def __init__(self, server_args, groups, scheduler_info):
        self.server_args = server_args
        self.groups = groups
        self.scheduler_info = scheduler_info
        self.model_path = server_args.model_path
        self.served_model_name = server_args.served_model_name
        self.rid_to_state = {}
        self.lock = threading.Lock()
        self.server_status = "Starting"
        self.gracefully_exit = False
        self.running_phase = False
        self.startup_time = time.time()
        self.last_receive_tstamp = 0.0
        self._rr = itertools.count()
        self._replies = {}
        for group in groups:
            threading.Thread(
                target=self._handle_loop, args=(group,), name="tokenizer-recv", daemon=True
            ).start()

    # ------------------------------------------------------------ requests

    def generate(self, prompt_tokens, max_new_tokens, ignore_eos, internal=False, rid=None, keys=None):
        self.running_phase = True
        rid = rid or uuid.uuid4().hex
        state = ReqState(rid, prompt_tokens, internal)
        with self.lock:
            self.rid_to_state[rid] = state
        group = self.groups[next(self._rr) % len(self.groups)]
        state.group = group
        group.send(("req", rid, prompt_tokens, max_new_tokens, ignore_eos, internal, keys or []))
        return state

    def abort(self, rid):
        with self.lock:
            state = self.rid_to_state.pop(rid, None)
        if state is not None and not state.finished:
            state.group.send(("abort", rid))

    def release(self, rid):
        with self.lock:
            self.rid_to_state.pop(rid, None)

    def _handle_loop(self, group):
        while True:
            try:
                msg = group.recv_conn.recv()
            except (EOFError, OSError):
                return
            self.last_receive_tstamp = time.time()
            if msg[0] == "out":
                with self.lock:
                    states = [(self.rid_to_state.get(rid), n, reason) for rid, n, reason in msg[1]]
                for state, n, reason in states:
                    if state is None:
                        continue
                    state.completion_tokens = n
                    if reason is not None:
                        state.finished = True
                        state.finish_reason = reason
                    state.events.put((n, reason))
            elif msg[0] == "reply":
                slot = self._replies.get(msg[1])
                if slot is not None:
                    slot[1].append(msg[2])
                    if len(slot[1]) == slot[2]:
                        slot[0].set()

    def call(self, op, *args, timeout=30.0):
        """Ask every rank-0 scheduler something; returns their answers (one per DP group)."""
        key = uuid.uuid4().hex
        done = threading.Event()
        self._replies[key] = (done, [], len(self.groups))
        try:
            for group in self.groups:
                group.send((op, key) + args)
            if not done.wait(timeout):
                raise TimeoutError("scheduler did not answer %s within %.0f s" % (op, timeout))
            return self._replies[key][1]
        finally:
            self._replies.pop(key, None)

    def shutdown_schedulers(self):
        for group in self.groups:
            for conn in group.send_conns:
                try:
                    with group.send_lock:
                        conn.send(("shutdown",))
                except (OSError, EOFError):
                    pass

    def close_all(self):
        """Wake every waiting request (the server is going away)."""
        with self.lock:
            states = list(self.rid_to_state.values())
        for state in states:
            state.events.put(None)
