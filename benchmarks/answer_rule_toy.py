"""The answer check's own verdict rule (`harness.analysis.answers.compare_answers`, default bars) applied to a
CPU toy of the live case, under both dummy-weight rules of patch set dummy_weights_scaled: does it pass the
backends that are correct and flag the negative control? A prediction for the live run, not a substitute.

The toy is benchmarks/dummy_weights_sensitivity.py's model (27 pre-norm MoE layers, hidden 512, 8 heads, 16
experts top-4, vocab 4096; `current` = the first weight rule, `calm` = the residual-scaled one), generating
greedily with a KV cache like the server: 16 prompts of 64 random tokens, 32 output tokens, the top 5
logprobs per position. The cache holds FP8 (e4m3) K and V. Four servers:
- `stock`     the reference: prefill attends over the exact K/V (SGLang's ragged prefill), decode reads the
              FP8 cache (FlashInfer MLA on FP8 KV, gather-cast: bit-exact with it);
- `bf16-dec`  decode's attention arithmetic in bf16 (another kernel's rounding: custom-fp8-mla's kind);
- `fp8-pre`   prefill also attends over the FP8-quantised K/V (flashmla / triton read the cache in prefill);
- `control`   decode reads the cache 5 % too large (patch set control_wrong_kv_scale): must fail.
Needs torch (the `kernels` extra); ~4 minutes on 2 CPU cores.

    python3 benchmarks/answer_rule_toy.py

2026-12-02, 2 cores, torch 2.13 CPU (each cell: the table's verdict, then the median |Δ| per agreeing step):
    current bf16-dec: ✓ 95% Δ0.187 (4 tie) med 0.004 | fp8-pre: ✗ 85% Δ0.292 (5 bad, 3 tie) med 0.083 | control: ✗ 84% Δ0.268 (2 bad, 7 tie) med 0.029
    calm bf16-dec: ✓ 98% Δ0.103 (1 tie) med 0.001 | fp8-pre: ✗ 73% Δ0.0807 (1 bad, 6 tie) med 0.006 | control: ✗ 51% Δ0.164 (1 bad, 10 tie) med 0.028
What it predicts for the live check on the rescaled weights: a decode-only rounding difference (custom-fp8-mla)
passes; a backend whose prefill reads the FP8 cache (flashmla, triton) still fails, by one non-tie flip in 16
prompts, as the control does; only the per-step median separates those two (4.7x on `calm`).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.dummy_weights_sensitivity import NH, TOPK, E, V, fp8, make, rms  # noqa: E402
from harness.analysis.answers import AnswerSet, PromptAnswer, compare_answers, verdict_text  # noqa: E402

PROMPTS, PROMPT_LEN, OUTPUT_LEN, TOP_K = 16, 64, 32, 5
Kv = Callable[[torch.Tensor], torch.Tensor]


def same(t: torch.Tensor) -> torch.Tensor:
    return t


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, bf16: bool) -> torch.Tensor:
    dtype = q.dtype
    if bf16:
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    s = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s + torch.full((n, n), float("-inf")).triu(1)
    p = torch.softmax(s, -1)
    return (p.to(v.dtype) @ v).to(dtype)


def moe(p: dict, h: torch.Tensor) -> torch.Tensor:
    """The experts on the tokens routed to them only (what a dense loop spends 4x on)."""
    flat = h.reshape(-1, h.shape[-1])
    wts, idx = torch.topk(torch.softmax(flat @ p["gate"].T, -1), TOPK, -1)
    out = torch.zeros_like(flat)
    width = flat.shape[-1]
    for e in range(E):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        x = flat[rows]
        y = (torch.nn.functional.silu(x @ p["up"][e][:width].T) * (x @ p["up"][e][width:].T)) @ p["down"][e].T
        out.index_add_(0, rows, wts[rows, slot, None] * y)
    return out.view_as(h)


def layer_step(p: dict, x: torch.Tensor, cache: list[torch.Tensor], prefill: bool, prefill_kv: Kv,
               decode_read: Kv, bf16_decode: bool) -> torch.Tensor:
    b, t, width = x.shape
    d = width // NH
    h = rms(x)
    q, k, v = ((h @ p[n].T).view(b, t, NH, d).transpose(1, 2) for n in ("q", "k", "v"))
    if prefill:
        cache[:] = [fp8(k), fp8(v)]
        a = attend(q, prefill_kv(k), prefill_kv(v), causal=True, bf16=False)
    else:  # the new token's K/V go into the cache first, then decode reads the whole cache
        cache[:] = [torch.cat([cache[0], fp8(k)], 2), torch.cat([cache[1], fp8(v)], 2)]
        a = attend(q, decode_read(cache[0]), decode_read(cache[1]), causal=False, bf16=bf16_decode)
    x = x + a.transpose(1, 2).reshape(b, t, width) @ p["o"].T
    return x + moe(p, rms(x))


def generate(params: dict, prompts: torch.Tensor, prefill_kv: Kv = same, decode_read: Kv = same,
             bf16_decode: bool = False) -> AnswerSet:
    """Greedy answers as the agent's answers.json holds them (output ids, their logprobs, the top 5)."""
    caches: list[list[torch.Tensor]] = [[] for _ in params["layers"]]
    x, prefill = params["emb"][prompts], True
    outs: list[list[int]] = [[] for _ in range(prompts.shape[0])]
    lps: list[list[float]] = [[] for _ in outs]
    tops: list[list[dict[int, float]]] = [[] for _ in outs]
    for _ in range(OUTPUT_LEN):
        for p, cache in zip(params["layers"], caches):
            x = layer_step(p, x, cache, prefill, prefill_kv, decode_read, bf16_decode)
        logp = torch.log_softmax(rms(x[:, -1]) @ params["head"].T, -1)
        top_v, top_i = torch.topk(logp, TOP_K, -1)
        for i in range(len(outs)):
            outs[i].append(int(top_i[i, 0]))
            lps[i].append(float(top_v[i, 0]))
            tops[i].append({int(t): float(v) for t, v in zip(top_i[i], top_v[i])})
        x, prefill = params["emb"][top_i[:, :1]], False
    return AnswerSet(settings={}, prompts=tuple(
        PromptAnswer(tuple(prompts[i].tolist()), tuple(outs[i]), tuple(lps[i]), tuple(tops[i]))
        for i in range(len(outs))))


def median_step_delta(row: AnswerSet, ref: AnswerSet) -> float:
    """Median |Δ logprob| over the positions where the two greedy texts still agree."""
    ds = []
    for a, b in zip(row.prompts, ref.prompts):
        for ta, tb, la, lb in zip(a.output_ids, b.output_ids, a.logprobs, b.logprobs):
            if ta != tb:
                break
            ds.append(abs(la - lb))
    return statistics.median(ds) if ds else float("nan")


def main() -> None:
    torch.manual_seed(0)
    prompts = torch.randint(0, V, (PROMPTS, PROMPT_LEN), generator=torch.Generator().manual_seed(3))
    servers = {"bf16-dec": {"bf16_decode": True}, "fp8-pre": {"prefill_kv": fp8},
               "control": {"decode_read": lambda t: t * 1.05}}
    for init in ("current", "calm"):
        params = make(init)
        with torch.no_grad():
            ref = generate(params, prompts)
            cells = []
            for name, kw in servers.items():
                row = generate(params, prompts, **kw)
                cells.append(f"{name}: {verdict_text(compare_answers(row, ref))} med {median_step_delta(row, ref):.3f}")
        print(init, " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
