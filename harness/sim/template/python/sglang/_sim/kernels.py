"""Simulated attention kernels (stand-ins for sgl_kernel, flash_mla, triton, ...).

Each kernel charges simulated device time to ``torch.cuda.meter``:
a fixed launch cost plus the bytes of KV cache it actually reads at the
kernel's share of the GPU's memory bandwidth.
"""

from sglang._sim import torch
from sglang._sim.gpus import load_facts

# The scale the attention kernels apply to the KV rows they read: 1.0 is exact. Any other value is a numerical
# error of the kernels, which the simulated model's answers show (sglang._sim.model_output): logprobs shift
# everywhere and greedy tokens flip.
KV_SCALE = 1.0

# Peak HBM bandwidth per arch (bytes per second).
HBM_BANDWIDTH = {"sm90": 4.8e12, "sm100": 8.0e12, "sm120": 1.8e12}

# kernel -> (launch overhead in seconds per layer call, bandwidth efficiency)
KERNELS = {
    "flashinfer": (11e-6, 0.55),
    # FlashInfer's FP8 (e4m3) MLA kernels dequantise in the kernel and are slow: measured on an H200
    # (64 x 16 heads x 8K) fa3 FP8 reads its FP8 rows at 0.61 TB/s and fa2 FP8 at 0.53 TB/s, where
    # fa3 BF16 reads at 3.67 TB/s -- scaled to the BF16 kernel's efficiency here.
    "flashinfer_fp8_fa3": (11e-6, 0.55 * 0.61 / 3.67),
    "flashinfer_fp8_fa2": (11e-6, 0.55 * 0.53 / 3.67),
    "fa3": (10e-6, 0.60),
    "fa4": (9e-6, 0.62),
    "triton": (16e-6, 0.40),
    "flashmla": (8e-6, 0.70),
    "trtllm_mla": (6e-6, 0.75),
    "cutedsl_mla": (7e-6, 0.72),
    "trtllm_mha": (7e-6, 0.72),
    "torch_native": (60e-6, 0.15),
    "flex_attention": (30e-6, 0.30),
}


def charge_attention(kernel, kv_bytes, extra_bytes=0.0):
    launch, efficiency = KERNELS[kernel]
    bandwidth = HBM_BANDWIDTH.get(load_facts()["arch"], 4.8e12) * efficiency
    torch.cuda.meter.charge("attention", launch + (kv_bytes + extra_bytes) / bandwidth)


def _kv_read_bytes(kv_cache, num_tokens):
    """Bytes read when num_tokens rows of kv_cache are visited."""
    row = 1
    for d in kv_cache.shape[1:]:
        row *= d
    return num_tokens * row * kv_cache.dtype.itemsize


def mla_decode(kernel, q, kv_cache, seq_lens, page_size=1, native_dtypes=None):
    """Decode over an MLA latent cache (one row per token: 512 latent + 64 rope)."""
    if native_dtypes is not None and kv_cache.dtype not in native_dtypes:
        raise RuntimeError(
            "%s: unsupported KV cache dtype %r (supported: %s)"
            % (kernel, kv_cache.dtype, ", ".join(repr(d) for d in native_dtypes))
        )
    tokens = sum(seq_lens)
    charge_attention(kernel, _kv_read_bytes(kv_cache, tokens), q.nbytes)
    return q.new_empty(q.shape)


def mha_attention(kernel, q, k_cache, v_cache, seq_lens):
    tokens = sum(seq_lens)
    charge_attention(kernel, _kv_read_bytes(k_cache, tokens) + _kv_read_bytes(v_cache, tokens), q.nbytes)
    return q.new_empty(q.shape)


# Named entry points, so backends read like SGLang's (sgl_kernel.flash_mla, ...).


def flash_mla_with_kvcache(q, k_cache, seq_lens, page_size=64):
    return mla_decode(
        "flashmla",
        q,
        k_cache,
        seq_lens,
        page_size,
        native_dtypes=(torch.bfloat16, torch.float16, torch.float8_e4m3fn),
    )


def flash_attn_with_kvcache(q, k_cache, v_cache, seq_lens, version=3):
    kernel = "fa4" if version == 4 else "fa3"
    if v_cache is None:
        return mla_decode(kernel, q, k_cache, seq_lens)
    return mha_attention(kernel, q, k_cache, v_cache, seq_lens)


def triton_decode_attention_fwd(q, k_buffer, v_buffer, seq_lens):
    """Triton decode kernel: loads any KV dtype and converts in registers."""
    if v_buffer is None:
        return mla_decode("triton", q, k_buffer, seq_lens)
    return mha_attention("triton", q, k_buffer, v_buffer, seq_lens)


def cutedsl_mla_decode(q, kv_cache, seq_lens, page_size=64):
    return mla_decode(
        "cutedsl_mla", q, kv_cache, seq_lens, page_size, native_dtypes=(torch.bfloat16, torch.float8_e4m3fn)
    )


def torch_native_attention(kernel, q, k_buffer, v_buffer, seq_lens):
    if v_buffer is None:
        return mla_decode(kernel, q, k_buffer, seq_lens)
    return mha_attention(kernel, q, k_buffer, v_buffer, seq_lens)
