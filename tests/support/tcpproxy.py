"""A TCP forwarder on loopback that a test can cut and restore: a login node that drops off the network
for a while (every connection reset, new ones refused) and comes back on the same address. Or one that
forwards only its first connections and then refuses every new one: a host that dies after them, at a point
fixed by the connections, not by when the test gets round to it."""

from __future__ import annotations

import socket
import threading

from tests.support.sshd import free_port


class CuttableProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", connections: int | None = None):
        """`connections`: forward that many, then refuse new ones (those open go on). The listener is closed
        as the last is accepted, before a byte of it is forwarded: no later connection can slip in first."""
        self.target = (target_host, target_port)
        self.port = free_port()
        self.connections = connections
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def cut(self) -> None:
        """Refuse new connections and reset every open one."""
        with self._lock:
            if self._listener is not None:
                try:  # wakes the thread blocked in accept(): close() alone leaves the socket listening
                    self._listener.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._listener.close()
                self._listener = None
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()

    def restore(self) -> None:
        with self._lock:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", self.port))
            s.listen(16)
            self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            self.accepted += 1
            if self.connections is not None and self.accepted >= self.connections:
                with self._lock:  # as `cut`, but the connection just accepted is forwarded
                    if self._listener is listener:
                        self._listener = None
                    listener.close()
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
