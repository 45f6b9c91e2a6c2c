"""ModelRunner runs the forward passes of the models."""

import logging
import math
import sys
import time

from sglang._sim import gpus, milestone, startup_sleep, torch
from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
from sglang.srt.layers.attention.attention_registry import create_attention_backend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner, get_batch_sizes_to_capture
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)

GB = 1024**3
KV_CACHE_DTYPES = {
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "mxfp8": torch.float8_e4m3fn,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "nvfp4": torch.float4_e2m1fn_x2,
    "fp4_mx_block16": torch.float4_e2m1fn_x2,
}
# At most this share of a GPU goes to weights (the sim pretends big models fit).
MAX_WEIGHT_FRACTION = 0.45
# Cost of everything but attention, per layer: fixed + per token (simulated seconds).
DENSE_COST = {"mla": (0.30e-3, 4.0e-6), "mha": (0.012e-3, 0.15e-6)}
EAGER_LAUNCH_OVERHEAD = 0.06e-3  # per layer, when CUDA graphs are off


class ModelRunner:
    """Init the model, KV cache pool, attention backends and CUDA graphs of one TP rank."""

    def __init__(
        self, model_config, mem_fraction_static, gpu_id, tp_rank, tp_size, server_args, port_args, dp_rank=0
    ):
        self.model_config = model_config
        self.mem_fraction_static = mem_fraction_static
        self.device = server_args.device
        self.gpu_id = gpu_id
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.dp_rank = dp_rank
        self.server_args = server_args
        self.port_args = port_args
        self.page_size = server_args.page_size
        self.dtype = model_config.dtype
        self.use_mla_backend = model_config.use_mla
        if server_args.kv_cache_dtype == "auto":
            self.kv_cache_dtype = self.dtype
        else:
            self.kv_cache_dtype = KV_CACHE_DTYPES[server_args.kv_cache_dtype]

        self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        self.init_attention_backend()
        self.init_cuda_graphs()

    # ----------------------------------------------------------------- init

    def init_torch_distributed(self):
        logger.info("Init torch distributed begin.")
        tic = time.perf_counter()
        physical = gpus.physical_gpu(self.gpu_id)
        if physical is None:
            raise RuntimeError(
                "CUDA error: invalid device ordinal\n"
                "CUDA kernel errors might be asynchronously reported at some other API call, so the "
                "stacktrace below might be incorrect.\n"
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
            )
        self.gpu_memory = gpus.DeviceMemory(self.gpu_id, physical)
        before = self.gpu_memory.available_gb()
        init_distributed_environment(
            world_size=self.tp_size,
            rank=self.tp_rank,
            distributed_init_method=self.port_args.dist_dir,
            local_rank=self.gpu_id,
            backend="nccl",
        )
        initialize_model_parallel(tensor_model_parallel_size=self.tp_size)
        if self.tp_size > 1:
            self.gpu_memory.allocate(0.6 * GB)  # NCCL buffers, custom all-reduce
        startup_sleep(0.05)
        logger.info(
            "Init torch distributed ends. elapsed=%.2f s, mem usage=%.2f GB"
            % (time.perf_counter() - tic, before - self.gpu_memory.available_gb())
        )
        milestone("init-distributed")

    def load_model(self):
        tic = time.perf_counter()
        before = self.gpu_memory.available_gb()
        logger.info("Load weight begin. avail mem=%.2f GB" % before)
        total = self.gpu_memory.total_mib * 1024.0**2
        weight_bytes = min(self.model_config.weight_bytes / self.tp_size, MAX_WEIGHT_FRACTION * total)
        if self.server_args.load_format == "dummy":
            # Random weights, no checkpoint to read: no shard progress, and quick.
            self.gpu_memory.allocate(weight_bytes)
            startup_sleep(0.05)
        else:
            if self.tp_rank == 0:
                logger.info("Using model weights format ['*.safetensors']")
            shards = max(2, min(8, int(math.ceil(self.model_config.weight_bytes / 40e9))))
            for i in range(shards + 1):
                if self.tp_rank == 0:
                    self._shard_progress(i, shards, time.perf_counter() - tic)
                if i < shards:
                    self.gpu_memory.allocate(weight_bytes / shards)
                    startup_sleep(0.3 / shards)
            if self.tp_rank == 0:
                self._shard_progress(shards, shards, time.perf_counter() - tic)
                sys.stderr.write("\n")
        if self.kv_cache_dtype.bits == 8 and self.server_args.kv_cache_dtype.startswith("fp8"):
            # No checkpoint carries KV scales here (SGLang 0.5.16 logs this while it loads the weights).
            logger.warning(
                "Using FP8 KV cache but no scaling factors provided. Defaulting to scaling factors of 1.0. "
                "This may lead to less accurate results!"
            )
        after = self.gpu_memory.available_gb()
        quant = "quant=%s, " % self.model_config.quantization if self.model_config.quantization else ""
        logger.info(
            "Load weight end. elapsed=%.2f s, type=%s, %savail mem=%.2f GB, mem usage=%.2f GB."
            % (time.perf_counter() - tic, self.model_config.architectures[0], quant, after, before - after)
        )
        milestone("load-weights")

    @staticmethod
    def _shard_progress(done, total, elapsed):
        rate = "%.2fit/s" % (done / elapsed) if done and elapsed > 0 else "?it/s"
        left = "?" if not done else time.strftime("%M:%S", time.gmtime(elapsed / done * (total - done)))
        sys.stderr.write(
            "Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s, %s]\n"
            % (100 * done // total, done, total, time.strftime("%M:%S", time.gmtime(elapsed)), left, rate)
        )
        sys.stderr.flush()

    def profile_max_num_token(self):
        available = self.gpu_memory.available_gb()
        total_gb = self.gpu_memory.total_mib / 1024.0
        rest_memory = available - total_gb * (1 - self.mem_fraction_static)
        cell_size = self.model_config.kv_bytes_per_token_per_layer(self.kv_cache_dtype)
        if not self.use_mla_backend:
            cell_size = cell_size / min(self.tp_size, self.model_config.num_key_value_heads)
        cell_size *= self.model_config.num_hidden_layers
        return int(rest_memory * GB // cell_size)

    def init_memory_pool(self):
        self.max_total_num_tokens = self.profile_max_num_token()
        if self.server_args.max_total_tokens is not None:
            self.max_total_num_tokens = min(self.max_total_num_tokens, self.server_args.max_total_tokens)
        self.max_total_num_tokens = self.max_total_num_tokens // self.page_size * self.page_size
        if self.max_total_num_tokens <= 0:
            raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")

        max_num_reqs = self.server_args.max_running_requests
        if max_num_reqs is None:
            max_num_reqs = min(
                max(int(self.max_total_num_tokens / self.model_config.context_len * 512), 2048), 4096
            )
        self.req_to_token_pool_size = max_num_reqs

        config = self.model_config
        layers = config.num_hidden_layers
        if self.use_mla_backend:
            self.gpu_memory.allocate(
                (self.max_total_num_tokens + self.page_size)
                * config.kv_bytes_per_token_per_layer(self.kv_cache_dtype)
                * layers
            )
            self.token_to_kv_pool = MLATokenToKVPool(
                self.max_total_num_tokens,
                page_size=self.page_size,
                dtype=self.kv_cache_dtype,
                kv_lora_rank=config.kv_lora_rank,
                qk_rope_head_dim=config.qk_rope_head_dim,
                layer_num=layers,
            )
        else:
            head_num = max(config.num_key_value_heads // self.tp_size, 1)
            self.gpu_memory.allocate(
                (self.max_total_num_tokens + self.page_size)
                * 2
                * head_num
                * config.head_dim
                * self.kv_cache_dtype.itemsize
                * layers
            )
            self.token_to_kv_pool = MHATokenToKVPool(
                self.max_total_num_tokens,
                page_size=self.page_size,
                dtype=self.kv_cache_dtype,
                head_num=head_num,
                head_dim=config.head_dim,
                layer_num=layers,
            )
        logger.info("Memory pool end. avail mem=%.2f GB" % self.gpu_memory.available_gb())
        milestone("memory-pool")

    def init_attention_backend(self):
        args = self.server_args
        prefill = args.prefill_attention_backend or args.attention_backend
        decode = args.decode_attention_backend or args.attention_backend
        self.decode_attn_backend = create_attention_backend(decode, self)
        if prefill == decode:
            self.prefill_attn_backend = self.decode_attn_backend
        else:
            self.prefill_attn_backend = create_attention_backend(prefill, self)
        config = self.model_config
        heads = max(config.num_attention_heads // self.tp_size, 1)
        if self.use_mla_backend:
            self.attn_layer = RadixAttention(
                heads,
                config.kv_lora_rank + config.qk_rope_head_dim,
                config.scaling,
                num_kv_heads=1,
                layer_id=0,
                v_head_dim=config.kv_lora_rank,
            )
        else:
            self.attn_layer = RadixAttention(
                heads,
                config.head_dim,
                config.scaling,
                num_kv_heads=max(config.num_key_value_heads // self.tp_size, 1),
                layer_id=0,
            )

    def init_cuda_graphs(self):
        self.cuda_graph_runner = None
        if self.server_args.disable_cuda_graph:
            return
        tic = time.perf_counter()
        before = self.gpu_memory.available_gb()
        logger.info(
            "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=%s, avail mem=%.2f GB"
            % (get_batch_sizes_to_capture(self), before)
        )
        self.cuda_graph_runner = CudaGraphRunner(self)
        after = self.gpu_memory.available_gb()
        logger.info(
            "Capture target decode CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
            % (time.perf_counter() - tic, before - after, after)
        )
        milestone("cuda-graph")

    # ----------------------------------------------------------------- forward

    def _activations(self, forward_batch):
        config, layer = self.model_config, self.attn_layer
        n = forward_batch.num_tokens
        if self.use_mla_backend:
            q = torch.empty((n, layer.tp_q_head_num, layer.v_head_dim), dtype=self.dtype)
            q_rope = torch.empty(
                (n, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim), dtype=self.dtype
            )
            k = torch.empty((n, 1, config.kv_lora_rank), dtype=self.dtype)
            k_rope = torch.empty((n, 1, config.qk_rope_head_dim), dtype=self.dtype)
            return dict(q=q, k=k, v=k, q_rope=q_rope, k_rope=k_rope)
        q = torch.empty((n, layer.tp_q_head_num * layer.head_dim), dtype=self.dtype)
        k = torch.empty((n, layer.tp_k_head_num * layer.head_dim), dtype=self.dtype)
        return dict(q=q, k=k, v=k, q_rope=None, k_rope=None)

    def run_attention_layer(self, forward_batch, init_metadata=True):
        """Run one attention layer; returns its simulated device time by kind."""
        is_decode = forward_batch.forward_mode.is_decode()
        backend = self.decode_attn_backend if is_decode else self.prefill_attn_backend
        torch.cuda.meter.reset()
        if init_metadata:
            backend.init_forward_metadata(forward_batch)
        a = self._activations(forward_batch)
        if is_decode:
            backend.forward_decode(
                a["q"], a["k"], a["v"], self.attn_layer, forward_batch, q_rope=a["q_rope"], k_rope=a["k_rope"]
            )
        else:
            backend.forward_extend(
                a["q"], a["k"], a["v"], self.attn_layer, forward_batch, q_rope=a["q_rope"], k_rope=a["k_rope"]
            )
        return torch.cuda.meter.snapshot()

    def forward(self, forward_batch):
        """Simulated device seconds of one forward pass, by kind (all layers)."""
        per_layer = self.run_attention_layer(forward_batch)
        layers = self.model_config.num_hidden_layers
        cost = {kind: seconds * layers for kind, seconds in per_layer.items()}
        fixed, per_token = DENSE_COST["mla" if self.use_mla_backend else "mha"]
        if self.use_mla_backend:
            scale = math.sqrt(8.0 / self.tp_size)
        else:
            scale = max(self.model_config.weight_bytes / 2e9, 0.5) / 8.0 / self.tp_size
        dense = (fixed + per_token * forward_batch.num_tokens) * scale * layers
        if self.server_args.enable_torch_compile:
            dense *= 0.95
        graphed = (
            forward_batch.forward_mode.is_decode()
            and self.cuda_graph_runner is not None
            and self.cuda_graph_runner.can_run(forward_batch)
        )
        if not graphed:
            dense += EAGER_LAUNCH_OVERHEAD * layers
        cost["other"] = dense
        if forward_batch.forward_mode.is_decode():
            # A backend whose module sets DECODE_COST_FACTOR decodes that much slower (or faster) than the model
            # above says: what a change to its source does to a decode step (`harness sim init --slow-at`).
            module = sys.modules.get(type(self.decode_attn_backend).__module__)
            factor = getattr(module, "DECODE_COST_FACTOR", 1.0)
            cost = {kind: seconds * factor for kind, seconds in cost.items()}
        return cost

    def reference_costs(self, seq_len=1024, batch_sizes=(1, 8, 32)):
        """Decode step cost (ms, by kind) for reference batches: what /server_info reports."""
        out = {}
        for bs in batch_sizes:
            cost = self.forward(ForwardBatch.decode([seq_len] * bs))
            out[str(bs)] = {kind: round(seconds * 1e3, 4) for kind, seconds in sorted(cost.items())}
            out[str(bs)]["total"] = round(sum(cost.values()) * 1e3, 4)
        return out
