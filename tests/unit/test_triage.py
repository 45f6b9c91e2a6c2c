"""Triage reads logs like an engineer: real SGLang logs, and edge cases written for the purpose."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.triage import CATEGORIES, KEY_LINE_MAX, PHASES, Triage, Verdict, _sig, triage_file, triage_text

# Real SGLang logs from public bug reports, kept in the repo (tests/fixtures/real-logs/SOURCES.md says where
# each comes from), so a plain clone runs these tests with nothing beside it.
REAL_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "real-logs"


def expected_rows():
    with open(REAL_LOGS / "expected.tsv") as f:
        return [r for r in csv.DictReader(f, delimiter="\t")]


@pytest.mark.parametrize("row", expected_rows(), ids=lambda r: r["file"])
def test_real_logs_classified_as_expected(row):
    v = triage_file(REAL_LOGS / row["file"])
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


# The phases as the README documents them (section "Crash triage"), in startup order, with how many lines of
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


def test_the_phase_names_triage_knows_are_the_ones_the_readme_lists():
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
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
