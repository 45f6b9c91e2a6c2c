"""Transport: one interface to a host, two implementations — SSH (Fabric/Paramiko) and local.

Everything runs from an argv list; the SSH side encodes it so that any login shell passes it unchanged
(`remote_command`), the local side never uses a shell, so no string from a YAML file is ever
interpreted by a shell. Third-party errors are mapped to
the harness's own tree here, at the edge (`HostUnreachable`, `HostAuthError`, `HostKeyError`).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import HostAuthError, HostError, HostKeyError, HostUnreachable, RemoteCommandError
from ..experiments.config import HostConfig

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


def not_executable(program: str) -> str | None:
    """Why a local program path cannot be run (a folder, no execute bit), or None; a bare name is looked up
    on PATH by whoever runs it."""
    if os.sep not in program:
        return None
    path = os.path.expanduser(program)
    if os.path.isdir(path):
        return "is a folder, not an executable"
    if os.path.exists(path) and not os.access(path, os.X_OK):
        return "is not executable"
    if not os.path.exists(path):
        return "does not exist"
    return None


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""  # byte-exact, for file transfers


class RemoteProcess(ABC):
    """A process on the host with pipes: what the agent runs as."""

    @abstractmethod
    def write(self, data: bytes) -> None: ...

    @abstractmethod
    def close_stdin(self) -> None: ...

    @abstractmethod
    def readline(self) -> bytes:
        """Next line of stdout; b'' at end of stream."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int | None: ...

    @abstractmethod
    def kill(self) -> None:
        """Drop the process: for SSH, close the channel (the agent's dead man's switch does the rest)."""

    def stderr_tail(self) -> str:
        return "".join(self._stderr)

    def set_read_timeout(self, seconds: float | None) -> None:  # noqa: B027 - a no-op unless overridden
        """After this long without a line, readline raises TimeoutError (a link that went silent).
        Local pipes cannot go silent that way: the default does nothing."""

    def _drain_stderr(self, stream: IO[bytes]) -> None:
        self._stderr: deque[str] = deque(maxlen=200)

        def run() -> None:
            for line in iter(stream.readline, b""):
                self._stderr.append(line.decode(errors="replace"))

        threading.Thread(target=run, name="stderr", daemon=True).start()


class Transport(ABC):
    def __init__(self, name: str, host: HostConfig):
        self.name = name
        self.host = host

    def run(self, argv: list[str], *, timeout: float = 60, check: bool = True) -> CommandResult:
        result = self._run(argv, timeout)
        if check and result.exit_code != 0:
            raise RemoteCommandError(self.name, argv, result.exit_code, result.stdout + result.stderr)
        return result

    @abstractmethod
    def _run(self, argv: list[str], timeout: float) -> CommandResult: ...

    @abstractmethod
    def start(self, argv: list[str]) -> RemoteProcess: ...

    @abstractmethod
    def put(self, local: Path, remote: str) -> None: ...

    @abstractmethod
    def get(self, remote: str, local: Path) -> None: ...

    def close(self) -> None:  # noqa: B027 - most transports hold nothing to close
        pass

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ============================================================================ local


class _LocalProcess(RemoteProcess):
    def __init__(self, argv: list[str]):
        # Own session: a Ctrl-C on the terminal reaches the controller, which then aborts the agent
        # cleanly, instead of killing the agent mid-revert.
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        assert self.p.stdin and self.p.stdout and self.p.stderr  # all three are pipes
        self.stdin, self.stdout = self.p.stdin, self.p.stdout
        self._drain_stderr(self.p.stderr)

    def write(self, data: bytes) -> None:
        try:
            self.stdin.write(data)
            self.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def close_stdin(self) -> None:
        try:
            self.stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    def readline(self) -> bytes:
        return self.stdout.readline()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        self.close_stdin()


class LocalTransport(Transport):
    """The host is this machine: same agent, same behaviour, no SSH."""

    def _run(self, argv: list[str], timeout: float) -> CommandResult:
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout)
        except FileNotFoundError as exc:
            return CommandResult(argv, 127, "", str(exc))
        except OSError as exc:  # a folder or a file without the execute bit: the shell's "cannot execute"
            return CommandResult(argv, 126, "", f"{argv[0]}: {not_executable(argv[0]) or exc.strerror}")
        except subprocess.TimeoutExpired:
            return CommandResult(argv, 124, "", f"timed out after {timeout}s")
        return CommandResult(argv, p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))

    def start(self, argv: list[str]) -> RemoteProcess:
        try:
            return _LocalProcess(argv)
        except OSError as exc:
            raise HostError(self.name, f"cannot start {argv[0]}: {exc}") from None

    def put(self, local: Path, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        tmp = remote + ".part"
        shutil.copyfile(local, tmp)
        os.replace(tmp, remote)

    def get(self, remote: str, local: Path) -> None:
        shutil.copyfile(remote, local)


# ============================================================================ SSH


class _SSHProcess(RemoteProcess):
    def __init__(self, channel):  # paramiko.Channel
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
            return self._out.readline()
        except TimeoutError:
            raise TimeoutError("no data from the host") from None
        except Exception:  # the connection died: same as end of stream
            return b""

    def wait(self, timeout: float | None = None) -> int | None:
        if self.chan.status_event.wait(timeout):
            return self.chan.recv_exit_status()
        return None

    def kill(self) -> None:
        self.chan.close()


class SSHTransport(Transport):
    """SSH through Fabric: key auth, ~/.ssh/config respected, host keys checked against known_hosts."""

    def __init__(self, name: str, host: HostConfig):
        super().__init__(name, host)
        self._conn = self._connect()

    def _connect(self):
        import fabric
        import paramiko

        h = self.host
        config = fabric.Config(runtime_ssh_path=os.path.expanduser(h.ssh_config)) if h.ssh_config else None
        connect_kwargs: dict = {"banner_timeout": h.connect_timeout, "auth_timeout": h.connect_timeout}
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
            # Done at end of stream, not at the exit status: sshd may send the status while output still waits
            # for the window to open (a large file fetched through exec), and stopping then truncates it.
            while not (chan.exit_status_ready() and chan.eof_received and not chan.recv_ready()
                       and not chan.recv_stderr_ready()):
                if chan.recv_ready():
                    stdout += chan.recv(65536)
                elif chan.recv_stderr_ready():
                    stderr += chan.recv_stderr(65536)
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


def _fingerprint(key) -> str:
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

    def __init__(self, known_hosts: str | None):
        self.path = os.path.expanduser(known_hosts or "~/.ssh/known_hosts")

    def missing_host_key(self, client, hostname, key) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def connect(name: str, host: HostConfig) -> Transport:
    """A host's transport (a cluster's is `targets.connect`'s)."""
    return LocalTransport(name, host) if host.is_local else SSHTransport(name, host)
