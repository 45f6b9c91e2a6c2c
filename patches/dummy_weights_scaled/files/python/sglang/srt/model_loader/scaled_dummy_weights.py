"""Dummy weights at a trained model's scale (patch set dummy_weights_scaled), for `--load-format dummy`.

Stock SGLang fills every floating-point parameter with U(-1e-3, 1e-3) from one seed, so all parameters of
one shape are equal (every layer is the same layer) and every activation is ~1e-3 of its norm: q·k is ~0,
attention is a uniform average whose contribution to the residual stream is negligible, and each next token
is a function of the current token alone (outputs are short token loops). Timing is realistic; answers say
nothing about the attention kernel, so a wrong kernel cannot be told from a right one.

Here, deterministically (a seed per parameter *name*, so every server of one model gets the same weights
and the layers differ):
- norm weights (1-D, "norm" in the name) = 1 and biases = 0, as at initialisation;
- every other floating tensor ~ N(0, 1/fan_in) with fan_in its last dimension (nn.Linear's in_features,
  the embedding's hidden size), so each projection keeps unit scale: attention scores have a standard
  deviation of about 1-2 (softmax neither flat nor one-hot) and each sublayer moves the residual stream;
- the LM head at 4× that scale (logits' standard deviation ~4), so next-token distributions are peaked like
  a trained model's rather than nearly flat over the vocabulary.
The MoE router is random too, so experts are used evenly, unlike the identical-gate stock dummy weights.
"""

from __future__ import annotations

import zlib

import torch

LM_HEAD_GAIN = 4.0


def _gain(name: str) -> float:
    return LM_HEAD_GAIN if name.startswith("lm_head") or ".lm_head." in name else 1.0


@torch.no_grad()
def initialize_scaled_dummy_weights(model: torch.nn.Module, seed: int = 1234) -> None:
    for name, param in model.state_dict().items():
        if not torch.is_floating_point(param):
            continue
        if name.endswith(("weight_scale_inv", "weight_scale_2", "k_scale", "v_scale")):
            param.fill_(1.0)  # quantisation scales stay neutral
            continue
        if param.dim() <= 1:
            param.fill_(1.0 if "norm" in name else 0.0)
            continue
        generator = torch.Generator(device=param.device)
        generator.manual_seed(seed + zlib.crc32(name.encode()))
        std = _gain(name) / float(param.shape[-1]) ** 0.5
        values = torch.empty(param.shape, dtype=torch.float32, device=param.device)
        values.normal_(0.0, std, generator=generator)
        param.copy_(values.to(param.dtype))
