"""Run an attempt's benchmark clients one after the other in ONE process of the target's Python.

Shipped inside the agent and copied into the attempt folder; run as
`<target python> bench_driver.py PLAN.json`. Standard library only, Python 3.8+, imports nothing of the harness.

Why: a client started as `python -m sglang.bench_serving …` imports SGLang, torch and transformers first —
seconds on a good host, ~40 s a process on a GPU image that forbids bytecode — while a real-size case's own
requests take 1-3 s; 8 cases × 4 repeats paid that 32 times per attempt. Here the imports happen once: each
run is the client's own command line executed as `__main__` (`runpy.run_module`, a fresh module namespace
each time, `sys.argv` set to the run's arguments), its output (Python's and native) redirected into the
run's log file, exactly as the separate process wrote it. SGLang's own tests call its benchmark in-process
the same way.

PLAN.json: {"status": path, "runs": [{"module": "sglang.bench_serving", "args": [...], "log": path,
"output": path}, ...]}. For each run the driver appends to `status` one JSON line when it starts and one when it
ends: {"event": "start", "index": i} and {"event": "end", "index": i, "rc": code, "result": the last JSON line
the run added to its --output-file, or null}. It stops after a run that fails (rc != 0): the agent reports that
case as failed. Between runs it waits for a line on stdin (the agent's "go", once it has read the server's log
up to the end of the run: each run's prefix-cache counts stay its own); stdin at its end lets it go on.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from typing import Any


def result_lines(path: str) -> list[Any]:
    """The JSON lines of a client's --output-file (a missing file has none; unreadable lines are skipped): the
    agent's hostio.read_jsonl, restated because this file runs alone under the target's Python."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return rows


def emit(status_path: str, event: dict[str, Any]) -> None:
    with open(status_path, "a") as f:
        f.write(json.dumps(event) + "\n")
        f.flush()


def exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run_one(module: str, args: list[str], log_path: str) -> int:
    """`python -m module *args` in this process, its stdout and stderr (file descriptors 1 and 2) into log_path."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    argv = sys.argv
    rc = 0
    try:
        sys.argv = [module] + list(args)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        rc = exit_code(exc)
    except BaseException:  # a client's crash is that run's failure, reported with its traceback in its log
        traceback.print_exc()
        rc = 1
    finally:
        sys.argv = argv
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return rc


def main(plan_path: str) -> int:
    with open(plan_path) as f:
        plan = json.load(f)
    status = plan["status"]
    for i, run in enumerate(plan["runs"]):
        before = len(result_lines(run["output"]))
        emit(status, {"event": "start", "index": i})
        rc = run_one(run["module"], run["args"], run["log"])
        new = result_lines(run["output"])[before:]
        emit(status, {"event": "end", "index": i, "rc": rc, "result": new[-1] if new else None})
        if rc != 0:
            return 1
        if i + 1 < len(plan["runs"]):
            sys.stdin.readline()  # the agent's "go": it has read what the server logged during this run
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
