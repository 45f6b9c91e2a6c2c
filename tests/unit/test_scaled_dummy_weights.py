"""The dummy_weights_scaled patch set's initialiser (torch on CPU; skips without torch): unit-scale embedding,
residual branches' output projections at 1/sqrt(2 x layers), the LM head at 4x, norms 1, the same weights on
every call (a seed per parameter name)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) runs the patch set's initialiser; scripts/test installs it")

SRC = (Path(__file__).resolve().parents[2] / "patches" / "dummy_weights_scaled" / "files" / "python" / "sglang"
       / "srt" / "model_loader" / "scaled_dummy_weights.py")
LAYERS, HIDDEN, VOCAB, EXPERTS, INTER = 8, 256, 1024, 4, 128


def _init():
    spec = importlib.util.spec_from_file_location("scaled_dummy_weights", SRC)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.initialize_scaled_dummy_weights


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = torch.nn.LayerNorm(HIDDEN)
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.self_attn.o_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.mlp = torch.nn.Module()
        self.mlp.experts = torch.nn.Module()
        self.mlp.experts.w13_weight = torch.nn.Parameter(torch.empty(EXPERTS, 2 * INTER, HIDDEN))
        self.mlp.experts.w2_weight = torch.nn.Parameter(torch.empty(EXPERTS, HIDDEN, INTER))


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.model.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)


def _std(t) -> float:
    return float(t.detach().float().std())


def test_scales_per_role_and_the_same_weights_every_time():
    init = _init()
    a, b = Model(), Model()
    init(a)
    init(b)
    branch = 1 / (2 * LAYERS) ** 0.5
    assert _std(a.model.embed_tokens.weight) == pytest.approx(1.0, rel=0.05)
    layer = a.model.layers[3]
    assert _std(layer.self_attn.q_proj.weight) == pytest.approx(HIDDEN ** -0.5, rel=0.05)
    assert _std(layer.self_attn.o_proj.weight) == pytest.approx(branch * HIDDEN ** -0.5, rel=0.05)
    assert _std(layer.mlp.experts.w13_weight) == pytest.approx(HIDDEN ** -0.5, rel=0.05)
    assert _std(layer.mlp.experts.w2_weight) == pytest.approx(branch * INTER ** -0.5, rel=0.05)
    assert _std(a.lm_head.weight) == pytest.approx(4 * HIDDEN ** -0.5, rel=0.05)
    assert torch.all(layer.input_layernorm.weight == 1) and torch.all(layer.input_layernorm.bias == 0)
    # A seed per name: layers differ from each other, and two servers of one model get the same weights.
    assert not torch.equal(a.model.layers[0].self_attn.o_proj.weight, a.model.layers[1].self_attn.o_proj.weight)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
