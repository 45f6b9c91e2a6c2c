"""The simulated server's torch profiler follows SGLang 0.5.16's (0.5.23 is the same code;
docs/reference/sglang-0.5.16-profiler.md): the request fields, when it starts and stops, the file names,
the log lines and their order — and the way it failed on the H200: with Python stacks (SGLang's
default) a profile started on an idle server stalls the scheduler in its stop for minutes."""

from __future__ import annotations

import gzip
import json
import re
import time

import pytest

from tests.sim.simproc import FAST_ENV, READY_LINE, free_port, http, server_args

GEN = {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}
STARTS = r"Profiling starts(?: for (\w+))?\. Traces will be saved to: (\S+) \(with profile id: (\S+)\)"


def steps_in(trace) -> int:
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sum(1 for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("step["))


@pytest.fixture
def server(shared_target, launch):
    def _server(*extra: str, env: dict[str, str] | None = None):
        port = free_port()
        proc = launch(shared_target, *server_args(port, *extra), env=dict(FAST_ENV, **(env or {})))
        proc.wait_for_line(READY_LINE, timeout=30)
        return port, proc

    return _server


def test_start_step_arms_it_and_num_steps_stop_and_write_it_at_the_next_step(server, tmp_path):
    port, proc = server("--tp-size", "2")
    out = tmp_path / "p"
    body = {"output_dir": str(out), "start_step": 1, "num_steps": "3", "activities": ["CPU", "GPU"],
            "with_stack": False, "not_a_field": 1}  # lax types, unknown keys ignored (pydantic)
    t0 = time.monotonic()
    assert http(port, "POST", "/start_profile", body) == (200, "Start profiling.\n")
    assert time.monotonic() - t0 < 2  # answered once the scheduler took it, not after the steps
    proc.assert_no_line("Profiling starts", within=0.5)  # armed: it starts at the next forward step
    assert not out.exists()
    assert http(port, "POST", "/generate", GEN)[0] == 200  # 8 forward steps: 1 prefill + 7 decode
    profile_id = re.search(STARTS, proc.wait_for_line(STARTS, timeout=5)).group(3)
    proc.wait_for_line(r"Stop profiling\.\.\.$", timeout=5)
    proc.wait_for_line(r"Profiling done\. Traces are saved to: " + re.escape(str(out)) + "$", timeout=5)
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"{profile_id}-TP-0.trace.json.gz", f"{profile_id}-TP-1.trace.json.gz"]
    assert steps_in(out / names[0]) == 3  # exactly num_steps steps
    lines = proc.output
    assert lines.index("Profiling starts") < lines.index("Stop profiling...") < lines.index("Profiling done")
    float(profile_id)  # SGLang's default id is str(time.time())


def test_immediate_start_names_and_stages(server, tmp_path):
    port, proc = server()
    a = tmp_path / "a"
    body = {"output_dir": str(a), "num_steps": 2, "profile_id": "abc", "profile_prefix": "pre", "with_stack": False}
    assert http(port, "POST", "/start_profile", body)[0] == 200
    # Without start_step the profiler starts inside the request, on an idle server.
    proc.wait_for_line(r"Profiling starts\. Traces will be saved to: " + re.escape(str(a)) + r" \(with profile id: abc\)",
                       timeout=2)
    assert http(port, "POST", "/generate", GEN)[0] == 200
    proc.wait_for_line(r"Profiling done\. Traces are saved to: " + re.escape(str(a)), timeout=5)
    assert [p.name for p in a.iterdir()] == ["pre-abc-TP-0.trace.json.gz"]
    assert steps_in(a / "pre-abc-TP-0.trace.json.gz") == 2

    b = tmp_path / "b"
    body = {"output_dir": str(b), "num_steps": 2, "profile_id": "s", "profile_by_stage": True, "with_stack": False}
    assert http(port, "POST", "/start_profile", body)[0] == 200
    assert http(port, "POST", "/generate", GEN)[0] == 200
    proc.wait_for_line(r"Stop profiling-DECODE\.\.\.", timeout=5)
    proc.wait_for_line(r"Profiling done", timeout=5)
    assert sorted(p.name for p in b.iterdir()) == ["s-TP-0-DECODE.trace.json.gz", "s-TP-0-EXTEND.trace.json.gz"]
    assert "Profiling starts for EXTEND" in proc.output and "Stop profiling-EXTEND..." in proc.output

    status, text = http(port, "POST", "/start_profile", {"num_steps": "many"})
    assert status == 400 and "num_steps" in json.loads(text)["message"]


def test_an_idle_server_never_writes_and_stop_needs_a_started_profile(server, tmp_path):
    port, proc = server()
    out = tmp_path / "p"
    body = {"output_dir": str(out), "start_step": 1, "num_steps": 2, "with_stack": False}
    assert http(port, "POST", "/start_profile", body)[0] == 200
    time.sleep(1.0)
    assert not out.exists()  # no batch, no start, no stop, no file
    assert http(port, "POST", "/stop_profile") == (500, "Internal Server Error")
    proc.wait_for_line(r"RuntimeError: Profiling is not in progress\. Call /start_profile first\.", timeout=2)
    # Started, then the steps never come (no load): /stop_profile writes it on the spot.
    assert http(port, "POST", "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}})[0] == 200
    proc.wait_for_line("Profiling starts", timeout=2)
    assert not out.exists()
    assert http(port, "POST", "/stop_profile") == (200, "Stop profiling. This will take some time.\n")
    assert len(list(out.glob("*-TP-0.trace.json.gz"))) == 1


def test_python_stacks_over_an_idle_server_stall_the_stop_as_on_the_h200(server, tmp_path):
    """The live failure: /start_profile (stacks on, SGLang's default; no start_step) on an idle server, the
    load a moment later. The steps run, "Stop profiling..." is logged — and then the scheduler is stuck
    in the stop for about a minute per idle second: the request that drove the steps hangs, no trace."""
    port, proc = server()
    quick = tmp_path / "quick"
    assert http(port, "POST", "/start_profile", {"output_dir": str(quick), "num_steps": 2, "with_stack": False})[0] == 200
    time.sleep(1.0)
    assert http(port, "POST", "/generate", GEN, timeout=5)[0] == 200  # without stacks: the idle second is free
    assert len(list(quick.glob("*.trace.json.gz"))) == 1

    stuck = tmp_path / "stuck"
    assert http(port, "POST", "/start_profile", {"output_dir": str(stuck), "num_steps": 2})[0] == 200
    time.sleep(1.0)  # the load's client starting up
    with pytest.raises(OSError):  # timed out: the scheduler is stopping the profiler
        http(port, "POST", "/generate", GEN, timeout=4)
    assert "Stop profiling..." in proc.output.split(str(stuck))[-1]
    proc.assert_no_line(r"Profiling done\. Traces are saved to: " + re.escape(str(stuck)), within=2)
    assert not list(stuck.glob("*.trace.json.gz"))


def test_fault_knobs_stall_the_request_and_the_export(server, tmp_path):
    port, proc = server(env={"SGLANG_SIM_PROFILE_STALL_S": "1.5", "SGLANG_SIM_PROFILE_EXPORT_S": "1.5"})
    out = tmp_path / "p"
    t0 = time.monotonic()
    assert http(port, "POST", "/start_profile", {"output_dir": str(out), "num_steps": 2, "start_step": 1,
                                                 "with_stack": False})[0] == 200
    assert time.monotonic() - t0 >= 1.5  # the scheduler was busy: the HTTP call waited for it
    t1 = time.monotonic()
    assert http(port, "POST", "/generate", GEN, timeout=10)[0] == 200
    assert time.monotonic() - t1 >= 1.5  # its third step waited for the stop and export
    lines = proc.output
    assert lines.index("Stop profiling...") < lines.index("Profiling done")
    assert len(list(out.glob("*-TP-0.trace.json.gz"))) == 1
