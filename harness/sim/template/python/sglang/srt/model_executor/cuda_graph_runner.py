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
    if server_args.cuda_graph_bs_decode is not None:
        capture_bs = sorted(set(server_args.cuda_graph_bs_decode))
    else:
        capture_bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 1025, 16))
    capture_bs = [bs for bs in capture_bs if bs <= server_args.cuda_graph_max_bs_decode]
    capture_bs = [bs for bs in capture_bs if bs <= model_runner.req_to_token_pool_size] or [1]
    return capture_bs


class _Bar(object):
    """tqdm as SGLang's capture loop uses it: one line on stderr, redrawn in place with '\\r' (the bar
    first, then a redraw per set_description), ended by a newline when the loop is done."""

    def __init__(self, total):
        self.total = total
        self.tic = time.perf_counter()
        self.desc = ""
        self.done = 0
        self._draw(first=True)

    def _draw(self, first=False):
        width = 10
        filled = int(width * self.done / self.total) if self.total else width
        bar = "\u2588" * filled + " " * (width - filled)
        elapsed = time.perf_counter() - self.tic
        if self.done:
            per = elapsed / self.done
            rate = "%.2fs/it" % per if per >= 1 else "%.2fit/s" % (1 / per if per > 0 else 0.0)
            left = time.strftime("%M:%S", time.gmtime(per * (self.total - self.done)))
        else:
            rate, left = "?it/s", "?"
        text = "%3d%%|%s| %d/%d [%s<%s, %s]" % (
            100 * self.done // max(self.total, 1), bar, self.done, self.total,
            time.strftime("%M:%S", time.gmtime(elapsed)), left, rate,
        )
        sys.stderr.write(("" if first else "\r") + ("%s: %s" % (self.desc, text) if self.desc else text))
        sys.stderr.flush()

    def set_description(self, desc):
        self.desc = desc
        self._draw()

    def update(self):
        self.done += 1
        if self.done == self.total:
            self._draw()

    def close(self):
        sys.stderr.write("\n")
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
        # Capture the largest batch first: later graphs reuse its memory pool.
        capture_range = list(reversed(self.capture_bs))
        bar = _Bar(len(capture_range)) if self.model_runner.tp_rank == 0 else None
        try:
            for i, bs in enumerate(capture_range):
                if bar is not None:
                    desc = "Capturing batches (bs=%d avail_mem=%.2f GB)" % (bs, memory.available_gb())
                    bar.set_description(desc)
                if i == 0:
                    memory.allocate(total_bytes * CAPTURE_WORKSPACE_FRACTION)
                memory.allocate(per_graph)
                self.capture_one_batch_size(bs)
                if bar is not None:
                    bar.update()
        finally:
            if bar is not None:
                bar.close()

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
