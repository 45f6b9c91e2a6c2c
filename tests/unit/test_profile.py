"""Trace summaries (pure, streamed): kernels grouped under the framework op that launched them."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.triage.profile import summarize_trace


def trace(events):
    return {"schemaVersion": 1, "traceEvents": events}


def op(name, ext, ts=0):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 5, "pid": 1, "tid": 1,
            "args": {"External id": ext}}


def kernel(name, ext, dur, ts=0):
    args = {"correlation": ext} if ext is None else {"External id": ext, "correlation": ext}
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7, "args": args}


def seed_like_events():
    """The seed's profile: the FP8→BF16 cast of the whole pool is 69 % of the step."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 93000, "pid": 1,
               "tid": 1, "args": {}}]
    ext = 0
    for _layer in range(10):
        ext += 1
        events += [op("aten::to", 10_000 + ext), op("aten::copy_", ext), kernel("direct_copy_kernel_cuda", ext, 6460)]
        ext += 1
        events += [op("flashinfer::mla_run", ext), kernel("BatchMLAPagedAttentionKernel", ext, 900)]
        ext += 1
        events += [op("aten::mm", ext), kernel("sm90_gemm", ext, 1940)]
    events.append(kernel("ncclDevKernel_AllReduce", None, 50))  # a kernel with no framework op
    events.append({"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "ts": 0, "pid": 1, "tid": 1})
    return events


def test_top_op_is_the_copy_with_its_share(tmp_path):
    f = tmp_path / "t.trace.json"
    f.write_text(json.dumps(trace(seed_like_events())))
    s = summarize_trace(f, top=5)
    assert [o.name for o in s.top[:3]] == ["aten::copy_", "aten::mm", "flashinfer::mla_run"]
    assert abs(s.top[0].share - 64600 / (64600 + 9000 + 19400 + 50)) < 1e-3
    assert s.top[0].kernels[0][0] == "direct_copy_kernel_cuda" and s.top[0].calls == 10
    assert any(o.name == "ncclDevKernel_AllReduce" for o in s.top)  # unlinked kernels under their own name
    assert s.steps == 1 and s.kernels == 31 and s.per_step_us == s.total_gpu_us


def test_sglang_step_spans_count_as_steps(tmp_path):
    """SGLang's scheduler never calls prof.step(): its steps are `record_function` spans around each forward
    (model_runner.py, profile_utils.build_step_span_name)."""
    events = [e for e in seed_like_events() if not str(e.get("name", "")).startswith("ProfilerStep#")]
    events += [{"ph": "X", "cat": "user_annotation", "name": name, "ts": 0, "dur": 1, "pid": 1, "tid": 1, "args": {}}
               for name in ("step[EXTEND bs=1 toks=38]", "step[DECODE bs=8]", "step[DECODE bs=8]")]
    events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "step[DECODE bs=8]", "ts": 0, "dur": 1,
                   "pid": 0, "tid": 7, "args": {}})  # the GPU-side copy of a span is not another step
    f = tmp_path / "t.trace.json"
    f.write_text(json.dumps(trace(events)))
    assert summarize_trace(f).steps == 3


def test_gzip_and_bare_list_traces(tmp_path):
    g = tmp_path / "t.trace.json.gz"
    with gzip.open(g, "wt") as w:
        json.dump(trace(seed_like_events()), w)
    plain = tmp_path / "list.json"
    plain.write_text(json.dumps(seed_like_events()))
    assert summarize_trace(g).top[0].name == summarize_trace(plain).top[0].name == "aten::copy_"


def test_cli_json(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(trace(seed_like_events())))
    p = subprocess.run([sys.executable, "-m", "harness", "profile-summary", str(f), "--top", "2", "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert [o["name"] for o in data["top"]] == ["aten::copy_", "aten::mm"] and data["steps"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = subprocess.run([sys.executable, "-m", "harness", "profile-summary", str(bad)], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr


REAL_TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "real-traces"
CAST_KERNEL = "direct_copy_kernel_cuda"  # the FP8 → BF16 `.to()` of the KV pool, as torch names its kernel


def test_a_real_stock_flashinfer_trace_puts_the_whole_pool_cast_on_top():
    """From a live SGLang 0.5.16 server on an H200 (stock FlashInfer MLA, FP8 KV, 19 M-token pool, 5 decode
    steps at batch 1 under CUDA graphs; tests/fixtures/real-traces/SOURCES.md). Kernels replayed from a CUDA
    graph have no CPU op to hang under, so the cast shows up under its kernel's own name."""
    s = summarize_trace(REAL_TRACES / "stock-flashinfer-mla-fp8kv-0.3.trace.json.gz")
    assert s.steps == 5
    assert CAST_KERNEL in s.top[0].name and s.top[0].share > 0.7
    assert s.top[1].name == "aten::copy_"  # the eager part (prefill) casts the pool too
    assert s.per_step_us is not None and s.per_step_us > 100_000  # > 0.1 s of GPU time per decode step


def test_a_real_gather_cast_trace_has_no_pool_cast_and_a_step_three_hundred_times_shorter():
    stock = summarize_trace(REAL_TRACES / "stock-flashinfer-mla-fp8kv-0.3.trace.json.gz")
    s = summarize_trace(REAL_TRACES / "gather-cast-0.3.trace.json.gz")
    assert s.steps == 5
    assert not any(CAST_KERNEL in o.name or o.name == "aten::copy_" for o in s.top[:3])
    assert any("BatchMLAPageAttention" in o.name for o in s.top[:5])
    assert s.per_step_us is not None and stock.per_step_us is not None
    assert stock.per_step_us / s.per_step_us > 300


def test_a_demangled_kernel_shows_its_name_not_its_return_type():
    """`void ns::Kernel<Traits<…>, …>(params)` is a kernel named ns::Kernel: the table shows that (and the
    first named template argument: the functor an elementwise kernel runs), never "void"."""
    from harness.triage.profile import kernel_label

    stock = summarize_trace(REAL_TRACES / "stock-flashinfer-mla-fp8kv-0.3.trace.json.gz")
    gather = summarize_trace(REAL_TRACES / "gather-cast-0.3.trace.json.gz")
    names = {k for s in (stock, gather) for o in s.top for k, _ in o.kernels} | {o.name for o in stock.top}
    demangled = [n for n in names if n.startswith("void ")]
    assert len(demangled) >= 3
    for name in demangled:
        label = kernel_label(name)
        base = name[len("void "):].split("<")[0].split("(")[0]
        assert label.startswith(base) and "void" not in label and "(" not in label, (name, label)
    assert kernel_label(stock.top[0].name) == "at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda…>"
    for kept in ("aten::copy_", "Memcpy DtoD (Device -> Device)", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL("
                 "ncclDevKernelArgsStorage<4096ul>)", "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT"):
        assert kernel_label(kept) == kept  # not a demangled `void …` function: as it is


@pytest.mark.parametrize("columns", ["120", "80"])
def test_cli_table_names_the_kernels(columns):
    p = subprocess.run([sys.executable, "-m", "harness", "profile-summary",
                        str(REAL_TRACES / "stock-flashinfer-mla-fp8kv-0.3.trace.json.gz"), "--top", "6"],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": columns})
    assert p.returncode == 0, p.stderr
    assert "void" not in p.stdout, p.stdout
    assert "at::native::unrolled_elementwise_kernel" in p.stdout and "BatchMLAPageAttention" in p.stdout
    if columns == "120":  # room for the whole name on one line
        assert "at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda…>" in p.stdout
