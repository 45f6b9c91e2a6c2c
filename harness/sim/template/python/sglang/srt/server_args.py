"""The arguments of the server (a small subset of SGLang's, same names and checks)."""

import argparse
import dataclasses
import logging
import random
import sys
from typing import List, Optional

from sglang._sim.gpus import load_facts
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.utils import (
    is_blackwell_supported,
    is_sm90_supported,
    is_sm100_supported,
)

logger = logging.getLogger(__name__)

ATTENTION_BACKEND_CHOICES = [
    # Common
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "qsa",
    "dsv4",
    "compressed",
    # NVIDIA specific
    "fa3",
    "fa4",
    "flashinfer",
    "llada2_cfg_flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "hpc_ops",
    "minicpm_flashattn",
    "minicpm_flashinfer",
    # AMD specific
    "aiter",
    "wave",
    # Other platforms
    "intel_amx",
    "ascend",
    "intel_xpu",
]

KV_CACHE_DTYPE_CHOICES = [
    "auto",
    "fp8_e5m2",
    "fp8_e4m3",
    "mxfp8",
    "bf16",
    "bfloat16",
    "nvfp4",
    "fp4_mx_block16",
]

GRAMMAR_BACKEND_CHOICES = ["xgrammar", "outlines", "llguidance", "none"]

# Renamed flags: still accepted, with SGLang's (yellow) deprecation line, printed while parsing.
DEPRECATED_FLAGS = {
    "cuda_graph_max_bs": ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "cuda_graph_max_bs_decode"),
    "cuda_graph_bs": ("--cuda-graph-bs", "--cuda-graph-bs-decode", "cuda_graph_bs_decode"),
}

LOAD_FORMAT_CHOICES = [
    "auto",
    "pt",
    "safetensors",
    "npcache",
    "dummy",
    "sharded_state",
    "gguf",
    "bitsandbytes",
]


@dataclasses.dataclass
class ServerArgs:
    # The fields SGLang 0.5.16 has, in its order (its `server_args=ServerArgs(...)` line lists them so).
    model_path: str
    tokenizer_path: Optional[str] = None
    tokenizer_mode: str = "auto"
    skip_tokenizer_init: bool = False
    load_format: str = "auto"
    trust_remote_code: bool = False
    context_length: Optional[int] = None
    revision: Optional[str] = None
    dtype: str = "auto"
    quantization: Optional[str] = None
    kv_cache_dtype: str = "auto"
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    page_size: Optional[int] = None
    disable_radix_cache: bool = False
    dist_init_addr: Optional[str] = None
    nnodes: int = 1
    node_rank: int = 0
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    device: str = "cuda"
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    random_seed: Optional[int] = None
    watchdog_timeout: float = 300
    host: str = "127.0.0.1"
    port: int = 30000
    skip_server_warmup: bool = False
    api_key: Optional[str] = None
    served_model_name: Optional[str] = None
    log_level: str = "info"
    log_level_http: Optional[str] = None
    log_requests: bool = False
    enable_metrics: bool = False
    decode_log_interval: int = 40
    attention_backend: Optional[str] = None
    decode_attention_backend: Optional[str] = None
    prefill_attention_backend: Optional[str] = None
    sampling_backend: Optional[str] = None
    grammar_backend: Optional[str] = None
    cuda_graph_max_bs_decode: Optional[int] = None
    cuda_graph_bs_decode: Optional[List[int]] = None
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 32
    ep_size: int = 1

    def __post_init__(self):
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.device != "cuda":
            raise ValueError(
                "The simulated SGLang target only simulates CUDA devices, got device=%r" % self.device
            )
        facts = load_facts()
        gpu_mem_gb = facts["memory_total_mib"] / 1024.0
        if self.mem_fraction_static is None:
            # Leave room for activations and CUDA graphs (roughly what SGLang picks).
            self.mem_fraction_static = round((gpu_mem_gb - 20.0) / gpu_mem_gb, 3)
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = 8192 if gpu_mem_gb > 60 else 2048
        if self.cuda_graph_max_bs_decode is None:
            self.cuda_graph_max_bs_decode = 256 if gpu_mem_gb > 60 else 80
        if self.grammar_backend is None:
            self.grammar_backend = "xgrammar"
        if self.page_size is None:
            self.page_size = 1
        self._handle_attention_backend_compatibility()

    def _handle_attention_backend_compatibility(self):
        model_config = ModelConfig(self.model_path, self.context_length)
        if self.attention_backend is None and (
            self.prefill_attention_backend is None or self.decode_attention_backend is None
        ):
            major = load_facts()["compute_cap"].split(".")[0]
            if model_config.use_mla:
                backend = {"9": "fa3", "10": "flashinfer"}.get(major, "triton")
            else:
                backend = "fa3" if major == "9" else "flashinfer"
            self.attention_backend = backend
            logger.info("Attention backend not specified. Use %s backend by default." % backend)

        used = {self.attention_backend, self.prefill_attention_backend, self.decode_attention_backend}
        if "flashmla" in used:
            logger.warning("FlashMLA only supports a page_size of 64, change page_size to 64.")
            self.page_size = 64

        if "trtllm_mla" in used:
            if not is_blackwell_supported():
                raise ValueError(
                    "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
                    "Please use a different backend."
                )
            if self.page_size not in [32, 64]:
                logger.warning(
                    "TensorRT-LLM MLA only supports page_size of 32 or 64, changing page_size from %s to 64."
                    % self.page_size
                )
                self.page_size = 64
            if self.kv_cache_dtype not in ["fp8_e4m3", "bf16", "bfloat16", "auto"]:
                raise ValueError(
                    "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto."
                )

        if used & {"cutedsl_mla", "tokenspeed_mla"}:
            if not is_sm100_supported():
                raise ValueError(
                    "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100). "
                    "Please use a different backend."
                )
            if self.page_size not in [32, 64]:
                logger.warning(
                    "CuteDSL MLA only supports page_size of 32 or 64, changing page_size from %s to 64."
                    % self.page_size
                )
                self.page_size = 64

        if (
            "trtllm_mha" in (self.attention_backend, self.prefill_attention_backend)
            and not is_sm100_supported()
        ):
            raise ValueError(
                "TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100). "
                "Please use a different prefill backend."
            )
        if "trtllm_mha" in (self.attention_backend, self.decode_attention_backend) and not (
            is_sm90_supported() or is_blackwell_supported()
        ):
            raise ValueError(
                "TRTLLM MHA backend for decode is only supported on Hopper (SM90), Blackwell (SM100) "
                "and (SM120) GPUs. Please use a different decode backend."
            )

        if self.attention_backend == "fa3" and self.kv_cache_dtype == "fp8_e5m2":
            logger.warning(
                "FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention backend to triton."
            )
            self.attention_backend = "triton"

    def url(self):
        return "http://%s:%s" % (self.host, self.port)

    @staticmethod
    def add_cli_args(parser):
        a = parser.add_argument
        a(
            "--model-path",
            "--model",
            type=str,
            required=True,
            help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
        )
        a("--tokenizer-path", type=str, default=None)
        a("--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"])
        a("--skip-tokenizer-init", action="store_true")
        a("--load-format", type=str, default="auto", choices=LOAD_FORMAT_CHOICES)
        a("--trust-remote-code", action="store_true")
        a("--context-length", type=int, default=None)
        a("--revision", type=str, default=None)
        a(
            "--dtype",
            type=str,
            default="auto",
            choices=["auto", "half", "float16", "bfloat16", "float", "float32"],
        )
        a("--quantization", type=str, default=None)
        a(
            "--kv-cache-dtype",
            type=str,
            default="auto",
            choices=KV_CACHE_DTYPE_CHOICES,
            help='Data type for kv cache storage. "auto" will use model data type.',
        )
        a("--served-model-name", type=str, default=None)
        a("--host", type=str, default="127.0.0.1")
        a("--port", type=int, default=30000)
        a("--skip-server-warmup", action="store_true")
        a("--api-key", type=str, default=None)
        a(
            "--mem-fraction-static",
            type=float,
            default=None,
            help="The fraction of the memory used for static allocation "
            "(model weights and KV cache memory pool).",
        )
        a("--max-running-requests", type=int, default=None)
        a("--max-total-tokens", type=int, default=None)
        a("--chunked-prefill-size", type=int, default=None)
        a("--max-prefill-tokens", type=int, default=16384)
        a(
            "--schedule-policy",
            type=str,
            default="fcfs",
            choices=["lpm", "random", "fcfs", "dfs-weight", "lof"],
        )
        a("--page-size", type=int, default=None)
        a("--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int, default=1)
        a("--data-parallel-size", "--dp-size", "--dp", dest="dp_size", type=int, default=1)
        a("--pipeline-parallel-size", "--pp-size", dest="pp_size", type=int, default=1)
        a("--expert-parallel-size", "--ep-size", "--ep", dest="ep_size", type=int, default=1)
        a("--base-gpu-id", type=int, default=0)
        a("--gpu-id-step", type=int, default=1)
        a("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", type=str, default=None)
        a("--nnodes", type=int, default=1)
        a("--node-rank", type=int, default=0)
        a("--random-seed", type=int, default=None)
        a("--watchdog-timeout", type=float, default=300)
        a("--device", type=str, default="cuda")
        a("--log-level", type=str, default="info")
        a("--log-level-http", type=str, default=None)
        a("--log-requests", action="store_true")
        a("--decode-log-interval", type=int, default=40)
        a("--enable-metrics", action="store_true")
        a(
            "--attention-backend",
            type=str,
            choices=ATTENTION_BACKEND_CHOICES,
            default=None,
            help="Choose the kernels for attention layers.",
        )
        a(
            "--prefill-attention-backend",
            type=str,
            choices=ATTENTION_BACKEND_CHOICES,
            default=None,
            help="Choose the kernels for prefill attention layers (have priority over --attention-backend).",
        )
        a(
            "--decode-attention-backend",
            type=str,
            choices=ATTENTION_BACKEND_CHOICES,
            default=None,
            help="Choose the kernels for decode attention layers (have priority over --attention-backend).",
        )
        a("--sampling-backend", type=str, choices=["flashinfer", "pytorch"], default=None)
        a(
            "--grammar-backend",
            type=str,
            choices=GRAMMAR_BACKEND_CHOICES,
            default=None,
            help="Choose the backend for grammar-guided decoding.",
        )
        a("--disable-radix-cache", action="store_true")
        a("--cuda-graph-max-bs-decode", type=int, default=None)
        a("--cuda-graph-bs-decode", type=int, nargs="+", default=None)
        a("--cuda-graph-max-bs", type=int, default=None, help="Deprecated: use --cuda-graph-max-bs-decode.")
        a("--cuda-graph-bs", type=int, nargs="+", default=None, help="Deprecated: use --cuda-graph-bs-decode.")
        a("--disable-cuda-graph", action="store_true")
        a("--disable-cuda-graph-padding", action="store_true")
        a("--enable-torch-compile", action="store_true")
        a("--torch-compile-max-bs", type=int, default=32)
        a("--enable-dp-attention", action="store_true")

    @classmethod
    def from_cli_args(cls, args):
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: getattr(args, name) for name in names})


def prepare_server_args(argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    raw_args = parser.parse_args(argv)
    for dest, (old, new, field) in DEPRECATED_FLAGS.items():
        value = getattr(raw_args, dest)
        if value is None:
            continue
        sys.stderr.write(
            "\x1b[1;33m'%s' is deprecated and will be removed in a future release. Use '%s' instead.\x1b[0m\n"
            % (old, new)
        )
        if getattr(raw_args, field) is None:
            setattr(raw_args, field, value)
    return ServerArgs.from_cli_args(raw_args)


@dataclasses.dataclass
class PortArgs:
    """Internal ports/paths the processes use to find each other."""

    nccl_port: int
    dist_dir: str
