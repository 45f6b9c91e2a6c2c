"""Dummy weights at a trained model's scale (patch set dummy_weights_scaled), for `--load-format dummy`.

Stock SGLang fills every floating-point parameter with U(-1e-3, 1e-3) from one seed, so all parameters of
one shape are equal (every layer is the same layer) and every activation is ~1e-3 of its norm: q·k is ~0,
attention is a uniform average whose contribution to the residual stream is negligible, and each next token
is a function of the current token alone (outputs are short token loops). Timing is realistic; answers say
nothing about the attention kernel, so a wrong kernel cannot be told from a right one.

Here, deterministically (a seed per parameter *name*, so every server of one model gets the same weights
and the layers differ):
- norm weights (1-D, "norm" in the name) = 1 and biases = 0, as at initialisation;
- every other floating tensor ~ N(0, 1/fan_in) with fan_in its last dimension (nn.Linear's in_features),
  so each projection keeps unit scale: attention scores have a standard deviation of about 1-2 (softmax
  neither flat nor one-hot);
- the token embedding at unit scale per element, and each residual branch's output projection (attention's
  o_proj, the MLP's and every expert's down projection) at 1/sqrt(2 x layers) (GPT-2's residual scaling):
  the residual stream stays the token's own vector plus small per-layer updates, as in a trained model.
  Without it (every branch at unit scale, the embedding at 1/sqrt(hidden)) the stream is a sum of 2 x
  layers random updates that drown the token, and the router's choices flip with any rounding: an FP8
  rounding difference then moved logprobs as much as a 5 % wrong KV scale (live on DeepSeek-V2-Lite:
  flashmla 0.14, the 5 % control 0.30, median |Δ logprob| per decode step; a 27-layer MoE toy on CPU: 0.079
  vs 0.085 unscaled, 0.010 vs 0.030 scaled);
- the LM head at 4x that scale (logits' standard deviation ~4), so next-token distributions are peaked like
  a trained model's rather than nearly flat over the vocabulary.
The MoE router is random too, so experts are used evenly, unlike the identical-gate stock dummy weights.
"""

from __future__ import annotations

import re
import zlib

import torch

LM_HEAD_GAIN = 4.0
# The residual branches' last projections: attention's output, the dense MLP's and shared experts' down
# projection, the fused experts' w2 (SGLang's FusedMoE names it w2_weight).
_BRANCH_OUT = re.compile(r"(\.o_proj\.|\.down_proj\.|\.w2_weight$)")
_LAYER = re.compile(r"\.layers\.(\d+)\.")


def _gain(name: str, layers: int) -> float:
    if name.startswith("lm_head") or ".lm_head." in name:
        return LM_HEAD_GAIN
    if _BRANCH_OUT.search(name):
        return 1.0 / (2.0 * max(layers, 1)) ** 0.5
    return 1.0


def _std(name: str, param: torch.Tensor, layers: int) -> float:
    if "embed_tokens" in name:
        return 1.0  # unit scale per element: the residual stream starts as the token's own vector
    return _gain(name, layers) / float(param.shape[-1]) ** 0.5


@torch.no_grad()
def initialize_scaled_dummy_weights(model: torch.nn.Module, seed: int = 1234) -> None:
    state = model.state_dict()
    layers = len({m.group(1) for m in map(_LAYER.search, state) if m})
    for name, param in state.items():
        if not torch.is_floating_point(param):
            continue
        if name.endswith(("weight_scale_inv", "weight_scale_2", "k_scale", "v_scale")):
            param.fill_(1.0)  # quantisation scales stay neutral
            continue
        if param.dim() <= 1:
            param.fill_(1.0 if "norm" in name and name.endswith("weight") else 0.0)  # a norm's bias is 0
            continue
        generator = torch.Generator(device=param.device)
        generator.manual_seed(seed + zlib.crc32(name.encode()))
        values = torch.empty(param.shape, dtype=torch.float32, device=param.device)
        values.normal_(0.0, _std(name, param, layers), generator=generator)
        param.copy_(values.to(param.dtype))
