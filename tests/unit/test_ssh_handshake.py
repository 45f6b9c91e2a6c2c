"""An SSH server that hangs up mid-handshake (sshd stopping as the connection arrives) is an unreachable host —
a HostError the scheduler retries elsewhere — never paramiko's bare EOFError, which killed a sweep's worker. A hang-up
with the client's key exchange still unread reaches the client as a reset (ECONNRESET) or as EOF, depending on
timing: the same message either way."""

from __future__ import annotations

import socket
import sys
import threading

import pytest

from harness.errors import HostUnreachable
from harness.experiments.config import HostConfig
from harness.hosts.ssh import SSHTransport


@pytest.mark.parametrize("after", ["its banner", "the client's key exchange"])
def test_a_server_that_hangs_up_mid_handshake_is_unreachable(tmp_path, after):
    listener = socket.create_server(("127.0.0.1", 0))

    def speak_and_hang_up() -> None:
        conn = listener.accept()[0]
        conn.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")
        if after != "its banner":
            conn.recv(65536)  # the client's banner, and its KEXINIT with it or soon after
        conn.close()

    threading.Thread(target=speak_and_hang_up, daemon=True).start()
    host = HostConfig(address="127.0.0.1", port=listener.getsockname()[1], user="root", repo=str(tmp_path),
                      python=sys.executable, known_hosts=str(tmp_path / "known_hosts"), connect_timeout=5)
    try:
        with pytest.raises(HostUnreachable, match="closed the connection during the SSH handshake"):
            SSHTransport("box", host)
    finally:
        listener.close()
