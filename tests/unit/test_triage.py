"""Triage reads logs like an engineer: real SGLang logs, and edge cases written for the purpose."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.triage.classify import (
    CATEGORIES,
    KEY_LINE_MAX,
    PHASES,
    Triage,
    Verdict,
    _sig,
    clean_line,
    hang_hint,
    triage_file,
    triage_text,
)

# Real SGLang logs from public bug reports (real-logs/) and from the project's own SGLang 0.5.16 runs on an H200
# (real-logs-live/), kept in the repo (each folder's SOURCES.md says where each comes from), so a plain clone runs
# these tests with nothing beside it.
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL_LOGS = FIXTURES / "real-logs"
REAL_LOG_FOLDERS = (REAL_LOGS, FIXTURES / "real-logs-live")


def expected_rows():
    rows = []
    for folder in REAL_LOG_FOLDERS:
        with open(folder / "expected.tsv") as f:
            rows += [dict(r, path=folder / r["file"]) for r in csv.DictReader(f, delimiter="\t")]
    return rows


@pytest.mark.parametrize("folder", REAL_LOG_FOLDERS, ids=lambda p: p.name)
def test_every_real_log_has_an_expected_verdict_and_a_source(folder):
    listed = {r["file"] for r in expected_rows() if r["path"].parent == folder}
    assert listed == {p.name for p in folder.glob("*.log")}
    sources = (folder / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in listed)


@pytest.mark.parametrize("row", expected_rows(), ids=lambda r: r["file"])
def test_real_logs_classified_as_expected(row):
    v = triage_file(row["path"])
    assert (v.verdict, v.category) == (row["verdict"], row["category"])
    assert v.category in CATEGORIES
    if v.verdict == "crash":
        assert v.key_line and not v.key_line.startswith("Traceback")
        assert "Received sigquit" not in v.key_line
        assert v.hint


SGLANG_PREFIX = "[2025-11-01 10:00:0{i} TP{i}] "


def healthy_start(prefix=lambda i: SGLANG_PREFIX.format(i=i)) -> list[str]:
    return [prefix(0) + "server_args=ServerArgs(model_path='m')",
            prefix(0) + "Init torch distributed begin.",
            prefix(0) + "Load weight begin. avail mem=78.81 GB",
            prefix(0) + "Load weight end. type=X, avail mem=63.72 GB",
            prefix(0) + "KV Cache is allocated. K size: 27.13 GB",
            prefix(0) + "Capture cuda graph begin. This can take up to several minutes.",
            prefix(0) + "Capture cuda graph end. Time elapsed: 6.57 s",
            "[2025-11-01 10:00:09] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
            "[2025-11-01 10:00:09] The server is fired up and ready to roll!"]


def test_milestones_give_the_phase():
    lines = healthy_start()[:6] + ["[2025-11-01 10:00:07 TP3] Scheduler hit an exception: Traceback (most recent "
                                   "call last):",
                                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                                   "[2025-11-01 10:00:08] Received sigquit from a child process. It usually means "
                                   "the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category, v.phase) == ("crash", "oom", "cuda-graph-capture")
    assert v.key_line.startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert "--cuda-graph-max-bs" in v.hint and "--mem-fraction-static" in v.hint


def test_docker_ray_and_ansi_prefixes():
    lines = [f"2025-11-01T10:00:0{i}.123456789Z (EngineCore pid=4242) \x1b[32m" + line + "\x1b[0m"
             for i, line in enumerate(healthy_start()[:3])]
    lines.append("2025-11-01T10:00:05.1Z (EngineCore pid=4242) \x1b[31mRuntimeError: CUDA error: an illegal memory "
                 "access was encountered\x1b[0m")
    v = triage_text("\n".join(lines), 1)
    assert v.category == "illegal-memory-access" and v.phase == "load-weights"
    assert v.key_line == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_carriage_return_tqdm_redraws_collapse():
    text = ("Capturing batches (bs=256 avail_mem=19.9 GB):   0%|   | 0/36\r"
            "Capturing batches (bs=128 avail_mem=12.1 GB):  50%|#  | 18/36\r"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n")
    v = triage_text(text, 137)
    assert v.category == "oom" and v.phase == "cuda-graph-capture"


def test_interleaved_ranks_root_cause_beats_consequences():
    lines = healthy_start()[:3]
    for i in range(8):
        lines.append(SGLANG_PREFIX.format(i=i) + "Scheduler hit an exception: Traceback (most recent call last):")
        if i == 5:
            lines.append("RuntimeError: CUDA error: an illegal memory access was encountered")
        else:
            lines.append("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                         "remote process exited or there was a network error")
    lines.append("[2025-11-01 10:00:09] Received sigquit from a child process. It usually means the child failed.")
    v = triage_text("\n".join(lines), 137)
    assert v.category == "illegal-memory-access"


OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity "
            "of 139.81 GiB of which 301.69 MiB is free.")
IMA_LINE = "RuntimeError: CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize("ima_printed_first", [False, True], ids=["oom-printed-first", "ima-printed-first"])
def test_oom_is_the_root_cause_when_an_illegal_memory_access_follows_it(ima_printed_first):
    # TP0 runs out of memory capturing CUDA graphs; TP1's kernels then fault on the half-set-up buffers.
    # SGLang's ranks print in any order, so which one comes first in the file must not matter.
    oom = ["[2025-11-01 10:00:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
           '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 267, in '
           "__init__",
           "    self.capture()",
           OOM_LINE]
    ima = ["[2025-11-01 10:00:07 TP1] Scheduler hit an exception: Traceback (most recent call last):",
           '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 267, in '
           "__init__",
           "    self.capture()",
           IMA_LINE,
           "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
           "might be incorrect."]
    lines = healthy_start()[:6] + (ima + oom if ima_printed_first else oom + ima) + [
        "[2025-11-01 10:00:08] Received sigquit from a child process. It usually means the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category, v.phase) == ("crash", "oom", "cuda-graph-capture")
    assert v.key_line == OOM_LINE


def test_a_childs_error_beats_the_sigquit_and_kill_that_follow_it():
    # A scheduler child fails loading weights; the launcher logs the sigquit, kills the tree and itself.
    key_error = "KeyError: 'model.layers.0.self_attn.kv_a_proj_with_mqa.weight'"
    lines = healthy_start()[:3] + [
        "[2025-11-01 10:00:04 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2009, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", line 1890, in load_weights',
        "    param = params_dict[name]",
        key_error,
        "",
        "[2025-11-01 10:00:04] Received sigquit from a child process. It usually means the child failed.",
        "Killed"]
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category, v.phase) == ("crash", "python-exception", "load-weights")
    assert v.key_line == key_error


def test_the_seed_static_assert_is_the_key_line():
    text = "\n".join(healthy_start()[:6] + [
        "[2025-11-01 10:00:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: Ninja build failed. Ninja output:",
        "FAILED: batch_mla_run.cuda.o",
        "/usr/local/lib/python3.12/dist-packages/flashinfer/data/include/flashinfer/mma.cuh(523): error: static "
        "assertion failed with \"DType must be 16bit floating data type\"",
        "    static_assert(sizeof(DType) == 2, \"DType must be 16bit floating data type\");",
        "ninja: build stopped: subcommand failed.",
        "[2025-11-01 10:00:08] Received sigquit from a child process. It usually means the child failed.",
    ])
    v = triage_text(text, 137)
    assert v.category == "jit-compile-error" and v.phase == "cuda-graph-capture"
    assert "static assertion failed" in v.key_line and "mma.cuh(523)" in v.key_line


def test_a_kv_dtype_the_attention_kernels_lack_says_to_change_the_kv_dtype_not_a_startup_flag():
    """Seen live (e5m2 KV into FlashInfer 0.6.14's MLA plan): a ValueError raised in CUDA graph capture. The
    generic config-error advice ("rejected its arguments ... before starting") was wrong on both counts."""
    v = triage_file(REAL_LOGS.parent / "real-logs-live" / "crash_config_fp8_e5m2_kv_into_flashinfer_mla_plan_sglang0516_h200.log")
    assert (v.category, v.phase) == ("config-error", "cuda-graph-capture")
    assert v.key_line.startswith("ValueError: MLA kv_data_type torch.float8_e5m2 is not supported")
    assert "kv_cache_dtype" in v.hint and "before starting" not in v.hint
    other = triage_text("[2025-01-01 10:00:00] ValueError: kv_cache_dtype fp8_e5m2 is not supported by cutlass_mla\n")
    assert "kv_cache_dtype" in other.hint
    flag = triage_text("launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp4'\n")
    assert "before starting" in flag.hint  # a rejected flag keeps the argument advice


def test_a_hang_is_advised_by_where_the_log_stopped():
    """Seen live: a server stuck after the KV pool, before CUDA graph capture, was told to look at NCCL."""
    log = REAL_LOGS.parent / "real-logs-live" / "hung_before_cuda_graphs_sglang0516_h200.log"
    phase = triage_file(log).phase
    assert phase == "kv-cache"
    assert "NCCL" not in hang_hint(phase) and "CUDA graph capture" in hang_hint(phase)
    assert "NCCL" in hang_hint("distributed-init")
    assert len({hang_hint(p) for p in PHASES}) == len(PHASES)
    assert "stack-dump.txt" in hang_hint(phase) and "py-spy" in hang_hint(phase, stack_dump=False)
    assert hang_hint(None).startswith("the server stopped making progress before its log said where")


def test_ready_then_crash_crash_wins():
    lines = healthy_start() + [
        "[2025-11-01 10:01:00 TP2] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "[2025-11-01 10:01:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed."]
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category, v.phase) == ("crash", "illegal-memory-access", "serving")


def test_crash_words_quoted_in_a_request_are_not_a_crash():
    lines = healthy_start() + [
        "[2025-11-01 10:01:00] Receive: obj=GenerateReqInput(text='Why does Scheduler hit an exception: CUDA out "
        "of memory?', sampling_params={'max_new_tokens': 8})",
        '[2025-11-01 10:01:00] INFO:     127.0.0.1:5555 - "POST /generate HTTP/1.1" 200 OK',
        '[2025-11-01 10:01:01] Finish: obj=GenerateReqInput(), out={"text": "Received sigquit from a child '
        'process. Killed"}']
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category) == ("ready", "ready")


def test_handled_exception_after_ready_is_still_ready():
    lines = healthy_start() + ["[2025-11-01 10:01:00] ValueError: Requested max_new_tokens exceeds context length",
                               '[2025-11-01 10:01:00] INFO:     127.0.0.1:5555 - "POST /generate HTTP/1.1" 400']
    assert triage_text("\n".join(lines)).verdict == "ready"
    assert triage_text("\n".join(lines), exit_code=1).verdict == "crash"  # but dying undoes it


def test_log_cut_at_the_start_still_names_cause_and_phase_from_frames():
    text = ('  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 267, in __init__\n'
            "    self.capture()\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB.\n")
    v = triage_text(text)
    assert (v.verdict, v.category, v.phase) == ("crash", "oom", "cuda-graph-capture")


def test_log_cut_at_the_end_is_incomplete():
    v = triage_text("\n".join(healthy_start()[:4]))
    assert (v.verdict, v.category, v.phase) == ("incomplete", "incomplete", "kv-cache")


def test_empty_log():
    v = triage_text("")
    assert (v.verdict, v.category) == ("incomplete", "incomplete")
    v = triage_text("", exit_code=137)
    assert (v.verdict, v.category) == ("crash", "killed")


def test_binary_garbage_does_not_break_it(tmp_path):
    import random

    rnd = random.Random(7)
    blob = bytes(rnd.randrange(256) for _ in range(200_000))
    f = tmp_path / "garbage.log"
    f.write_bytes(blob + b"\nRuntimeError: Error building extension 'x'\n" + blob[:1000])
    v = triage_file(f, exit_code=1)
    assert (v.verdict, v.category) == ("crash", "jit-compile-error")


def test_exit_code_alone():
    assert triage_text("just some output\n", 137).category == "killed"
    assert triage_text("just some output\n", 1).category == "unknown"
    assert triage_text("just some output\n", 0).verdict == "incomplete"


def test_chunked_feeding_equals_whole_text():
    text = "\n".join(healthy_start()[:6] + ["torch.OutOfMemoryError: CUDA out of memory."]) + "\n"
    whole = triage_text(text, 137)
    for size in (1, 7, 64):
        t = Triage()
        for i in range(0, len(text), size):
            t.feed_text(text[i:i + size])
        assert t.finish().verdict(137) == whole


# The phases as docs/triage.md documents them, in startup order, with how many lines of
# healthy_start() a server has printed when it is in that phase.
DOCUMENTED_PHASES = [("args", 1), ("distributed-init", 2), ("load-weights", 3), ("kv-cache", 5),
                     ("cuda-graph-capture", 6), ("warmup", 8), ("serving", 9)]


@pytest.mark.parametrize("phase, printed", DOCUMENTED_PHASES, ids=[p for p, _ in DOCUMENTED_PHASES])
def test_a_crash_in_each_documented_phase_is_reported_with_that_phase_name(phase, printed):
    lines = healthy_start()[:printed] + [
        "[2025-11-01 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "[2025-11-01 10:00:10] Received sigquit from a child process. It usually means the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category, v.phase) == ("crash", "illegal-memory-access", phase)


TRIAGE_DOC = Path(__file__).resolve().parents[2] / "docs" / "triage.md"  # the README links it


def test_the_phase_names_triage_knows_are_the_ones_the_docs_list():
    readme = " ".join(TRIAGE_DOC.read_text().split())
    documented = [p for p, _ in DOCUMENTED_PHASES]
    assert "`phase` (" + ", ".join(documented) + ")" in readme
    assert list(PHASES) == documented


def test_cli_json_has_exactly_the_contract_keys(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "server.log"
    f.write_text("\n".join(healthy_start()[:3] + ["RuntimeError: CUDA error: an illegal memory access was "
                                                  "encountered"]) + "\n")
    p = subprocess.run([sys.executable, "-m", "harness", "triage", str(f), "--exit-code", "137", "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert set(data) == {"verdict", "category", "key_line", "phase", "hint"}
    assert data["category"] == "illegal-memory-access"
    p = subprocess.run([sys.executable, "-m", "harness", "triage", str(f)], capture_output=True, text=True)
    assert p.returncode == 0 and "illegal-memory-access" in p.stdout
    p = subprocess.run([sys.executable, "-m", "harness", "triage", str(tmp_path / "nope.log")], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr


# What the failure signatures mean, one typical line each (sglang-facts §3, §6 and common CUDA/NCCL
# messages) — written for the purpose, not taken from the real logs.
MEANINGS = [
    ("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 3 has a total capacity"),
    ("oom", "RuntimeError: CUDA error: out of memory"),
    ("oom", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    ("illegal-memory-access", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("illegal-memory-access", "RuntimeError: CUDA error: misaligned address"),
    ("illegal-memory-access", "RuntimeError: CUDA error: device-side assert triggered"),
    ("illegal-memory-access", "torch.AcceleratorError: CUDA error: unspecified launch failure"),
    ("jit-compile-error", "RuntimeError: Ninja build failed. Ninja output:"),
    ("jit-compile-error", "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1."),
    ("jit-compile-error", "/x/include/flashinfer/attention/mla.cuh(511): error: no instance of function template matches"),
    ("jit-compile-error", "nvcc fatal   : Unsupported gpu architecture 'compute_120a'"),
    ("unsupported-arch", "RuntimeError: Error in function 'TllmGenFmhaRunner' at fmhaRunner.cuh:30: Unsupported architecture"),
    ("unsupported-arch", "ValueError: TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). Please use a "
                         "different backend."),
    ("unsupported-arch", "RuntimeError: CUDA error: no kernel image is available for execution on the device"),
    ("unsupported-arch", "AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use "
                         "`--attention-backend flashinfer`."),
    ("unsupported-arch", "ValueError: FP8 kv_data_type for MLA requires an SM90 (Hopper) device, got SM120."),
    ("nccl-error", "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, unhandled cuda error"),
    ("nccl-error", "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: "
                   "WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."),
    ("import-error", "ModuleNotFoundError: No module named 'sgl_kernel'"),
    ("import-error", "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"),
    ("import-error", "OSError: /x/libtorch_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"),
    ("port-in-use", "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already "
                    "in use"),
    ("port-in-use", "ValueError: dist_init_port at 30005 is not available in 30 seconds."),
    ("config-error", "launch_server.py: error: argument --attention-backend: invalid choice: 'cutlass_mla' (choose "
                     "from 'triton', 'flashinfer')"),
    ("config-error", "launch_server.py: error: unrecognized arguments: --kv-cache-dtyp fp8_e4m3"),
    ("config-error", "OSError: /models/x does not appear to have a file named config.json."),
    ("warmup-failed", "Initialization failed. warmup error: Traceback (most recent call last):"),
    ("killed", "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 "
               "(SIGKILL), a common cause is the OS OOM killer."),
    ("python-exception", "KeyError: 'model.layers.0.self_attn.kv_a_proj_with_mqa.weight'"),
    # The C/C++ compiler cannot open a header the JIT build includes: gcc in any locale (the errno text is
    # libc's), clang, nvcc's front end. A header in a subfolder, or a C++ one, is the same.
    ("jit-compile-error", "/x/flashinfer/data/include/flashinfer/vec_dtypes.cuh:21:10: fatal error: cuda_fp8.h: No "
                          "such file or directory"),
    ("jit-compile-error", "/x/flashinfer/vec_dtypes.cuh:21:10: fatal error: cuda_fp8.h: Datei oder Verzeichnis nicht "
                          "gefunden"),
    ("jit-compile-error", "/x/flashinfer/vec_dtypes.cuh:21:10: fatal error: cuda_fp8.h : Aucun fichier ou dossier de "
                          "ce type"),
    ("jit-compile-error", "/x/flashinfer/vec_dtypes.cuh:21:10: fatal error: cuda_fp8.h: No existe el archivo o el "
                          "directorio"),
    ("jit-compile-error", "/x/cutlass/util/reference/device/tensor_fill.h:45:10: fatal error: curand_kernel.h: "
                          "\u6ca1\u6709\u90a3\u4e2a\u6587\u4ef6\u6216\u76ee\u5f55"),
    ("jit-compile-error", "/x/csrc/fmhaReduction.cu:19:10: fatal error: cutlass/cutlass.h: No such file or directory"),
    ("jit-compile-error", "/x/csrc/flash_bwd_kernel.h:7:10: fatal error: cute/algorithm/copy.hpp: No such file or "
                          "directory"),
    ("jit-compile-error", "/x/flashinfer/vec_dtypes.cuh:21:10: fatal error: 'cuda_fp8.h' file not found"),
    ("jit-compile-error", '/x/flashinfer/vec_dtypes.cuh(21): catastrophic error: cannot open source file "cuda_fp8.h"'),
    ("jit-compile-error", "/x/flashinfer/attention/mla.cuh:511:7: error: no matching function for call to 'vec_cast'"),
    ("jit-compile-error", '/x/cutlass/include/cute/arch/mma_sm90.hpp(3064): error: name followed by "::" must be a '
                          "class or namespace name"),
    # A JIT build that cannot start: a tool it runs is missing — Python could not start it (in any locale, by
    # name or by path, the compiler with a target prefix or a version), torch/FlashInfer/triton say so, or the
    # shell that ninja runs a rule with cannot find it.
    ("build-tool-missing", "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"),
    ("build-tool-missing", "FileNotFoundError: [Errno 2] No such file or directory: 'ninja': 'ninja'"),
    ("build-tool-missing", "FileNotFoundError: [Errno 2] Datei oder Verzeichnis nicht gefunden: '/usr/local/cuda/bin/"
                           "nvcc'"),
    ("build-tool-missing", "FileNotFoundError: [Errno 2] No such file or directory: 'x86_64-linux-gnu-g++-12'"),
    ("build-tool-missing", "FileNotFoundError: [Errno 2] No such file or directory: 'c++'"),
    ("build-tool-missing", "FileNotFoundError: [Errno 2] No such file or directory: 'cmake'"),
    ("build-tool-missing", "RuntimeError: Ninja is required to load C++ extensions (pip install ninja to get it)"),
    ("build-tool-missing", "/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found"),
    ("build-tool-missing", "/bin/sh: line 1: c++: command not found"),
    ("build-tool-missing", "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist"),
    ("build-tool-missing", "RuntimeError: nvcc not found and PyTorch is not built with CUDA support. Could not "
                           "determine CUDA version."),
    ("build-tool-missing", "RuntimeError: Failed to find C compiler. Please specify via CC environment variable."),
    ("build-tool-missing", "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install "
                           "root."),
    # An exception or assertion that names a GPU generation (or compute capability) as what is supported,
    # required or expected: the cause is the GPU, even where the message also names a flag.
    ("unsupported-arch", "AssertionError: FP8 block-scaled GEMM is supported on Blackwell GPUs only, please use "
                         "--moe-runner-backend triton"),
    ("unsupported-arch", "AssertionError: DeepGEMM requires SM90, please set --fp8-gemm-backend cutlass"),
    ("unsupported-arch", "AssertionError: expected sm90 or sm100, got sm120"),
    ("unsupported-arch", "ValueError: Unsupported compute capability: 12.0"),
    ("unsupported-arch", "RuntimeError: This kernel needs an Ampere or newer GPU (SM >= 80)"),
    ("unsupported-arch", "RuntimeError: fp8 e4m3 is only available for Ada and Hopper GPUs"),
    ("unsupported-arch", "[TensorRT-LLM][ERROR] Assertion failed: The attention sinks is only supported on SM90"),
    # NCCL's own words in another case, torch.distributed's store giving up on the rendezvous.
    ("nccl-error", "RuntimeError: NCCL Error 2: unhandled system error"),
    ("nccl-error", "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/2 clients "
                   "joined."),
    # The launcher's notice that a child failed, when the child's own error is nowhere in the log: spelled as old
    # builds did, retyped, echoed by a logging failure, behind an ellipsis.
    ("unknown", "Received sigquit from a child process. It usually means the child failed."),
    ("unknown", "Received sigquit from a child proces. It usually means the child failed."),
    ("unknown", "Recieved SIGQUIT from a child process. It usually means the child failed."),
    ("unknown", "Message: 'Received sigquit from a child proces. It usually means the child failed.'"),
    ("unknown", "[...] Received sigquit from a child process. It usually means the child failed."),
    ("unknown", "SIGQUIT received. signum=None, frame=None. It usually means one child failed."),
]


@pytest.mark.parametrize("category, line", MEANINGS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(MEANINGS)])
def test_signature_meanings(category, line):
    text = "[2025-11-01 10:00:00 TP0] Load weight begin. avail mem=78 GB\n" + \
           "[2025-11-01 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n" + line + "\n"
    v = triage_text(text, 137)
    assert (v.verdict, v.category) == ("crash", category)
    assert v.key_line == line.strip()


def test_sigquit_cascade_without_a_readable_error_is_unknown_not_killed():
    text = ("[2025-11-01 10:00:00] Received sigquit from a child process. It usually means the child failed.\n"
            "Killed\n")
    assert triage_text(text, 137).category == "killed"  # only consequences: the bare Killed line
    assert triage_text(text.splitlines()[0] + "\n", 137).category == "unknown"


# ---------------------------------------------------------------------------- ranking, phase and verdict details


def test_signatures_rank_by_category_first_then_by_their_place_within_it():
    # SIGNATURES is built from these at import: lower rank wins, a category's earlier patterns are more telling.
    sigs = _sig("oom", 30, r"CUDA out of memory", r"\bout of memory\b") + _sig("nccl-error", 60, r"NCCL error")
    assert [(s.category, s.pattern.pattern) for s in sigs] == [
        ("oom", "CUDA out of memory"), ("oom", r"\bout of memory\b"), ("nccl-error", "NCCL error")]
    assert sigs[0].rank < sigs[1].rank < sigs[2].rank
    assert sigs[1].pattern.search("RuntimeError: CUDA error: out of memory")


def test_a_bare_exception_while_starting_is_not_a_crash_until_the_server_dies():
    # A named cause (OOM, a failed build, …) is a crash even while the process lives; a bare exception may have
    # been handled, so only the server's death makes it one.
    lines = healthy_start()[:3] + ["[2025-11-01 10:00:04 TP0] KeyError: 'rope_scaling'"]
    assert triage_text("\n".join(lines)).verdict == "incomplete"
    v = triage_text("\n".join(lines), exit_code=1)
    assert (v.verdict, v.category, v.key_line) == ("crash", "python-exception", "KeyError: 'rope_scaling'")


def test_a_server_that_came_up_is_ready_in_the_serving_phase_with_the_ready_line():
    assert triage_text("\n".join(healthy_start())) == Verdict(
        "ready", "ready", "The server is fired up and ready to roll!", "serving", None)


def test_a_log_that_ends_before_ready_says_so_and_an_exit_code_0_is_named():
    text = "\n".join(healthy_start()[:4])
    v = triage_text(text)
    assert (v.verdict, v.phase) == ("incomplete", "kv-cache")
    assert v.hint.startswith("the log ends before the server was ready")
    v = triage_text(text, exit_code=0)
    assert (v.verdict, v.phase, v.hint) == ("incomplete", "kv-cache",
                                            "the server exited with code 0 before it was ready")


@pytest.mark.parametrize("exit_code", [137, -9], ids=["shell-137", "popen-minus-9"])
def test_a_server_killed_without_an_error_line_is_killed_in_the_phase_it_reached(exit_code):
    # 137 from a shell, -9 from Python's Popen: both mean SIGKILL, usually the OS OOM killer.
    v = triage_text("\n".join(healthy_start()[:3]), exit_code)
    assert (v.verdict, v.category, v.key_line, v.phase) == ("crash", "killed", None, "load-weights")
    assert "OOM killer" in v.hint


def test_a_server_that_died_without_an_error_line_is_unknown_in_the_phase_it_reached():
    v = triage_text("\n".join(healthy_start()[:3]), 1)
    assert (v.verdict, v.category, v.key_line, v.phase) == ("crash", "unknown", None, "load-weights")
    assert "read the end of the log" in v.hint


def test_the_phase_is_where_the_cause_was_printed_even_when_another_rank_got_further():
    # TP1 runs out of memory capturing CUDA graphs while TP0 finishes capturing: the advice is about CUDA graphs.
    lines = healthy_start()[:6] + [
        "[2025-11-01 10:00:07 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        OOM_LINE,
        "[2025-11-01 10:00:07 TP0] Capture cuda graph end. Time elapsed: 6.57 s",
        "[2025-11-01 10:00:08] Received sigquit from a child process. It usually means the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.category, v.key_line, v.phase) == ("oom", OOM_LINE, "cuda-graph-capture")
    assert "--cuda-graph-max-bs" in v.hint


def test_a_slower_rank_printing_an_earlier_milestone_does_not_move_the_phase_back():
    lines = healthy_start()[:6] + [
        "[2025-11-01 10:00:07 TP1] Memory pool end. avail mem=12.31 GB",  # TP1 still finishing its KV pool
        "[2025-11-01 10:00:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        OOM_LINE,
        "[2025-11-01 10:00:08] Received sigquit from a child process. It usually means the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.category, v.phase) == ("oom", "cuda-graph-capture")
    assert "--cuda-graph-max-bs" in v.hint


def test_a_cause_printed_before_anything_placed_it_gets_the_phase_found_after_it():
    # A log cut at the start: the OOM comes first; the exception wrapping it then shows where it happened.
    lines = [OOM_LINE, "", "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):",
             '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 310, in '
             "__init__",
             "    raise Exception(",
             "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB."]
    v = triage_text("\n".join(lines), 1)
    assert (v.category, v.key_line, v.phase) == ("oom", OOM_LINE, "cuda-graph-capture")


def test_of_equally_telling_lines_the_first_printed_is_the_key_line():
    # Several ranks run out of memory; the key line quotes the first that said so.
    later = OOM_LINE.replace("GPU 0", "GPU 3")
    lines = healthy_start()[:6] + [SGLANG_PREFIX.format(i=0) + OOM_LINE, SGLANG_PREFIX.format(i=3) + later]
    assert triage_text("\n".join(lines), 137).key_line == OOM_LINE


def test_a_request_quoting_an_error_is_not_the_key_line_when_the_server_later_crashes():
    lines = healthy_start() + [
        "[2025-11-01 10:01:00] Receive: obj=GenerateReqInput(text='What does CUDA out of memory mean?', "
        "sampling_params={'max_new_tokens': 8})",
        "[2025-11-01 10:01:02 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        IMA_LINE,
        "[2025-11-01 10:01:02] Received sigquit from a child process. It usually means the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category, v.key_line) == ("crash", "illegal-memory-access", IMA_LINE)


def test_an_overlong_error_line_is_kept_by_its_start():
    line = IMA_LINE + " reading tensor([" + ", ".join(["0.0"] * 5000) + "])"
    v = triage_text("\n".join(healthy_start()[:3] + [line]), 1)
    assert v.key_line == line[:KEY_LINE_MAX] and v.key_line.startswith(IMA_LINE)


# ---------------------------------------------------------------------------- a JIT build that cannot build or start

NINJA_FAILED = "RuntimeError: Ninja build failed. Ninja output:"
MISSING_HEADER = ("/x/flashinfer/data/include/flashinfer/vec_dtypes.cuh:21:10: fatal error: cuda_fp8.h: Aucun fichier "
                  "ou dossier de ce type")


def test_a_missing_header_is_the_key_line_of_the_build_that_it_failed():
    # FlashInfer prints its RuntimeError first and ninja's output after it: the compiler's line is the cause.
    lines = healthy_start()[:6] + [
        "[2025-11-01 10:00:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/flashinfer/jit/cpp_ext.py", line 297, in run_ninja',
        NINJA_FAILED,
        "ninja: Entering directory `/root/.cache/flashinfer/0.6.14/90a/cached_ops'",
        "FAILED: batch_decode/batch_decode_kernel.cuda.o",
        "/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c batch_decode_kernel.cu -o "
        "batch_decode_kernel.cuda.o",
        "In file included from /x/flashinfer/data/include/flashinfer/decode.cuh:20,",
        MISSING_HEADER,
        "   21 | #include <cuda_fp8.h>",
        "compilation terminated.",
        "ninja: build stopped: subcommand failed.",
        "[2025-11-01 10:00:08] Received sigquit from a child process. It usually means the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category, v.key_line, v.phase) == ("crash", "jit-compile-error", MISSING_HEADER,
                                                            "cuda-graph-capture")
    assert "CUDA_HOME" in v.hint and "dtype" not in v.hint  # the toolkit's headers, not the kernel's dtype


def test_a_static_assert_outranks_a_missing_header_and_both_outrank_the_builds_exit():
    lines = [NINJA_FAILED, MISSING_HEADER, '/x/mma.cuh(523): error: static assertion failed with "DType must be 16bit"',
             "ninja: build stopped: subcommand failed."]
    assert triage_text("\n".join(lines), 1).key_line.startswith("/x/mma.cuh(523): error: static assertion failed")
    assert triage_text("\n".join([NINJA_FAILED, MISSING_HEADER]), 1).key_line == MISSING_HEADER


@pytest.mark.parametrize("nvcc", [
    "nvcc fatal   : Unsupported gpu architecture 'compute_120a'",
    "nvcc fatal   : A single input file is required for a non-link phase when an outputfile is specified",
], ids=["unsupported-arch-flag", "bad-command-line"])
def test_nvccs_own_fatal_line_outranks_the_extension_build_error_that_follows_it(nvcc):
    v = triage_text("\n".join([nvcc, "RuntimeError: Error building extension 'batch_decode'"]), 1)
    assert (v.category, v.key_line) == ("jit-compile-error", nvcc)


@pytest.mark.parametrize("build_line", ["ninja: build stopped: subcommand failed.",
                                        "[2025-11-01 10:00:07 TP0] JIT compilation failed: see the build log above"])
def test_a_builds_own_line_without_an_error_word_is_read_beside_an_error(build_line):
    # Such lines hold no error anchor; beside an exception they are read, and name the build as the cause.
    v = triage_text("\n".join([build_line, "RuntimeError: the kernel module could not be loaded"]), 1)
    assert (v.category, v.key_line) == ("jit-compile-error", clean_line(build_line))


def test_a_missing_build_tool_is_its_own_category_above_the_build_failure_it_causes():
    # FlashInfer's run_ninja cannot start ninja: FileNotFoundError from subprocess, then the launcher's notice.
    # The log is cut before any milestone and has no exit code: the child's error still makes it a crash.
    lines = ["2025-07-02 16:41:30 | ERROR | stderr | [2025-07-02 16:41:30 TP0] Scheduler hit an exception: Traceback "
             "(most recent call last):",
             '2025-07-02 16:41:30 | ERROR | stderr |   File "/venv/lib/python3.11/site-packages/flashinfer/jit/cpp_ext.py", '
             "line 168, in run_ninja",
             "2025-07-02 16:41:30 | ERROR | stderr |     subprocess.run(",
             '2025-07-02 16:41:30 | ERROR | stderr |   File "/usr/lib/python3.11/subprocess.py", line 1955, in '
             "_execute_child",
             "2025-07-02 16:41:30 | ERROR | stderr |     raise child_exception_type(errno_num, err_msg, err_filename)",
             "2025-07-02 16:41:30 | ERROR | stderr | FileNotFoundError: [Errno 2] No such file or directory: 'ninja'",
             "",
             "2025-07-02 16:41:31 | ERROR | sglang.srt.entrypoints.engine | Received sigquit from a child process. It "
             "usually means the child failed."]
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category) == ("crash", "build-tool-missing")
    assert v.key_line == "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"
    assert "pip install ninja" in v.hint and "CUDA_HOME" in v.hint
    # ninja ran, but the shell it runs a rule with has no nvcc: the shell's line, not ninja's exit, is the cause
    lines = [NINJA_FAILED, "FAILED: batch_decode_kernel.cuda.o", "/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found",
             "ninja: build stopped: subcommand failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.category, v.key_line) == ("build-tool-missing", "/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found")


def test_an_unsupported_gpu_outranks_a_missing_build_tool():
    # Installing ninja would not help: that kernel does not run on this GPU at all.
    lines = ["FileNotFoundError: [Errno 2] No such file or directory: 'ninja'",
             "AssertionError: DeepGEMM requires SM90, got SM120"]
    assert triage_text("\n".join(lines), 1).category == "unsupported-arch"


@pytest.mark.parametrize("line", [
    "FileNotFoundError: [Errno 2] No such file or directory: '/models/llama/tokenizer.json'",  # not a tool
    "FileNotFoundError: [Errno 2] No such file or directory: '/models/ninja-7b/weights.bin'",  # a tool in a folder name
    "FileNotFoundError: [Errno 2] No such file or directory: '/models/ninja'",  # only a model folder named so...
], ids=["model-file", "tool-in-folder-name", "folder-named-ninja"])
def test_a_missing_file_that_is_not_a_build_tool_is_not_build_tool_missing(line):
    v = triage_text(line + "\n", 1)
    if line.endswith("/ninja'"):
        # ...is read as the tool: a path whose last part is exactly a tool's name. A model folder is rarely so
        # named, and the advice (install ninja / check the path) points at the right line either way.
        assert v.category == "build-tool-missing"
    else:
        assert v.category == "python-exception"


# ---------------------------------------------------------------------------- an assertion about the GPU generation


def test_an_assertion_naming_the_gpu_generation_is_the_architecture_not_the_flag():
    # "backend" in the message made it a config error; the GPU generation it names is the cause.
    line = "AssertionError: cutlass_mla backend requires SM100 (Blackwell); use --attention-backend flashinfer"
    lines = healthy_start()[:6] + [
        "[2025-11-01 10:00:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/layers/attention/attention_registry.py", line 130, in create_cutlass_mla_backend',
        line,
        "[2025-11-01 10:00:08] Received sigquit from a child process. It usually means the child failed."]
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category, v.key_line) == ("crash", "unsupported-arch", line)
    assert "Hopper" in v.hint


@pytest.mark.parametrize("line", [
    # a GPU generation named without saying it is required (a bad tile shape in a Hopper kernel)
    "ValueError: Hopper kernel got a bad tile shape 128x96",
    # a path component named after an architecture is not a requirement on the GPU
    "RuntimeError: /x/sgl_kernel/sm100/common_ops.abi3.so needs libcudart.so.13, which was not loaded",
], ids=["generation-named-not-required", "path-component"])
def test_a_gpu_word_alone_in_an_exception_is_not_the_architecture(line):
    assert triage_text(line + "\n", 1).category == "python-exception"


def test_a_log_line_naming_a_gpu_requirement_is_not_an_error_unless_it_is_one():
    # SGLang explains its choices in INFO lines; only an exception or an assertion says something failed.
    lines = healthy_start()[:5] + ["[2025-11-01 10:00:06 TP0] Using triton decode kernels: FA3 requires SM90 and "
                                   "this is SM120"]
    assert triage_text("\n".join(lines)).verdict == "incomplete"


# ---------------------------------------------------------------------------- a child that died


def test_a_childs_traceback_through_nccl_setup_names_the_cause_of_its_bare_exception():
    # The exception's own words name no NCCL error; the frames it was raised in (torch.distributed's new_group
    # from SGLang's initialize_model_parallel) do. The launcher's notice follows; no exit code is known.
    error = ("RuntimeError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
             "store by key '0', but store->get('0') got error: Connection reset by peer")
    lines = [
        "[2025-02-19 10:00:00] server_args=ServerArgs(model_path='m', tp_size=16, nnodes=2)",
        "[2025-02-19 10:00:05 TP3] Init torch distributed begin.",
        "[2025-02-19 10:30:05 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 253, in init_torch_distributed',
        "    initialize_model_parallel(tensor_model_parallel_size=self.tp_size)",
        '  File "/x/sglang/srt/distributed/parallel_state.py", line 1055, in initialize_model_parallel',
        "    _TP = init_model_parallel_group(",
        '  File "/x/torch/distributed/distributed_c10d.py", line 4125, in new_group',
        "    return _new_group_with_tag(",
        error,
        "",
        "[2025-02-19 10:30:05] Received sigquit from a child proces. It usually means the child failed."]
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category, v.key_line, v.phase) == ("crash", "nccl-error", error, "distributed-init")
    assert "NCCL_DEBUG=INFO" in v.hint


@pytest.mark.parametrize("frame", [
    '  File "/x/vllm/distributed/device_communicators/pynccl_wrapper.py", line 350, in ncclCommInitRank',
    '  File "/x/torch/distributed/rendezvous.py", line 189, in _tcp_rendezvous_handler',
    '  File "/x/sglang/srt/distributed/parallel_state.py", line 255, in __init__',
    '  File "/x/sglang/srt/model_executor/model_runner.py", line 240, in init_distributed_environment',
], ids=["pynccl", "torch-rendezvous", "sglang-distributed", "init-distributed-environment"])
def test_each_layer_of_the_distributed_setup_names_nccl(frame):
    lines = ["Traceback (most recent call last):", frame, "TimeoutError: timed out"]
    assert triage_text("\n".join(lines), 1).category == "nccl-error"


def test_a_bare_exception_raised_by_sglang_itself_in_init_torch_distributed_is_not_nccl():
    # init_torch_distributed also checks memory; what it raises itself names no distributed failure.
    lines = ["Traceback (most recent call last):",
             '  File "/x/sglang/srt/model_executor/model_runner.py", line 270, in init_torch_distributed',
             "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes."]
    assert triage_text("\n".join(lines), 1).category == "python-exception"


def test_a_named_nccl_error_is_more_telling_than_a_bare_exception_in_nccl_frames():
    # TP0's bare exception (named NCCL only by its frames) is printed first; TP1's NCCL error names itself.
    named = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    lines = ["[2025-11-01 10:00:04 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/x/sglang/srt/distributed/device_communicators/pynccl.py", line 108, in __init__',
             "AssertionError",
             "[2025-11-01 10:00:04 TP1] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/x/sglang/srt/distributed/device_communicators/pynccl.py", line 108, in __init__',
             named]
    assert triage_text("\n".join(lines), 137).key_line == named


def test_nccl_frames_do_not_hide_a_root_cause_named_in_the_exception():
    lines = ["Traceback (most recent call last):",
             '  File "/x/torch/distributed/distributed_c10d.py", line 2501, in all_reduce', IMA_LINE]
    assert triage_text("\n".join(lines), 137).category == "illegal-memory-access"


def test_a_bare_exception_in_nccl_frames_outranks_a_bare_one_printed_before_it():
    lines = ["KeyError: 'rope_scaling'", "Traceback (most recent call last):",
             '  File "/x/sglang/srt/distributed/parallel_state.py", line 1055, in initialize_model_parallel',
             "TimeoutError: timed out"]
    assert triage_text("\n".join(lines), 1).key_line == "TimeoutError: timed out"


def test_what_a_tracebacks_frames_say_ends_with_that_traceback():
    dist_frame = '  File "/x/sglang/srt/distributed/parallel_state.py", line 1055, in initialize_model_parallel'
    # ended by its exception line: a later bare exception (printed without a traceback) is not in those frames
    lines = ["Traceback (most recent call last):", dist_frame, "ValueError: page size must be 64", "KeyError: 'x'"]
    assert triage_text("\n".join(lines), 1).category == "config-error"
    # ended by the next traceback's header (the first one's exception line was cut away)
    lines = ["Traceback (most recent call last):", dist_frame, "Traceback (most recent call last):",
             '  File "/x/sglang/srt/models/llama.py", line 400, in load_weights', "KeyError: 'x'"]
    assert triage_text("\n".join(lines), 1).category == "python-exception"


def test_a_child_failure_notice_alone_is_a_crash_with_the_notice_as_key_line():
    lines = healthy_start()[:3] + [
        "[2025-11-01 10:00:04] Received sigquit from a child proces. It usually means the child failed."]
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category, v.phase) == ("crash", "unknown", "load-weights")
    assert v.key_line == "Received sigquit from a child proces. It usually means the child failed."
    assert "child" in v.hint and "--tp 1" in v.hint


def test_a_logging_failure_in_the_signal_handler_still_reports_the_child_failure():
    # The launcher's logger failed inside its sigquit handler (a reentrant write to stderr): logging prints its own
    # traceback, then the record it could not write. That exception is logging's, not the server's.
    message = "Message: 'Received sigquit from a child proces. It usually means the child failed.'"
    lines = healthy_start()[:2] + [
        "--- Logging error ---",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/logging/__init__.py", line 1114, in emit',
        "    self.flush()",
        "RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>",
        "Call stack:",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/x/sglang/srt/entrypoints/engine.py", line 343, in sigquit_handler',
        "    logger.error(",
        message,
        "Arguments: ()"]
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category, v.key_line, v.phase) == ("crash", "unknown", message, "distributed-init")
    # only logging's own exception is set aside: a child's error after it still counts
    v = triage_text("\n".join(lines + ["KeyError: 'model.layers.0.mlp.weight'"]), 137)
    assert (v.category, v.key_line) == ("python-exception", "KeyError: 'model.layers.0.mlp.weight'")


@pytest.mark.parametrize("words", [
    "the user wrote: Received sigquit from a child process",  # more than a short label before the notice
    "Received a sigquit from nowhere",
], ids=["quoted-in-prose", "other-words"])
def test_words_near_the_sigquit_notice_are_not_the_notice(words):
    assert triage_text(words + "\n").verdict == "incomplete"


# ---------------------------------------------------------------------------- a traceback nothing caught


RUNPY = '  File "<frozen runpy>", line 198, in _run_module_as_main'
PYDANTIC = ("pydantic.errors.PydanticSchemaGenerationError: Unable to generate pydantic-core schema for <class "
            "'xgrammar.StructuralTag'>.")


@pytest.mark.parametrize("first_frame", [
    RUNPY,
    '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
    '  File "/usr/local/bin/sglang", line 8, in <module>',
    '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
], ids=["python-m", "python-m-old", "console-script", "multiprocessing-child"])
def test_an_uncaught_bare_exception_ends_its_process_without_an_exit_code(first_frame):
    lines = ["[2026-11-30 07:38:10] server_args=ServerArgs(model_path='/m')", "Traceback (most recent call last):",
             first_frame, '  File "/x/sglang/srt/entrypoints/openai/protocol.py", line 317, in <module>', PYDANTIC]
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category, v.key_line) == ("crash", "python-exception", PYDANTIC)


def test_a_caught_traceback_is_not_a_death_even_when_it_passes_through_module_level_code():
    # Printed by a handler (its first frame is the function that caught it); a top-level frame further down (an
    # import at module level) does not make it uncaught.
    lines = ["[2026-11-30 07:38:10] server_args=ServerArgs(model_path='/m')", "Traceback (most recent call last):",
             '  File "/x/sglang/srt/models/registry.py", line 90, in import_model_classes',
             '  File "/x/sglang/srt/models/inkling.py", line 3, in <module>', PYDANTIC]
    assert triage_text("\n".join(lines)).verdict == "incomplete"


def test_an_uncaught_exception_after_ready_is_a_crash():
    lines = healthy_start() + ["Traceback (most recent call last):", RUNPY, "RuntimeError: Event loop is closed"]
    v = triage_text("\n".join(lines))
    assert (v.verdict, v.category, v.phase) == ("crash", "python-exception", "serving")


# ---------------------------------------------------------------------------- a server that was stopped


SHUTDOWN = ["[2026-11-30 07:40:48] SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
            "[2026-11-30 07:40:48] Subprocess scheduler_0 (pid=745) crashed with exit code -15. Triggering SIGQUIT for "
            "cleanup...",
            "[2026-11-30 07:40:48] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
            "[2026-11-30 07:40:53] kill_process_tree called: parent_pid=689, include_parent=True, pid=689"]


@pytest.mark.parametrize("exit_code", [None, 137, -15])
def test_a_server_stopped_after_serving_was_ready_whatever_its_shutdown_prints(exit_code):
    v = triage_text("\n".join(healthy_start() + SHUTDOWN), exit_code)
    assert (v.verdict, v.category) == ("ready", "ready")
    # an exception nothing caught while it went down is part of the stop
    v = triage_text("\n".join(healthy_start() + SHUTDOWN + ["Traceback (most recent call last):", RUNPY,
                                                            "RuntimeError: Event loop is closed"]), exit_code)
    assert (v.verdict, v.category) == ("ready", "ready")


def test_a_server_stopped_while_starting_is_incomplete_and_says_it_was_stopped():
    v = triage_text("\n".join(healthy_start()[:3] + SHUTDOWN), 137)
    assert (v.verdict, v.category, v.phase) == ("incomplete", "incomplete", "load-weights")
    assert v.hint == "the server was asked to stop (SIGTERM or Ctrl-C) before it was ready"


def test_a_crash_before_the_stop_is_still_a_crash():
    lines = healthy_start() + ["[2026-11-30 07:40:00 TP0] Scheduler hit an exception: Traceback (most recent call "
                               "last):", IMA_LINE] + SHUTDOWN
    v = triage_text("\n".join(lines), 137)
    assert (v.verdict, v.category) == ("crash", "illegal-memory-access")


# ---------------------------------------------------------------------------- what wraps a line in real logs


@pytest.mark.parametrize("raw", [
    "2025-07-02 16:41:31 | ERROR | sglang.srt.entrypoints.engine | Received sigquit from a child process.",
    "2025-07-02 16:41:31,123 - sglang.srt.entrypoints.engine - ERROR - Received sigquit from a child process.",
    "2025-10-09T04:13:06.6371779Z [rank0]: Received sigquit from a child process.",
    "(Worker_TP1 pid=1360047) ERROR 03-05 09:56:09 [multiproc_executor.py:880] Received sigquit from a child process.",
    "(SGLangEngine pid=23902) [2026-01-04 01:42:55 TP1] Received sigquit from a child process. [repeated 2x across "
    "cluster]",
], ids=["pipe-separated-logger", "python-logging", "torch-rank", "vllm-style", "ray-repeated"])
def test_wrappers_around_the_message_are_removed(raw):
    assert clean_line(raw) == "Received sigquit from a child process."


def test_a_message_that_starts_with_a_word_and_a_dash_keeps_it():
    assert clean_line("torch - a note about torch") == "torch - a note about torch"
    assert clean_line("2025-07-02 16:41:31 - torch - a note") == "torch - a note"


def test_a_traceback_split_across_chunks_reads_as_one():
    # The frames arrive in chunks with no error word (so only the end of the text is kept for them), the exception
    # line in a later one.
    filler = ["[2025-02-19 10:00:%02d TP3] NCCL INFO Channel %02d/0 : 3[3] -> 4[4] via P2P/CUMEM/read" % (i % 60, i)
              for i in range(400)]
    lines = (["Traceback (most recent call last):",
              '  File "/x/sglang/srt/distributed/parallel_state.py", line 1055, in initialize_model_parallel']
             + filler[:3] + ["TimeoutError: timed out"] + filler)
    text = "\n".join(lines) + "\n"
    whole = triage_text(text, 1)
    assert whole.category == "nccl-error"
    for size in (1, 7, 64, 300):
        t = Triage()
        for i in range(0, len(text), size):
            t.feed_text(text[i:i + size])
        assert t.finish().verdict(1) == whole


def test_the_categories_triage_knows_are_the_ones_the_docs_list():
    doc = " ".join(TRIAGE_DOC.read_text().split())
    listed = doc[doc.index("`category` ("):doc.index("`key_line`")]
    for category in CATEGORIES:
        assert f"`{category}`" in listed


@pytest.mark.parametrize("line, fatal", [
    ("2025-07-02 16:41:31 | ERROR | sglang.srt.entrypoints.engine | Received sigquit from a child proces. It usually "
     "means the child failed.", True),
    ("Message: 'Received sigquit from a child process. It usually means the child failed.'", True),
    ("[2025-07-02 16:41:31] Receive: obj=GenerateReqInput(text='why do I see Received sigquit from a child process?')",
     False),
], ids=["logger-prefix", "logging-failure-echo", "request-quoting-it"])
def test_the_agent_watching_a_live_server_sees_the_same_child_failure_notice(tmp_path, line, fatal):
    # The agent gets FATAL_PATTERNS and LINE_PREFIX_PATTERN in its spec and applies them to each new line.
    from harness.agent import server
    from harness.triage.classify import FATAL_PATTERNS, LINE_PREFIX_PATTERN, READY_PATTERN

    log = tmp_path / "server.log"
    log.write_text(line + "\n")
    f = server.LogFollower(str(log), list(FATAL_PATTERNS), READY_PATTERN, LINE_PREFIX_PATTERN)
    f.poll()
    assert (f.first_fatal is not None) == fatal


@pytest.mark.parametrize("line, phase", [
    ("server_args=ServerArgs(model_path='m')", "args"),
    ("Init torch distributed begin.", "distributed-init"),
    ("Load weight begin. avail mem=78.81 GB", "load-weights"),
    ("Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]", "load-weights"),
    ("Load weight end. type=DeepseekV2ForCausalLM, avail mem=63.72 GB", "kv-cache"),
    ("KV Cache is allocated. #tokens: 19244051, KV size: 41.29 GB", "kv-cache"),
    ("Memory pool end. avail mem=96.79 GB", "kv-cache"),
    ("Capture cuda graph begin. This can take up to several minutes.", "cuda-graph-capture"),
    ("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8]",
     "cuda-graph-capture"),
    ("Capturing batches (bs=8 avail_mem=95.76 GB):   0%|          | 0/4 [00:00<?, ?it/s]", "cuda-graph-capture"),
    ("Capture cuda graph end. Time elapsed: 6.57 s", "warmup"),
    ("max_total_num_tokens=19244051, chunked_prefill_size=8192, max_prefill_tokens=16384", "warmup"),
    ("INFO:     Uvicorn running on http://127.0.0.1:40857 (Press CTRL+C to quit)", "warmup"),
    ("INFO:     Application startup complete.", "warmup"),
    ("The server is fired up and ready to roll!", "serving"),
], ids=lambda x: x if x in PHASES else None)
def test_each_milestone_line_moves_the_phase_through_the_keyword_prefilter(line, phase):
    # Read as a chunk (the prefilter only parses lines holding an anchor), with an SGLang prefix.
    assert triage_text(f"[2026-11-30 07:38:42] {line}\n").phase == phase


def test_cli_given_a_folder_triages_its_server_log_or_says_what_to_pass(tmp_path):
    """An attempt's folder (results/RUN/EXPERIMENT/NN/) is triaged through its server.log; a folder without
    one is named as a folder, with what to pass — never "not found" for something that is there."""
    from typer.testing import CliRunner

    from harness.cli.app import app

    attempt = tmp_path / "run" / "exp" / "01"
    attempt.mkdir(parents=True)
    (attempt / "server.log").write_text("\n".join(healthy_start()[:3] + [
        "RuntimeError: CUDA error: an illegal memory access was encountered"]) + "\n")
    res = CliRunner().invoke(app, ["triage", str(attempt)])
    assert res.exit_code == 0, res.output
    assert "illegal-memory-access" in res.output and str(attempt / "server.log") in res.output
    res = CliRunner().invoke(app, ["triage", str(attempt), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["category"] == "illegal-memory-access", res.output
    res = CliRunner().invoke(app, ["triage", str(tmp_path / "run")])
    flat = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"{tmp_path / 'run'}: a folder with no server.log" in flat and "not found" not in flat, res.output
    assert "pass a server log, or an attempt's folder" in flat
