"""The simulated server's startup log against a real SGLang 0.5.16 one (tests/fixtures/sglang-0.5.16-startup).

The sim is launched with the flags of the real run (tiny DeepSeek-V2-style model, dummy weights, Triton MLA,
FP8 KV, TP 1). Sizes and timings differ and are ignored; what must match is the order of the startup phases,
the wording of every line the sim prints (each has a counterpart in the real log), and the lines the harness
reads (harness/triage/classify.py: READY_PATTERN, the milestones that place the phase, FATAL_PATTERNS).
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from harness.triage import classify as triage
from tests.sim.simproc import READY_LINE, free_port, http, server_args

FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.16-startup"
           / "healthy_05_sglang0516_h200_triton_fp8_startup.log")
REAL_FLAGS = ("--load-format", "dummy", "--attention-backend", "triton", "--kv-cache-dtype", "fp8_e4m3",
              "--mem-fraction-static", "0.3", "--cuda-graph-max-bs", "8", "--grammar-backend", "none")
FAST = {"SGLANG_SIM_STARTUP_SCALE": "0.2"}

# The startup phases, in the order SGLang 0.5.16 prints them (each: the first line matching the pattern).
PHASES = [
    ("launch warning", r"launch_server\.py:\d+: UserWarning: 'python -m sglang\.launch_server' is still supported"),
    ("deprecated flag", r"'--cuda-graph-max-bs' is deprecated and will be removed in a future release\. "
                        r"Use '--cuda-graph-max-bs-decode' instead\."),
    ("server args", r"^server_args=ServerArgs\(model_path="),
    ("chat template", r"^Using default HuggingFace chat template with detected content format: string$"),
    ("dist begin", r"^Init torch distributed begin\.$"),
    ("dist end", r"^Init torch distributed ends\. elapsed=\d+\.\d\d s, mem usage=\d+\.\d\d GB$"),
    ("load begin", r"^Load weight begin\. avail mem=\d+\.\d\d GB$"),
    ("fp8 kv scales", r"^Using FP8 KV cache but no scaling factors provided\. Defaulting to scaling factors of 1\.0\."),
    ("load end", r"^Load weight end\. elapsed=\d+\.\d\d s, type=DeepseekV2ForCausalLM, avail mem=\d+\.\d\d GB, "
                 r"mem usage=\d+\.\d\d GB\.$"),
    ("kv cache", r"^KV Cache is allocated\. dtype: torch\.float8_e4m3fn, #tokens: \d+, KV size: \d+\.\d\d GB$"),
    ("pool end", r"^Memory pool end\. avail mem=\d+\.\d\d GB$"),
    ("capture begin", r"^Capture target decode CUDA graph begin\. backend=full, num_tokens_per_req=1, "
                      r"bs=\[1, 2, 4, 8\], avail mem=\d+\.\d\d GB$"),
    ("capturing", r"^Capturing batches \(bs=8 avail_mem=\d+\.\d\d GB\): +0%\|"),
    ("capture end", r"^Capture target decode CUDA graph end\. elapsed=\d+\.\d\d s, mem usage=\d+\.\d\d GB, "
                    r"avail mem=\d+\.\d\d GB\.$"),
    ("max tokens", r"^max_total_num_tokens=\d+, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                   r"max_running_requests=\d+, context_len=32768, available_gpu_mem=\d+\.\d\d GB$"),
    ("tree cache", r"^Tree cache initialized: source=default impl=RadixCache "),
    ("uvicorn pid", r"^INFO:     Started server process \[\d+\]$"),
    ("uvicorn wait", r"^INFO:     Waiting for application startup\.$"),
    ("uvicorn startup", r"^INFO:     Application startup complete\.$"),
    ("uvicorn running", r"^INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)$"),
    ("warmup model_info", r'^INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK$'),
    ("warmup prefill", r"^Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: 0, token usage: \d+\.\d\d, "
                       r"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
                       r"input throughput \(token/s\): \d+\.\d\d$"),
    ("warmup generate", r'^INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK$'),
    ("ready", "^" + triage.READY_PATTERN + "$"),
]


def messages(text: str) -> list[str]:
    """The log's lines as the harness reads them (triage.clean_line), tqdm redraws split at '\\r', up to the
    ready line."""
    out = []
    for raw in text.splitlines():
        for segment in raw.split("\r"):
            line = triage.clean_line(segment)
            if line:
                out.append(line)
        if READY_LINE in raw:
            break
    return out


def phase_order(lines: list[str]) -> list[str]:
    first = {}
    for i, line in enumerate(lines):
        for name, pattern in PHASES:
            if name not in first and re.search(pattern, line):
                first[name] = i
    return sorted(first, key=first.get)


def normalized(line: str) -> str:
    """A line with what legitimately differs between two runs blanked: numbers, paths, bars, ServerArgs' body."""
    line = re.sub(r"^server_args=ServerArgs\(.*\)$", "server_args=ServerArgs(...)", line)
    line = re.sub(r"^\S*/python/sglang/", "<repo>/python/sglang/", line)
    line = re.sub(r"\|[^|]*\| \d+/\d+ \[[^\]]*\]$", "|<bar>| <n>/<n> [<t>]", line)
    return re.sub(r"\d+", "#", line)


def top_level_fields(server_args_line: str) -> list[str]:
    body = server_args_line[server_args_line.index("ServerArgs(") + len("ServerArgs("):]
    depth, flat = 0, []
    for ch in body:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth < 0:
            break
        if depth == 0:
            flat.append(ch)
    return re.findall(r"(?:^|, )(\w+)=", "".join(flat))


@pytest.fixture(scope="module")
def real_lines() -> list[str]:
    return messages(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tiny_mla(tmp_path_factory) -> Path:
    # A DeepSeek-V2-style config like the real run's model; "0.1b" in the name sizes its dummy weights.
    model = tmp_path_factory.mktemp("models") / "tinymla-0.1b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "num_hidden_layers": 4,
        "num_attention_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "max_position_embeddings": 32768,
    }))
    return model


@pytest.fixture(scope="module")
def sim_lines(tmp_path_factory, tiny_mla) -> list[str]:
    from harness.sim import init_target
    from tests.sim.simproc import launch_proc

    target = init_target(tmp_path_factory.mktemp("sim") / "h200", arch="sm90", gpus=1)
    port = free_port()
    proc = launch_proc(target, *server_args(port, *REAL_FLAGS, model=str(tiny_mla)), env=FAST)
    try:
        proc.wait_for_line(re.escape(READY_LINE), timeout=60)
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.wait_exit(timeout=10) == 0
    finally:
        proc.kill_group()
    return messages(proc.output)


def test_real_fixture_has_every_phase_in_order(real_lines):
    assert phase_order(real_lines) == [name for name, _ in PHASES]


def test_sim_startup_phases_come_in_the_real_order(sim_lines, real_lines):
    assert phase_order(sim_lines) == phase_order(real_lines)


def test_every_sim_startup_line_is_worded_as_a_real_one(sim_lines, real_lines):
    real = {normalized(line) for line in real_lines}
    foreign = [line for line in sim_lines if normalized(line) not in real]
    assert foreign == []


def test_sim_server_args_fields_are_real_ones_in_the_real_order(sim_lines, real_lines):
    real = top_level_fields(next(line for line in real_lines if line.startswith("server_args=")))
    sim = top_level_fields(next(line for line in sim_lines if line.startswith("server_args=")))
    assert len(real) > 400 and len(sim) > 40
    assert [f for f in sim if f not in real] == []
    assert sim == sorted(sim, key=real.index)
    line = next(line for line in sim_lines if line.startswith("server_args="))
    for field in ("load_format='dummy'", "grammar_backend='none'", "cuda_graph_max_bs_decode=8",
                  "kv_cache_dtype='fp8_e4m3'", "attention_backend='triton'", "tp_size=1"):
        assert field in line


def test_scheduler_lines_carry_no_rank_at_tp1(sim_lines):
    # [2026-11-30 07:38:37] Init torch distributed begin.  -- no " TP0" when there is one rank
    stamps = [line for line in sim_lines if "TP0" in line or "DP0" in line]
    assert stamps == []


def test_triage_reads_sim_and_real_startup_alike(sim_lines, real_lines):
    for lines in (real_lines, sim_lines):
        t = triage.Triage()
        phases = []
        for line in lines:
            t.feed(line)
            if not phases or phases[-1] != t.phase:
                phases.append(t.phase)
        assert t.ready and not t.fatal_seen
        # (Before the first milestone the phase is a guess from clues: the real log's "Breakable CUDA graph ..."
        # warning reads as one; only the milestones matter here.)
        assert phases[phases.index("args"):] == ["args", "distributed-init", "load-weights", "kv-cache",
                                                 "cuda-graph-capture", "warmup", "serving"]
        assert triage.triage_text("\n".join(lines)).verdict == "ready"


@pytest.mark.parametrize("tp,dp,expected", [(2, 1, {" TP0", " TP1"}), (1, 2, {" DP0", " DP1"}),
                                            (2, 2, {" DP0 TP0", " DP0 TP1", " DP1 TP0", " DP1 TP1"})])
def test_rank_prefixes_name_only_the_dimensions_used(shared_target, launch, tiny_mla, tp, dp, expected):
    proc = launch(shared_target, *server_args(free_port(), "--tp", str(tp), "--dp", str(dp), "--load-format", "dummy",
                                              "--attention-backend", "triton", model=str(tiny_mla)),
                  env={"SGLANG_SIM_STARTUP_SCALE": "0"})
    proc.wait_for_line(re.escape(READY_LINE), timeout=60)
    # Not anchored at the line start: a rank's line can land behind another rank's unfinished tqdm bar, as in
    # real logs.
    prefixes = set(re.findall(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d((?: [A-Z]+\d+)*)\] Init torch distributed begin",
                              proc.output))
    assert prefixes == expected
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=10) == 0


@pytest.mark.parametrize("generation", ["default", "0"])
def test_health_generates_unless_switched_off(shared_target, launch, tiny_mla, generation):
    env = {"SGLANG_SIM_STARTUP_SCALE": "0"}
    if generation != "default":
        env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = generation
    port = free_port()
    proc = launch(shared_target, *server_args(port, "--load-format", "dummy", model=str(tiny_mla)), env=env)
    proc.wait_for_line(re.escape(READY_LINE), timeout=60)
    before = proc.output.count("Prefill batch")
    assert http(port, "GET", "/health")[0] == 200
    proc.wait_for_line(r'"GET /health HTTP/1\.1" 200 OK', timeout=10)
    after_health = proc.output.count("Prefill batch")
    assert http(port, "GET", "/health_generate")[0] == 200
    proc.wait_for_line(r'"GET /health_generate HTTP/1\.1" 200 OK', timeout=10)
    # SGLang 0.5.16: /health is /health_generate (a 1-token request through the scheduler) unless
    # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is false; /health_generate always generates.
    assert after_health - before == (1 if generation == "default" else 0)
    assert proc.output.count("Prefill batch") == after_health + 1
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=10) == 0


def test_launch_accepts_the_real_runs_flags_and_rejects_bad_values(shared_target, launch, tiny_mla):
    proc = launch(shared_target, *server_args(free_port(), "--grammar-backend", "bogus", model=str(tiny_mla)))
    assert proc.wait_exit(timeout=30) == 2
    assert "error: argument --grammar-backend: invalid choice: 'bogus'" in proc.output
    proc = launch(shared_target, *server_args(free_port(), "--load-format", "bogus", model=str(tiny_mla)))
    assert proc.wait_exit(timeout=30) == 2
    assert "error: argument --load-format: invalid choice: 'bogus'" in proc.output
