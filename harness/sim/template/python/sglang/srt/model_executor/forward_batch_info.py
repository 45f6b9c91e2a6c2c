"""What one forward pass works on."""

from sglang._sim import torch


class ForwardMode(object):
    EXTEND = "extend"
    DECODE = "decode"

    def __init__(self, mode):
        self.mode = mode

    def is_decode(self):
        return self.mode == ForwardMode.DECODE

    def is_extend(self):
        return self.mode == ForwardMode.EXTEND

    def __repr__(self):
        return "ForwardMode.%s" % self.mode.upper()


class ForwardBatch(object):
    """A batch of requests: their total lengths and, for extend, the new tokens."""

    def __init__(self, forward_mode, seq_lens, extend_seq_lens=None):
        self.forward_mode = ForwardMode(forward_mode)
        self.batch_size = len(seq_lens)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int64)
        self.seq_lens_cpu = list(seq_lens)
        self.seq_lens_sum = sum(seq_lens)
        self.extend_seq_lens_cpu = list(extend_seq_lens) if extend_seq_lens is not None else None
        self.extend_prefix_lens_cpu = (
            [s - e for s, e in zip(seq_lens, extend_seq_lens)] if extend_seq_lens is not None else None
        )
        num_tokens = sum(extend_seq_lens) if extend_seq_lens is not None else len(seq_lens)
        self.num_tokens = num_tokens
        self.req_pool_indices = torch.arange(len(seq_lens))
        self.out_cache_loc = torch.empty((num_tokens,), dtype=torch.int64)

    @classmethod
    def decode(cls, seq_lens):
        return cls(ForwardMode.DECODE, seq_lens)

    @classmethod
    def extend(cls, seq_lens, extend_seq_lens):
        return cls(ForwardMode.EXTEND, seq_lens, extend_seq_lens)
