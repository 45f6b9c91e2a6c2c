"""Run the model with cuda graph (decode batches are captured once per batch size)."""

import sys
import time

from sglang._sim import startup_sleep, torch
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)

# Share of the GPU the capture needs: workspace + activations once, then a bit per graph.
CAPTURE_WORKSPACE_FRACTION = 0.045
CAPTURE_PER_GRAPH_FRACTION = 0.013


def get_batch_sizes_to_capture(model_runner):
    server_args = model_runner.server_args
    if server_args.cuda_graph_bs is not None:
        capture_bs = sorted(set(server_args.cuda_graph_bs))
    else:
        capture_bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 1025, 16))
    capture_bs = [bs for bs in capture_bs if bs <= server_args.cuda_graph_max_bs]
    capture_bs = [bs for bs in capture_bs if bs <= model_runner.req_to_token_pool_size] or [1]
    return capture_bs


def _progress(desc, done, total, elapsed):
    width = 10
    filled = int(width * done / total) if total else width
    bar = "\u2588" * filled + " " * (width - filled)
    rate = "%.2fit/s" % (done / elapsed) if elapsed > 0 and done else "?it/s"
    stamp = time.strftime("%M:%S", time.gmtime(elapsed))
    left = "00:00" if done == total else "?"
    sys.stderr.write(
        "%s: %3d%%|%s| %d/%d [%s<%s, %s]\n"
        % (desc, 100 * done // max(total, 1), bar, done, total, stamp, left, rate)
    )
    sys.stderr.flush()


class CudaGraphRunner:
    """A CudaGraphRunner runs the forward pass of a model with cuda graph and torch.compile."""

    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.capture_bs = get_batch_sizes_to_capture(model_runner)
        self.max_bs = max(self.capture_bs)
        self.attn_backend = model_runner.decode_attn_backend
        self.attn_backend.init_cuda_graph_state(self.max_bs, self.max_bs)
        self.seq_len_fill_value = self.attn_backend.get_cuda_graph_seq_len_fill_value()
        self.graphs = {}

        try:
            self.capture()
        except RuntimeError as e:
            raise Exception(f"Capture cuda graph failed: {e}\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}")

    def capture(self):
        memory = self.model_runner.gpu_memory
        total_bytes = memory.total_mib * 1024.0**2
        per_graph = total_bytes * CAPTURE_PER_GRAPH_FRACTION / max(len(self.capture_bs), 1)
        show = self.model_runner.tp_rank == 0
        tic = time.perf_counter()
        # Capture the largest batch first: later graphs reuse its memory pool.
        capture_range = list(reversed(self.capture_bs))
        for i, bs in enumerate(capture_range):
            if show and i == 0:
                desc = "Capturing batches (bs=%d avail_mem=%.2f GB)" % (bs, memory.available_gb())
                _progress(desc, 0, len(capture_range), 0.0)
            if i == 0:
                memory.allocate(total_bytes * CAPTURE_WORKSPACE_FRACTION)
            memory.allocate(per_graph)
            self.capture_one_batch_size(bs)
        if show:
            desc = "Capturing batches (bs=%d avail_mem=%.2f GB)" % (capture_range[-1], memory.available_gb())
            _progress(desc, len(capture_range), len(capture_range), time.perf_counter() - tic)

    def capture_one_batch_size(self, bs):
        seq_lens = torch.tensor([self.seq_len_fill_value] * bs, dtype=torch.int32)
        self.attn_backend.init_forward_metadata_capture_cuda_graph(
            bs, bs, None, seq_lens, None, ForwardMode(ForwardMode.DECODE), None
        )
        forward_batch = ForwardBatch.decode(seq_lens.tolist())
        # Run twice (warmup, then the captured run), as the real runner does.
        for _ in range(2):
            self.model_runner.run_attention_layer(forward_batch, init_metadata=False)
        startup_sleep(0.006)
        self.graphs[bs] = True

    def can_run(self, forward_batch):
        return forward_batch.forward_mode.is_decode() and forward_batch.batch_size <= self.max_bs
