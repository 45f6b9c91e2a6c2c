"""Backend registry: a named way to run MLA attention = server flags + patch sets + hardware it needs.

The names are the ones engineers use in the seed story; `attention_backend` is the value handed to
SGLang's `--attention-backend` (and checked against the host's valid choices during preflight).
"""

from __future__ import annotations

from dataclasses import dataclass

BLACKWELL_DC = ("sm100", "sm103")
BLACKWELL_ALL = ("sm100", "sm103", "sm110", "sm120", "sm121")


@dataclass(frozen=True)
class Backend:
    name: str
    summary: str
    attention_backend: str
    patch_sets: tuple[str, ...] = ()
    archs: tuple[str, ...] | None = None  # None: any GPU SGLang supports
    extra_args: tuple[str, ...] = ()
    # arch (or "*") → the lowest FlashInfer that runs it; the agent reads the host's FlashInfer to check
    flashinfer_min: tuple[tuple[str, str], ...] = ()

    def server_args(self) -> list[str]:
        return ["--attention-backend", self.attention_backend, *self.extra_args]

    def fits_arch(self, arch: str | None) -> bool:
        """False only when both are known and the arch is not one the backend runs on."""
        return not self.archs or arch is None or arch in self.archs


REGISTRY: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "flashinfer-mla",
            "stock SGLang FlashInfer MLA: the whole FP8 KV pool is cast to BF16 every decode step",
            "flashinfer",
        ),
        Backend(
            "flashinfer-mla-gather-cast",
            "FlashInfer MLA on a compact BF16 copy of only the KV rows the batch uses",
            "flashinfer",
            patch_sets=("flashinfer_mla_gather_cast",),
        ),
        Backend(
            "flashinfer-mla-fp8",
            "FlashInfer MLA planned on the FP8 (e4m3) KV cache itself (scales passed, no cast); FlashInfer's FP8 "
            "MLA kernels are SM90-only, from 0.6.14 (fa3; fa2 from 0.6.18) — older ones fail to compile them "
            "(the seed's static_assert)",
            "flashinfer",
            patch_sets=("flashinfer_mla_fp8",),
            archs=("sm90",),
            flashinfer_min=(("sm90", "0.6.14"),),
        ),
        Backend(
            "flashmla",
            "SGLang's FlashMLA backend (DeepSeek's kernels; reads FP8 KV directly on SM90/SM100; SGLang sets "
            "page size 64 itself)",
            "flashmla",
            archs=("sm90", "sm100", "sm103"),
        ),
        Backend(
            "flashmla-gather-prefill",
            "FlashMLA, with a paged prefill (prefix-cache hits, later chunks) that casts only the KV rows the batch "
            "reads instead of the whole FP8 pool (patch set flashmla_gather_prefill); decode is FlashMLA's",
            "flashmla",
            patch_sets=("flashmla_gather_prefill",),
            archs=("sm90", "sm100", "sm103"),
        ),
        Backend(
            "triton",
            "SGLang's Triton MLA decode (reads the FP8 KV cache directly, any GPU)",
            "triton",
        ),
        Backend(
            "cutlass_mla",
            "SGLang's CUTLASS MLA decode kernel (Blackwell datacenter, SM100-class)",
            "cutlass_mla",
            archs=BLACKWELL_DC,
        ),
        Backend(
            "trtllm_mla",
            "TensorRT-LLM MLA kernels through FlashInfer (Blackwell)",
            "trtllm_mla",
            archs=BLACKWELL_ALL,
        ),
        Backend(
            "custom-fp8-mla",
            "our MLA decode kernel reading the FP8 KV cache directly (CUDA on SM90, Triton elsewhere), and a paged "
            "prefill that casts only the rows it reads (a new --attention-backend choice added by its patch set)",
            "custom_fp8_mla",
            patch_sets=("custom_fp8_mla",),
            archs=("sm90", "sm100", "sm103", "sm120", "sm121"),
        ),
    )
}
