"""The agent's link to the controller: typed events out on stdout, commands in on stdin.

A thread reads stdin: `ping` keeps the heartbeat fresh (and `echo` answers with the host's clock),
`abort` asks for a clean stop, end of input means the controller is gone — the dead man's switch.
In a Slurm job the link is a file instead (`durable`: each event is on disk, for readers on other nodes,
before the agent goes on) and nothing comes in: signals stop the job.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import IO, Optional

from ..common.protocol import Alive, Event, Pong, Spec, encode


class Link:
    def __init__(self, out: Optional[IO[str]] = None, durable: bool = False) -> None:
        self._out = out
        self._durable = durable
        self._out_lock = threading.Lock()
        self.wake = threading.Event()  # set whenever something happened that a waiting stage should see
        self.abort_reason: Optional[str] = None
        self.last_heard = time.monotonic()
        self.closed = False

    def send(self, event: Event) -> None:
        if self.closed:
            return
        data = json.dumps(encode(event), default=str) + "\n"
        with self._out_lock:
            out = self._out or sys.stdout
            try:
                out.write(data)
                out.flush()
                if self._durable:
                    os.fsync(out.fileno())
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True
                self.abort("controller-gone")

    def abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
        self.wake.set()

    def read_spec(self) -> Spec:
        line = sys.stdin.readline()
        if not line:
            raise SystemExit(3)
        return Spec.decode(json.loads(line))

    def keep_alive(self, interval: float) -> None:
        """A line every `interval` seconds, so the controller can tell a quiet agent from a lost link."""
        def run() -> None:
            while not self.closed:
                time.sleep(interval)
                self.send(Alive())

        threading.Thread(target=run, name="alive", daemon=True).start()

    def watch_stdin(self) -> None:
        def run() -> None:
            for line in sys.stdin:
                self.last_heard = time.monotonic()
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("cmd") == "abort":
                    self.abort("controller-abort")
                elif msg.get("cmd") == "ping" and msg.get("echo") is not None:
                    self.send(Pong(echo=msg["echo"], host_time=time.time()))
            self.abort("controller-gone")

        threading.Thread(target=run, name="stdin", daemon=True).start()
