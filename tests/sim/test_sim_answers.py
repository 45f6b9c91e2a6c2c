"""The simulated model's answers: /generate with return_logprob in SGLang's shapes, deterministic across server
runs; the kernels' KV scale (sglang._sim.kernels.KV_SCALE) moves them."""

from __future__ import annotations

import importlib.util
import json
import math

from harness.sim import TEMPLATE_DIR
from tests.sim.simproc import FAST_ENV, READY_LINE, free_port, http, server_args

PROMPTS = [[101 + 3 * i + j for j in range(12)] for i in range(3)]
BODY = {"input_ids": PROMPTS, "sampling_params": {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True},
        "return_logprob": True, "top_logprobs_num": 3, "logprob_start_len": -1}


def _model_output():
    path = TEMPLATE_DIR / "python" / "sglang" / "_sim" / "model_output.py"
    spec = importlib.util.spec_from_file_location("sim_model_output", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _answers(target, launch) -> list[dict]:
    port = free_port()
    proc = launch(target, *server_args(port), env=FAST_ENV)
    proc.wait_for_line(READY_LINE, timeout=30)
    status, text = http(port, "POST", "/generate", BODY)
    assert status == 200, text
    proc.kill_group()
    return json.loads(text)


def test_generate_with_logprobs_in_sglang_shapes_deterministic_across_runs(shared_target, launch):
    first = _answers(shared_target, launch)
    assert isinstance(first, list) and len(first) == len(PROMPTS)
    for i, item in enumerate(first):
        meta = item["meta_info"]
        assert item["index"] == i and len(item["output_ids"]) == 6
        assert meta["finish_reason"] == {"type": "length", "length": 6} and meta["completion_tokens"] == 6
        chosen, top = meta["output_token_logprobs"], meta["output_top_logprobs"]
        assert [t for _, t, _ in chosen] == item["output_ids"]
        assert all(text is None and -30 < lp <= 0 for lp, _, text in chosen)
        assert len(top) == 6 and all(len(pos) == 3 for pos in top)
        for (lp, tok, _), pos in zip(chosen, top):  # greedy: the chosen token is the top-1, logprobs descend
            assert pos[0][1] == tok and math.isclose(pos[0][0], lp)
            assert [e[0] for e in pos] == sorted((e[0] for e in pos), reverse=True)
        # logprob_start_len -1: the last input token only, with no logprob (nothing predicts it)
        assert meta["input_token_logprobs"] == [[None, PROMPTS[i][-1], None]] and meta["input_top_logprobs"] == [None]
    assert len({tuple(item["output_ids"]) for item in first}) == len(PROMPTS)  # each prompt its own answer
    second = _answers(shared_target, launch)
    strip = ("id", "e2e_latency")
    assert [(a["output_ids"], {k: v for k, v in a["meta_info"].items() if k not in strip}) for a in first] == \
        [(b["output_ids"], {k: v for k, v in b["meta_info"].items() if k not in strip}) for b in second]


def test_kv_scale_error_moves_logprobs_and_flips_tokens():
    mod = _model_output()
    states = [mod.start_state([100 + i, 7, 9]) for i in range(50)]
    exact = [mod.logprobs_at(s, "flashinfer", 1.0) for s in states]
    again = [mod.logprobs_at(s, "flashinfer", 1.0) for s in states]
    off = [mod.logprobs_at(s, "flashinfer", 1.02) for s in states]
    other_backend = [mod.logprobs_at(s, "triton", 1.0) for s in states]
    assert exact == again
    worst = max(abs(a - b) for x, y in zip(exact, off) for a, b in zip(x, y))
    assert worst > 0.25  # a wrong kernel: above the answer check's default threshold
    argmax = [max(range(len(x)), key=x.__getitem__) for x in exact]
    assert sum(a != max(range(len(y)), key=y.__getitem__) for a, y in zip(argmax, off)) >= 5
    noise = max(abs(a - b) for x, y in zip(exact, other_backend) for a, b in zip(x, y))
    assert 0 < noise < 0.01  # another backend's summation order: tiny
