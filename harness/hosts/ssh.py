"""The SSH transport, through Fabric/Paramiko: key auth, ~/.ssh/config respected, host keys checked against
known_hosts on every hop, and an argv that reaches the host unchanged whatever the user's login shell is."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path
from typing import Any

from ..errors import HostAuthError, HostError, HostKeyError, HostUnreachable
from ..experiments.config import HostConfig
from .transport import CommandResult, RemoteProcess, Transport

# What the remote login shell executes: the host's Python with this one-line program, which decodes the
# real argv (each element base64, so only [A-Za-z0-9+/=]) and execs it. Every word is single-quoted and
# holds no quote, backslash, `!` or newline, so sh, bash, zsh, csh, tcsh and fish all pass it unchanged.
BOOTSTRAP = "import os,sys,base64;a=[base64.b64decode(x).decode() for x in sys.argv[1:]];os.execvp(a[0],a)"
SHELL_HOSTILE = ("'", "\\", "!", "\n")


def remote_command(python: str, argv: list[str]) -> str:
    """The command line for an SSH exec channel that means `argv` whatever the user's login shell is."""
    if any(c in python for c in SHELL_HOSTILE):
        raise ValueError(f"the host's python path {python!r} contains a quote, backslash, '!' or newline")
    words = [python, "-c", BOOTSTRAP] + [base64.b64encode(a.encode()).decode() for a in argv]
    return " ".join(f"'{w}'" for w in words)


class _SSHProcess(RemoteProcess):
    def __init__(self, channel: Any) -> None:  # paramiko.Channel
        self.chan = channel
        self._out = channel.makefile("rb")
        self._drain_stderr(channel.makefile_stderr("rb"))

    def write(self, data: bytes) -> None:
        try:
            self.chan.sendall(data)
        except Exception:  # closed channel or transport (paramiko.SSHException, OSError, EOFError)
            pass

    def close_stdin(self) -> None:
        try:
            self.chan.shutdown_write()
        except Exception:
            pass

    def set_read_timeout(self, seconds: float | None) -> None:
        self.chan.settimeout(seconds)

    def readline(self) -> bytes:
        try:
            line: bytes = self._out.readline()
            return line
        except TimeoutError:
            raise TimeoutError("no data from the host") from None
        except Exception:  # the connection died: same as end of stream
            return b""

    def wait(self, timeout: float | None = None) -> int | None:
        if self.chan.status_event.wait(timeout):
            code: int = self.chan.recv_exit_status()
            return code
        return None

    def kill(self) -> None:
        self.chan.close()


class SSHTransport(Transport):
    """SSH through Fabric: key auth, ~/.ssh/config respected, host keys checked against known_hosts."""

    def __init__(self, name: str, host: HostConfig) -> None:
        super().__init__(name, host)
        self._conn = self._connect()

    def _connect(self) -> Any:  # fabric.Connection
        import fabric
        import paramiko

        h = self.host
        config = fabric.Config(runtime_ssh_path=os.path.expanduser(h.ssh_config)) if h.ssh_config else None
        connect_kwargs: dict[str, Any] = {"banner_timeout": h.connect_timeout, "auth_timeout": h.connect_timeout}
        if h.key:
            connect_kwargs["key_filename"] = [os.path.expanduser(h.key)]
            connect_kwargs["look_for_keys"] = False
        kwargs = dict(host=h.address, user=h.user, port=h.port, connect_timeout=h.connect_timeout,
                      connect_kwargs=connect_kwargs)
        if config is not None:
            kwargs["config"] = config
        conn = fabric.Connection(**kwargs)
        # The same host-key rules on every hop: the final host and each ProxyJump bastion before it
        # (Fabric builds the bastions as plain Connections that would trust any key).
        hop: object = conn
        while isinstance(hop, fabric.Connection):
            self._check_host_keys(hop.client)
            hop = hop.gateway
        label = f"{conn.user}@{conn.host}:{conn.port}"
        try:
            conn.open()
        except paramiko.BadHostKeyException as exc:
            server = _failing_hop(conn)
            raise HostKeyError(self.name, f"the SSH host key of {server} has CHANGED (now {exc.key.get_name()} "
                               f"{_fingerprint(exc.key)}); refusing to connect",
                               hint=f"if the host was really reinstalled, remove the old key with "
                                    f"`ssh-keygen -R {server.split(' ')[0].split('@')[-1]}` and connect once "
                                    f"with ssh to check the new fingerprint") from None
        except paramiko.AuthenticationException as exc:
            raise HostAuthError(self.name, f"authentication failed for {label}: {exc}",
                                hint="check `key:` in hosts.yaml, ssh-agent, and the host's authorized_keys") from None
        except paramiko.SSHException as exc:
            if _no_banner(conn, exc):
                raise HostUnreachable(self.name, f"{label} accepted the connection but sent no SSH banner within "
                                      f"{h.connect_timeout:g} s: no SSH server answers on that port",
                                      hint="check `address:` and `port:` of this host in hosts.yaml (and that sshd "
                                           "runs there); a busy sshd may need a longer `connect_timeout:`") from None
            if "not found in known_hosts" in str(exc):
                raise HostKeyError(self.name, f"unknown SSH host key for {_failing_hop(conn)}; refusing to connect",
                                   hint=f"connect once with `ssh -p {conn.port} {conn.user}@{conn.host}` to check and "
                                        f"accept the fingerprint, or set `accept_new_host_key: true` for this host "
                                        f"in hosts.yaml") from None
            raise HostUnreachable(self.name, f"SSH error talking to {label}: {exc}") from None
        # EOFError: paramiko's word (from its transport thread) for a server that hung up mid-handshake; a reset:
        # the same hang-up arriving while our key exchange was still unread on its side (the kernel sends RST)
        except (EOFError, ConnectionResetError):
            raise HostUnreachable(self.name, f"{label} closed the connection during the SSH handshake",
                                  hint="is sshd running there, and not stopping or restarting?") from None
        except TimeoutError as exc:
            raise HostUnreachable(self.name, f"connection to {label} timed out ({exc})",
                                  hint="is the host up and the port right?") from None
        except (OSError, paramiko.ssh_exception.NoValidConnectionsError) as exc:
            raise HostUnreachable(self.name, f"cannot connect to {label}: {exc}",
                                  hint="is the host up, sshd running and the port right?") from None
        conn.transport.set_keepalive(max(1, int(h.keepalive)))
        return conn

    def _check_host_keys(self, client: Any) -> None:
        import paramiko

        h = self.host
        # Fabric auto-adds unknown host keys by default; we refuse them unless the host opts in.
        client.set_missing_host_key_policy(
            _AcceptNewPolicy(h.known_hosts) if h.accept_new_host_key else paramiko.RejectPolicy())
        # Fabric itself loads no known_hosts file at all: do it, so keys are really checked.
        if h.known_hosts:
            path = os.path.expanduser(h.known_hosts)
            if os.path.exists(path):
                client.load_host_keys(path)
        else:
            client.load_system_host_keys()

    def _run(self, argv: list[str], timeout: float) -> CommandResult:
        # A bare exec channel: Fabric's Runner adds ~0.1 s of polling per command, and short
        # commands are on every attempt's critical path.
        import paramiko

        try:
            chan = self._conn.transport.open_session(timeout=timeout)
            chan.settimeout(timeout)
            chan.exec_command(self._command(argv))
            chan.shutdown_write()
            stdout, stderr = bytearray(), bytearray()
            deadline = time.monotonic() + timeout  # the channel's own timeout is only its reads'
            # Done at end of stream, not at the exit status: sshd may send the status while output still waits
            # for the window to open (a large file fetched through exec), and stopping then truncates it.
            while not (chan.exit_status_ready() and chan.eof_received and not chan.recv_ready()
                       and not chan.recv_stderr_ready()):
                if chan.recv_ready():
                    stdout += chan.recv(65536)
                elif chan.recv_stderr_ready():
                    stderr += chan.recv_stderr(65536)
                elif chan.closed:  # closed, no end of stream: none will come (this loop once spun on it forever)
                    if not self._conn.transport.is_active():  # the link died under the command
                        raise EOFError("the connection dropped while the command ran")
                    break  # a server that closes without one
                elif time.monotonic() > deadline:
                    raise TimeoutError
                else:
                    chan.status_event.wait(0.005)
            code = chan.recv_exit_status()
            chan.close()
        except TimeoutError:
            return CommandResult(argv, 124, "", f"timed out after {timeout}s")
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise HostUnreachable(self.name, f"connection lost: {exc}") from None
        return CommandResult(argv, code, stdout.decode(errors="replace"), stderr.decode(errors="replace"),
                             bytes(stdout))

    def start(self, argv: list[str]) -> RemoteProcess:
        import paramiko

        try:
            chan = self._conn.transport.open_session()
            chan.exec_command(self._command(argv))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise HostUnreachable(self.name, f"connection lost: {exc}") from None
        return _SSHProcess(chan)

    def put(self, local: Path, remote: str) -> None:
        import paramiko

        tmp = remote + ".part"
        try:
            sftp = self._conn.sftp()
            sftp.put(str(local), tmp)
            sftp.posix_rename(tmp, remote)
            return
        except paramiko.SSHException:
            pass  # no SFTP subsystem on this host: stream the bytes through the host's Python instead
        except OSError as exc:
            raise HostError(self.name, f"cannot upload {local.name} to {remote}: {exc}") from None
        writer = ("import os,sys\nt=sys.argv[1]+'.part'\nopen(t,'wb').write(sys.stdin.buffer.read())\n"
                  "os.replace(t,sys.argv[1])\n")
        proc = self.start([self.host.python, "-c", writer, remote])
        proc.write(local.read_bytes())
        proc.close_stdin()
        rc = proc.wait(timeout=60)
        if rc != 0:
            raise HostError(self.name, f"cannot upload {local.name} to {remote} (exit {rc}): "
                                       f"{proc.stderr_tail()[-500:]}")

    def get(self, remote: str, local: Path) -> None:
        import paramiko

        try:
            self._conn.sftp().get(remote, str(local))
            return
        except paramiko.SSHException:
            pass
        r = self.run([self.host.python, "-c", "import sys;sys.stdout.buffer.write(open(sys.argv[1],'rb').read())",
                      remote], check=False, timeout=600)
        if r.exit_code != 0:
            raise OSError(f"cannot fetch {remote}: {r.stderr[-300:]}")
        local.write_bytes(r.stdout_bytes)

    def _command(self, argv: list[str]) -> str:
        try:
            return remote_command(self.host.python, argv)
        except ValueError as exc:
            raise HostError(self.name, str(exc), hint="set `python:` in hosts.yaml to a plain path") from None

    def close(self) -> None:
        self._conn.close()


def _no_banner(conn: Any, exc: Exception) -> bool:
    """The TCP connection was accepted but no SSH server spoke: paramiko says so, or — when its own wait ran
    out first — reports the missing session while the transport never received a version line."""
    if "SSH protocol banner" in str(exc):
        return True
    transport = conn.client.get_transport()
    return transport is not None and not getattr(transport, "remote_version", "") and "No existing session" in str(exc)


def _fingerprint(key: Any) -> str:  # paramiko.PKey
    """OpenSSH's format, so it can be compared with what `ssh-keygen -lf` prints on the host."""
    import base64
    import hashlib

    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def _failing_hop(conn: Any) -> str:
    """Which hop's key was refused. Hops open from the front bastion to the final host, each through the
    one before; the refused one is the last that got as far as a transport. Named as known_hosts names it,
    so `ssh-keygen -R` takes it."""
    hops = []
    hop = conn
    while hop is not None and not isinstance(hop, str):
        hops.append(hop)
        hop = hop.gateway
    final = _known_hosts_name(conn.host, conn.port)
    for hop in hops:  # final host first
        if hop.client.get_transport() is not None:
            name = _known_hosts_name(hop.host, hop.port)
            return name if hop is conn else f"{name} (a bastion on the way to {final})"
    return final


def _known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _AcceptNewPolicy:  # duck-typed paramiko.MissingHostKeyPolicy
    """Like OpenSSH's StrictHostKeyChecking=accept-new: trust a first-seen key and remember it.
    A changed key still fails (paramiko raises BadHostKeyException before asking any policy)."""

    def __init__(self, known_hosts: str | None) -> None:
        self.path = os.path.expanduser(known_hosts or "~/.ssh/known_hosts")

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
