"""Distributed state: the world group and the tensor-parallel group.

The simulated NCCL bootstrap works like the real one: rank 0 creates the NCCL
unique id and publishes it in a store, every rank fetches it and then joins the
communicator (a barrier over all ranks of the group). The store is a directory
shared by the scheduler processes of one server.
"""

import logging
import os
import time
import uuid

logger = logging.getLogger(__name__)

_WORLD = None
_TP = None


class FileStore(object):
    """A tiny key-value store in a directory (stands in for torch's TCPStore)."""

    def __init__(self, path):
        self.path = path
        os.makedirs(path, exist_ok=True)

    def set(self, key, value):
        tmp = os.path.join(self.path, ".%s.%d" % (key, os.getpid()))
        with open(tmp, "w") as f:
            f.write(value)
        os.replace(tmp, os.path.join(self.path, key))

    def get(self, key, poll_interval=0.005):
        """Block until key exists, then return its value."""
        target = os.path.join(self.path, key)
        while True:
            try:
                with open(target) as f:
                    return f.read()
            except FileNotFoundError:
                time.sleep(poll_interval)


class GroupCoordinator(object):
    def __init__(self, name, ranks, rank, store):
        self.name = name
        self.ranks = ranks
        self.rank = rank
        self.world_size = len(ranks)
        self.rank_in_group = ranks.index(rank)
        self.store = store
        self._barrier_count = 0

    def barrier(self):
        self._barrier_count += 1
        tag = "%s_barrier_%d" % (self.name, self._barrier_count)
        self.store.set("%s_rank%d" % (tag, self.rank_in_group), "1")
        for r in range(self.world_size):
            self.store.get("%s_rank%d" % (tag, r))


def _init_nccl_communicator(name, ranks, rank, store):
    # Rank 0 creates the unique id, everyone else fetches it, then all ranks meet.
    if ranks.index(rank) == 0:
        store.set("%s_nccl_unique_id" % name, uuid.uuid4().hex)
    store.get("%s_nccl_unique_id" % name)
    group = GroupCoordinator(name, ranks, rank, store)
    group.barrier()
    return group


def init_distributed_environment(world_size, rank, distributed_init_method, local_rank, backend="nccl"):
    global _WORLD
    logger.debug(
        "world_size=%d rank=%d local_rank=%d distributed_init_method=%s backend=%s"
        % (world_size, rank, local_rank, distributed_init_method, backend)
    )
    store = FileStore(distributed_init_method)
    _WORLD = _init_nccl_communicator("world", list(range(world_size)), rank, store)


def initialize_model_parallel(tensor_model_parallel_size=1):
    global _TP
    assert _WORLD is not None, "world group is not initialized"
    ranks = list(range(tensor_model_parallel_size))
    _TP = _init_nccl_communicator("tp", ranks, _WORLD.rank, _WORLD.store)


def get_tp_group():
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP


def get_tensor_model_parallel_world_size():
    return get_tp_group().world_size


def get_tensor_model_parallel_rank():
    return get_tp_group().rank_in_group
