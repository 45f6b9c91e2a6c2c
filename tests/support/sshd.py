"""A real OpenSSH server on loopback, with keys made for this run (tests and benchmarks use it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


@dataclass
class SSHServer:
    """One sshd process. `known_hosts` holds its host key; `client_key` may log in as the current user."""

    root: Path
    address: str = "127.0.0.1"
    port: int = 0
    extra_config: str = ""
    sftp: bool = True  # False: a host without the SFTP subsystem (transfers go through exec channels)
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.host_key = self.root / "ssh_host_ed25519_key"
        self.client_key = self.root / "id_ed25519"
        self.known_hosts = self.root / "known_hosts"
        self.authorized_keys = self.root / "authorized_keys"
        self.config = self.root / "sshd_config"
        self.log_lines: list[str] = []

    @property
    def user(self) -> str:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name

    def prepare(self) -> SSHServer:
        if not self.host_key.exists():
            keygen(self.host_key, "test-host")
        if not self.client_key.exists():
            keygen(self.client_key, "test-client")
        shutil.copyfile(self.client_key.with_suffix(".pub"), self.authorized_keys)
        os.chmod(self.authorized_keys, 0o600)
        if not self.port:
            self.port = free_port(self.address)
        pub = self.host_key.with_suffix(".pub").read_text().split()
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        self.known_hosts.write_text(f"{name} {pub[0]} {pub[1]}\n")
        self.config.write_text(
            f"Port {self.port}\nListenAddress {self.address}\nHostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.authorized_keys}\nPidFile {self.root / 'sshd.pid'}\n"
            "StrictModes no\nUsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nMaxStartups 100:30:200\n"
            "MaxSessions 50\nLogLevel INFO\n"
            + ("Subsystem sftp /usr/lib/openssh/sftp-server\n" if self.sftp else "") + self.extra_config
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir
        return self

    def start(self, netns: str | None = None) -> SSHServer:
        """Start sshd in the foreground (-D) and wait for its own 'Server listening' line (no sleeps)."""
        self.prepare()
        argv = [SSHD, "-D", "-e", "-f", str(self.config)]
        if netns:
            argv = ["ip", "netns", "exec", netns] + argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        listening = threading.Event()

        def read() -> None:
            for line in self.proc.stderr:
                self.log_lines.append(line.rstrip())
                if "Server listening on" in line:
                    listening.set()
            listening.set()

        threading.Thread(target=read, daemon=True).start()
        if not listening.wait(15) or self.proc.poll() is not None:
            raise RuntimeError("sshd did not start:\n" + "\n".join(self.log_lines))
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def host_entry(self, **overrides) -> dict:
        entry = {"address": self.address, "port": self.port, "user": self.user, "key": str(self.client_key),
                 "known_hosts": str(self.known_hosts)}
        entry.update(overrides)
        return entry
