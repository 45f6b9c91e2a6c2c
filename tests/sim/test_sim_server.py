"""The simulated server: startup, readiness, crashes, hangs, HTTP API, benchmark client."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from http.client import HTTPConnection

import pytest

from harness.sim import init_target
from tests.sim.simproc import (
    FAST_ENV,
    FP8_PATCH,
    HANG_PATCH,
    READY_LINE,
    free_port,
    http,
    server_args,
    session_pids,
    wait_http_status,
)

REAL_JSONL_KEYS = [
    "tag",
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "server_info",
    "duration",
    "completed",
    "total_input_tokens",
    "total_input_text_tokens",
    "total_input_vision_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "std_e2e_latency_ms",
    "p90_e2e_latency_ms",
    "p95_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p90_ttft_ms",
    "p95_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p90_tpot_ms",
    "p95_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p90_itl_ms",
    "p95_itl_ms",
    "p99_itl_ms",
    "concurrency",
    "accept_length",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
]


def compute_apps(target) -> str:
    exe = target.python.parent / "nvidia-smi"
    args = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=30).stdout


def bench(target, port, out_file, *extra, timeout=60):
    cmd = [
        str(target.python),
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dataset-name",
        "random",
        "--num-prompts",
        "8",
        "--random-input-len",
        "64",
        "--random-output-len",
        "32",
        "--random-range-ratio",
        "1.0",
        "--output-file",
        str(out_file),
        "--disable-tqdm",
        "--tag",
        "sim-test",
        *extra,
    ]
    return subprocess.run(cmd, cwd=target.repo, capture_output=True, text=True, timeout=timeout)


def assert_no_leftovers(proc):
    assert session_pids(proc.pid) == [], "processes of the server's session are still alive"


def test_healthy_start_bench_and_sigterm(shared_target, launch, tmp_path):
    port = free_port()
    proc = launch(shared_target, *server_args(port, "--tp", "2", "--attention-backend", "flashinfer"))
    assert proc.wait_for_line("Init torch distributed begin", timeout=30).startswith("[")
    proc.wait_for_line(READY_LINE, timeout=30)
    ready_after = time.monotonic() - proc.started
    assert ready_after < 15
    assert http(port, "GET", "/health_generate")[0] == 200
    assert http(port, "GET", "/health")[0] == 200
    out = proc.output
    for milestone in (
        "server_args=ServerArgs(",
        "TP0] Init torch distributed begin.",
        "TP1] Load weight begin. avail mem=",
        "Load weight end.",
        "KV Cache is allocated.",
        "Memory pool end. avail mem=",
        "Capture target decode CUDA graph begin. backend=",
        "Capture target decode CUDA graph end.",
        "max_total_num_tokens=",
        "INFO:     Started server process [",
        "Uvicorn running on http://127.0.0.1:%d" % port,
        '"GET /model_info HTTP/1.1" 200 OK',
        '"POST /generate HTTP/1.1" 200 OK',
    ):
        assert milestone in out, milestone
    assert out.index("Load weight end.") < out.index("Uvicorn running") < out.index(READY_LINE)
    stamp = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    assert re.search(stamp + r" TP0\] Load weight begin\. avail mem=\d+\.\d\d GB$", out, re.M)
    assert re.search(stamp + r"\] The server is fired up and ready to roll!$", out, re.M)
    apps = compute_apps(shared_target).splitlines()
    assert len(apps) == 2 and all(int(line.split(", ")[1]) > 100000 for line in apps)

    out_file = tmp_path / "bench.jsonl"
    result = bench(shared_target, port, out_file)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "============ Serving Benchmark Result ============" in result.stdout
    for label in (
        "Successful requests:",
        "Output token throughput (tok/s):",
        "Median TTFT (ms):",
        "Median ITL (ms):",
    ):
        assert label in result.stdout
    record = json.loads(out_file.read_text().splitlines()[-1])
    assert list(record) == REAL_JSONL_KEYS
    assert record["completed"] == 8
    assert record["total_input_tokens"] == 8 * 64
    assert record["total_output_tokens"] == 8 * 32
    assert record["total_output_tokens_retokenized"] == 8 * 32
    assert record["tag"] == "sim-test" and record["backend"] == "sglang"
    assert 0 < record["median_ttft_ms"] < 5000 and 0 < record["median_itl_ms"] < 1000
    assert record["output_throughput"] > 0 and record["duration"] > 0
    assert record["server_info"]["version"] == "0.5.23"
    assert record["server_info"]["tp_size"] == 2

    bench(shared_target, port, out_file)  # JSONL is appended
    assert len(out_file.read_text().splitlines()) == 2

    proc.popen.send_signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=10) == 0
    assert "SIGTERM received" in proc.output
    assert_no_leftovers(proc)
    assert compute_apps(shared_target) == ""


def test_stock_flashinfer_fp8_starts_and_is_slower_than_auto(shared_target, launch):
    costs = {}
    for kv in ("auto", "fp8_e4m3"):
        port = free_port()
        proc = launch(
            shared_target,
            *server_args(port, "--attention-backend", "flashinfer", "--kv-cache-dtype", kv),
            env=FAST_ENV,
        )
        proc.wait_for_line(READY_LINE, timeout=30)
        status, text = http(port, "GET", "/server_info")
        assert status == 200
        model = json.loads(text)["internal_states"][0]["sim_cost_model"]
        costs[kv] = model["decode_step_ms"]
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.wait_exit(timeout=10) == 0
    assert costs["auto"]["1"]["cast"] == 0
    assert costs["fp8_e4m3"]["1"]["cast"] > 0
    # The full-pool FP8 -> BF16 cast in every layer dominates the step.
    assert costs["fp8_e4m3"]["1"]["total"] > 1.5 * costs["auto"]["1"]["total"]
    assert costs["fp8_e4m3"]["1"]["cast"] > costs["fp8_e4m3"]["1"]["attention"] * 10
    # Batching amortizes the fixed costs: throughput grows, sub-linearly.
    auto = costs["auto"]
    assert auto["1"]["total"] < auto["8"]["total"] < 8 * auto["1"]["total"]


def test_crash_is_fast(fresh_target, launch):
    """From the scheduler's exception to the launcher's death: well under a second."""
    subprocess.run(["git", "apply", str(FP8_PATCH)], cwd=fresh_target.repo, check=True)
    port = free_port()
    proc = launch(
        fresh_target,
        *server_args(port, "--attention-backend", "flashinfer", "--kv-cache-dtype", "fp8_e4m3"),
        env={"SGLANG_SIM_STARTUP_SCALE": "0"},
    )
    proc.wait_for_line("Scheduler hit an exception", timeout=30)
    seen = time.monotonic()
    proc.wait_exit(timeout=10)
    assert time.monotonic() - seen < 0.5


def test_trtllm_mla_on_hopper_fails_in_main_process(shared_target, launch):
    proc = launch(shared_target, *server_args(free_port(), "--attention-backend", "trtllm_mla"), env=FAST_ENV)
    assert proc.wait_exit(timeout=30) == 1
    out = proc.output
    assert out.rstrip().endswith(
        "ValueError: TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
        "Please use a different backend."
    )
    assert "Traceback (most recent call last):" in out
    assert "sigquit" not in out.lower() and "Init torch distributed" not in out


def test_cutedsl_mla_on_hopper_fails_in_main_process(shared_target, launch):
    proc = launch(
        shared_target, *server_args(free_port(), "--attention-backend", "cutedsl_mla"), env=FAST_ENV
    )
    assert proc.wait_exit(timeout=30) == 1
    assert (
        "ValueError: CuteDSL MLA backend is only supported on Blackwell GPUs (SM100). "
        "Please use a different backend." in proc.output
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--attention-backend", "cutlass_mla"],
            "argument --attention-backend: invalid choice: 'cutlass_mla'",
        ),
        (["--kv-cache-dtype", "fp4_e2m1"], "argument --kv-cache-dtype: invalid choice: 'fp4_e2m1'"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
    ids=["cutlass_mla", "kv-dtype", "unknown-flag"],
)
def test_bad_arguments_exit_2(shared_target, launch, args, message):
    proc = launch(shared_target, *server_args(free_port(), *args))
    assert proc.wait_exit(timeout=30) == 2
    assert message in proc.output
    assert "usage: launch_server.py [-h]" in proc.output


def test_blackwell_checks(tmp_path, launch):
    b200 = init_target(tmp_path / "b200", arch="sm100", gpus=8)
    bad_kv = launch(
        b200, *server_args(free_port(), "--attention-backend", "trtllm_mla", "--kv-cache-dtype", "fp8_e5m2")
    )
    assert bad_kv.wait_exit(timeout=30) == 1
    assert (
        "ValueError: TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto."
        in bad_kv.output
    )

    llama = launch(
        b200,
        *server_args(
            free_port(), "--attention-backend", "trtllm_mla", model="meta-llama/Llama-3.1-8B-Instruct"
        ),
        env=FAST_ENV,
    )
    assert llama.wait_exit(timeout=30) == -signal.SIGKILL
    assert "ValueError: trtllm_mla backend can only be used with MLA models." in llama.output
    assert "Received sigquit from a child process" in llama.output

    port = free_port()
    good = launch(
        b200,
        *server_args(port, "--attention-backend", "trtllm_mla", "--kv-cache-dtype", "fp8_e4m3"),
        env=FAST_ENV,
    )
    good.wait_for_line(READY_LINE, timeout=30)
    assert (
        "TensorRT-LLM MLA only supports page_size of 32 or 64, changing page_size from 1 to 64."
        in good.output
    )


def test_oom_during_capture(shared_target, launch):
    proc = launch(shared_target, *server_args(free_port(), "--mem-fraction-static", "0.96"), env=FAST_ENV)
    assert proc.wait_exit(timeout=30) == -signal.SIGKILL
    out = proc.output
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " in out
    assert "GPU 0 has a total capacity of 140.40 GiB of which " in out
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in out
    assert "Received sigquit from a child process" in out
    assert_no_leftovers(proc)


def test_nccl_hang_patch_never_becomes_ready(fresh_target, launch):
    subprocess.run(["git", "apply", str(HANG_PATCH)], cwd=fresh_target.repo, check=True)
    port = free_port()
    proc = launch(fresh_target, *server_args(port, "--tp", "2"), env=FAST_ENV)
    proc.wait_for_line(r"TP1\] Init torch distributed begin", timeout=30)
    proc.assert_no_line("Init torch distributed ends|" + READY_LINE, within=3.0)
    assert proc.popen.poll() is None
    with pytest.raises(OSError):
        http(port, "GET", "/health", timeout=2)


def test_hang_after_uvicorn_serves_503(shared_target, launch):
    port = free_port()
    env = dict(FAST_ENV, SGLANG_SIM_HANG_AFTER="uvicorn")
    proc = launch(shared_target, *server_args(port), env=env)
    proc.wait_for_line("Uvicorn running on", timeout=30)
    assert http(port, "GET", "/health")[0] == 503
    assert http(port, "GET", "/health_generate")[0] == 503
    assert http(port, "GET", "/v1/models")[0] == 200
    proc.assert_no_line(READY_LINE, within=1.0)


def test_hang_after_load_weights(shared_target, launch):
    proc = launch(
        shared_target, *server_args(free_port()), env=dict(FAST_ENV, SGLANG_SIM_HANG_AFTER="load-weights")
    )
    proc.wait_for_line("Load weight end", timeout=30)
    proc.assert_no_line("KV Cache is allocated", within=1.5)


def test_port_in_use_exits_1(shared_target, launch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = launch(shared_target, *server_args(port), env=FAST_ENV)
        assert proc.wait_exit(timeout=30) == 1
    assert (
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
        "address already in use"
    ) in proc.output
    assert READY_LINE not in proc.output
    assert_no_leftovers(proc)


def test_crash_in_bench_kills_server_and_fails_bench(shared_target, launch, tmp_path):
    port = free_port()
    proc = launch(shared_target, *server_args(port), env=dict(FAST_ENV, SGLANG_SIM_CRASH_IN_BENCH="3"))
    proc.wait_for_line(READY_LINE, timeout=30)
    result = bench(shared_target, port, tmp_path / "b.jsonl", "--max-concurrency", "1")
    assert result.returncode != 0
    assert proc.wait_exit(timeout=10) == -signal.SIGKILL
    out = proc.output
    assert "CUDA error: an illegal memory access was encountered" in out
    assert "Scheduler hit an exception" in out
    assert "SIGQUIT received. signum=" in out
    assert not (tmp_path / "b.jsonl").exists()
    assert_no_leftovers(proc)


def test_ignore_sigterm(shared_target, launch):
    port = free_port()
    proc = launch(shared_target, *server_args(port), env=dict(FAST_ENV, SGLANG_SIM_IGNORE_SIGTERM="1"))
    proc.wait_for_line(READY_LINE, timeout=30)
    proc.popen.send_signal(signal.SIGTERM)
    proc.assert_no_line("SIGTERM received", within=1.0)
    assert proc.popen.poll() is None
    wait_http_status(port, "/health", 200, timeout=5)
    proc.kill_group()
    assert proc.popen.returncode == -signal.SIGKILL
    assert_no_leftovers(proc)


def test_http_api(shared_target, launch, tmp_path):
    port = free_port()
    proc = launch(shared_target, *server_args(port, "--served-model-name", "glm5"), env=FAST_ENV)
    proc.wait_for_line(READY_LINE, timeout=30)

    status, text = http(port, "GET", "/model_info")
    info = json.loads(text)
    assert status == 200 and info["model_path"] == "zai-org/GLM-5-NVFP4" and info["is_generation"] is True
    assert http(port, "GET", "/get_model_info")[0] == 200
    proc.wait_for_line("Endpoint '/get_model_info' is deprecated", timeout=5)
    server_info = json.loads(http(port, "GET", "/get_server_info")[1])
    assert server_info["version"] == "0.5.23" and server_info["port"] == port
    models = json.loads(http(port, "GET", "/v1/models")[1])
    assert models["data"][0]["id"] == "glm5"

    status, text = http(
        port, "POST", "/generate", {"text": "a b c", "sampling_params": {"max_new_tokens": 5}}
    )
    out = json.loads(text)
    assert status == 200 and out["meta_info"]["completion_tokens"] == 5
    assert out["meta_info"]["prompt_tokens"] == 3 and len(out["text"].split()) == 5
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 5}

    # Streaming: the exact shape SGLang's bench client parses.
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    body = {
        "input_ids": [1, 2, 3, 4],
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
        "stream": True,
    }
    conn.request("POST", "/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    assert res.status == 200 and res.getheader("content-type").startswith("text/event-stream")
    events = [line.strip() for line in res.read().split(b"\n") if line.strip()]
    conn.close()
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4]
    assert chunks[-1]["text"].startswith(chunks[0]["text"]) and chunks[-1]["index"] == 0
    assert (
        chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
        and "e2e_latency" in chunks[-1]["meta_info"]
    )

    status, text = http(
        port, "POST", "/v1/completions", {"model": "glm5", "prompt": "hi there", "max_tokens": 3}
    )
    completion = json.loads(text)
    assert status == 200 and completion["usage"]["completion_tokens"] == 3
    assert completion["choices"][0]["finish_reason"] == "length"

    assert http(port, "POST", "/flush_cache") == (200, http(port, "GET", "/flush_cache")[1])
    out_dir = str(tmp_path / "profile")
    assert http(port, "POST", "/start_profile", {"output_dir": out_dir, "with_stack": False}) == (
        200, "Start profiling.\n")
    assert http(port, "POST", "/start_profile") == (500, "Internal Server Error")  # already in progress
    assert http(port, "GET", "/stop_profile") == (200, "Stop profiling. This will take some time.\n")
    assert http(port, "GET", "/nope")[0] == 404
    assert http(port, "GET", "/generate")[0] == 405
    proc.wait_for_line('"POST /start_profile HTTP/1.1" 200 OK', timeout=5)


def test_bench_against_no_server_fails(shared_target, tmp_path):
    result = bench(shared_target, free_port(), tmp_path / "none.jsonl", "--ready-check-timeout-sec", "1")
    assert result.returncode == 1
    assert "is not ready. Exiting." in result.stdout
    assert not (tmp_path / "none.jsonl").exists()


def test_skip_server_warmup(shared_target, launch):
    port = free_port()
    proc = launch(shared_target, *server_args(port, "--skip-server-warmup"), env=FAST_ENV)
    proc.wait_for_line(READY_LINE, timeout=30)
    assert '"POST /generate' not in proc.output and "Prefill batch" not in proc.output
    assert http(port, "GET", "/health_generate")[0] == 200


def test_log_level_warning_hides_info_lines(shared_target, launch):
    port = free_port()
    proc = launch(shared_target, *server_args(port, "--log-level", "warning"), env=FAST_ENV)
    wait_http_status(port, "/health", 200, timeout=30)
    assert "Load weight begin" not in proc.output and "Uvicorn running" not in proc.output
    assert READY_LINE not in proc.output
