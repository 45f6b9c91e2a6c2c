"""Helpers for the tests of the simulated SGLang target: processes, ports, paths."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from harness.sim import SimTarget

REPO_ROOT = Path(__file__).resolve().parents[2]
PATCHES = REPO_ROOT / "patches"
FP8_PATCH = PATCHES / "sim_fp8_kv_into_mla_plan" / "0001-pass-fp8-kv-dtype-to-mla-plan.patch"
HANG_PATCH = PATCHES / "sim_nccl_init_hang" / "0001-fetch-nccl-unique-id-before-publishing-it.patch"
READY_LINE = "The server is fired up and ready to roll!"
MLA_MODEL = "zai-org/GLM-5-NVFP4"

# Fast startups for most tests (the healthy-start test uses the default scale).
FAST_ENV = {"SGLANG_SIM_STARTUP_SCALE": "0.3"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of a session: what a server left behind."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            out.append(int(name))
    return out


class Proc:
    """A process started in its own session whose merged output is collected line by line."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None):
        full_env = dict(os.environ)
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        full_env.update(env or {})
        self.started = time.monotonic()
        self.popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.popen.stdout:
            with self._cond:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float) -> str:
        """Block until a line matches the regex; fail on timeout or if the process ends first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(self.lines)
                if self._eof:
                    rc = self.popen.poll()
                    tail = self.output_tail()
                    raise AssertionError(f"process exited ({rc}) before printing {pattern!r}:\n{tail}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no line matching {pattern!r} within {timeout}s:\n{self.output_tail()}"
                    )
                self._cond.wait(left)

    def assert_no_line(self, pattern: str, within: float) -> None:
        """The awaited event is an absence: wait for the line, expect the timeout."""
        try:
            line = self.wait_for_line(pattern, within)
        except AssertionError as e:
            if "exited" in str(e):
                raise
            return
        raise AssertionError(f"unexpected line {line!r}")

    def wait_exit(self, timeout: float) -> int:
        rc = self.popen.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc

    def output_tail(self, n: int = 60) -> str:
        return "\n".join(self.lines[-n:])

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # Children may outlive the leader for a moment: they die with it (PDEATHSIG), reap the rest.
        for pid in session_pids(self.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.popen.stdout:
            self.popen.stdout.close()


def server_args(port: int, *extra: str, model: str = MLA_MODEL) -> list[str]:
    return ["--model-path", model, "--port", str(port), "--host", "127.0.0.1", *extra]


def launch_proc(
    target: SimTarget, *args: str, env: dict[str, str] | None = None, module="sglang.launch_server"
) -> Proc:
    return Proc([str(target.python), "-m", module, *args], cwd=target.repo, env=env)


def http(port: int, method: str, path: str, body=None, timeout: float = 30.0):
    """(status, text) of one request to 127.0.0.1:port."""
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        payload = json.dumps(body) if body is not None else None
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        return res.status, res.read().decode("utf-8")
    finally:
        conn.close()


def wait_http_status(port: int, path: str, status: int, timeout: float) -> None:
    """Poll an endpoint until it answers with the given status (or fail at the deadline)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = http(port, "GET", path, timeout=5)[0]
        except OSError as e:
            last = repr(e)
        if last == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"GET {path} never answered {status} within {timeout}s (last: {last})")
