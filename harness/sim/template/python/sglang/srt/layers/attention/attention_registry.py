"""Name -> constructor of the attention backends (runs in the scheduler process)."""

from sglang._sim.gpus import device_capability

ATTENTION_BACKENDS = {}


def register_attention_backend(name):
    def decorator(fn):
        ATTENTION_BACKENDS[name] = fn
        return fn

    return decorator


@register_attention_backend("flashinfer")
def create_flashinfer_backend(runner):
    if not runner.use_mla_backend:
        from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

        return FlashInferAttnBackend(runner)
    from sglang.srt.layers.attention.flashinfer_mla_backend import FlashInferMLAAttnBackend

    return FlashInferMLAAttnBackend(runner)


@register_attention_backend("trtllm_mla")
def create_trtllm_mla_backend(runner):
    if not runner.use_mla_backend:
        raise ValueError("trtllm_mla backend can only be used with MLA models.")
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend

    return TRTLLMMLABackend(runner)


@register_attention_backend("cutedsl_mla")
@register_attention_backend("tokenspeed_mla")
def create_cutedsl_mla_backend(runner):
    if not runner.use_mla_backend:
        raise ValueError("cutedsl_mla backend can only be used with MLA models.")
    from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDSLMLABackend

    return CuteDSLMLABackend(runner)


@register_attention_backend("flashmla")
def create_flashmla_backend(runner):
    from sglang.srt.layers.attention.flashmla_backend import FlashMLABackend

    return FlashMLABackend(runner)


@register_attention_backend("fa3")
def create_flashattention_v3_backend(runner):
    major, minor = device_capability()
    assert (major == 8 and not runner.use_mla_backend) or major == 9, (
        "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`."
    )
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    return FlashAttentionBackend(runner)


@register_attention_backend("fa4")
def create_flashattention_v4_backend(runner):
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    return FlashAttentionBackend(runner, fa_impl_ver=4)


@register_attention_backend("triton")
def create_triton_backend(runner):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    return TritonAttnBackend(runner)


@register_attention_backend("torch_native")
def create_torch_native_backend(runner):
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend(runner)


@register_attention_backend("flex_attention")
def create_flex_attention_backend(runner):
    from sglang.srt.layers.attention.torch_native_backend import FlexAttnBackend

    return FlexAttnBackend(runner)


@register_attention_backend("trtllm_mha")
def create_trtllm_mha_backend(runner):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    return FlashInferAttnBackend(runner)


def create_attention_backend(name, runner):
    if name not in ATTENTION_BACKENDS:
        raise ValueError(
            "Invalid attention backend: %s (the simulated target implements: %s)"
            % (name, ", ".join(sorted(ATTENTION_BACKENDS)))
        )
    return ATTENTION_BACKENDS[name](runner)
