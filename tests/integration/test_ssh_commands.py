"""The SSH transport's short commands (`Transport.run`: the agent's probe, fetches) on a real sshd: a link that
dies under one is a lost connection, said at once — the wait for its end once spun forever on the closed
channel, and a sweep never ended — and one that outlives its timeout is exit 124, not waited for."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from harness.errors import HostUnreachable
from harness.experiments.config import HostConfig
from harness.hosts.ssh import SSHTransport
from tests.support.tcpproxy import CuttableProxy

pytestmark = pytest.mark.integration


def test_a_link_that_dies_under_a_command_is_a_lost_connection_not_a_wait_forever(tmp_path, sshd):
    ready, hold = tmp_path / "ready", tmp_path / "hold"
    os.mkfifo(ready)
    os.mkfifo(hold)
    holding = os.open(hold, os.O_RDWR)  # while the test has it open, the command's `cat` waits on it
    proxy = CuttableProxy(sshd.port)
    _, key_type, key = sshd.known_hosts.read_text().split()[:3]
    known = tmp_path / "known_hosts"  # the host's key, at the address the harness dials
    known.write_text(f"[127.0.0.1]:{proxy.port} {key_type} {key}\n")
    t = SSHTransport("box", HostConfig(**sshd.host_entry(port=proxy.port, known_hosts=str(known)), repo="/tmp",
                                       python=sys.executable))
    # It takes `hold`, says it runs (the `echo` waits for the test to read), and waits until the test lets go.
    argv = ["sh", "-c", 'exec 3<"$1"; echo running >"$0"; exec cat <&3', str(ready), str(hold)]
    ended: list[object] = []
    runner = threading.Thread(target=lambda: ended.append(_outcome(t, argv)), daemon=True)
    runner.start()
    try:
        with open(ready) as said:
            assert said.read() == "running\n"
        proxy.cut()
        runner.join(60)  # half the command's timeout: the lost link must be seen, not waited out
    finally:
        os.close(holding)  # the command's `cat` ends
    assert not runner.is_alive(), "still waiting on a channel whose connection is gone"
    assert isinstance(ended[0], HostUnreachable) and "connection lost" in ended[0].message, ended


def test_a_command_past_its_timeout_is_exit_124(sshd):
    t = SSHTransport("box", HostConfig(**sshd.host_entry(), repo="/tmp", python=sys.executable))
    try:
        r = t.run(["sleep", "3"], check=False, timeout=1)  # before: waited the 3 s out, and said exit 0
    finally:
        t.close()
    assert r.exit_code == 124 and "timed out" in r.stderr, r


def _outcome(t: SSHTransport, argv: list[str]) -> object:
    try:
        return t.run(argv, check=False, timeout=120)
    except Exception as exc:  # handed to the test's thread as it is
        return exc
