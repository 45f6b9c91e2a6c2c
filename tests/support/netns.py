"""Test hosts as network namespaces: each gets a veth link to this machine and its own address, so it
has its own loopback (its servers' ports never collide) and can be cut off by taking its link down."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass


def available() -> str | None:
    """None when namespaces can be made here, else why not (for a skip reason)."""
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    name = "hxprobe" + uuid.uuid4().hex[:6]
    p = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if p.returncode != 0:
        return f"cannot create network namespaces here: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    argv = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass
class NetnsHost:
    """Namespace `name`, reachable from here at `address` (a /30 on its own veth pair)."""

    name: str
    index: int

    @property
    def address(self) -> str:
        return f"10.231.{self.index}.2"

    @property
    def gateway(self) -> str:
        return f"10.231.{self.index}.1"

    @property
    def veth(self) -> str:
        return f"{self.name[:8]}h{self.index}"

    def create(self) -> NetnsHost:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        _ip("addr", "add", f"{self.gateway}/30", "dev", self.veth)
        _ip("link", "set", self.veth, "up")
        _ip("addr", "add", f"{self.address}/30", "dev", "eth0", ns=self.name)
        _ip("link", "set", "eth0", "up", ns=self.name)
        _ip("link", "set", "lo", "up", ns=self.name)
        return self

    def link(self, up: bool) -> None:
        """Cut the host off (or bring it back), as a pulled cable would."""
        _ip("link", "set", self.veth, "up" if up else "down")

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def sim_hosts_in_namespaces(n: int, root, tag: str):
    """A context manager: `n` namespaces, each with its own sshd and simulated SGLang target.
    Yields {name: HostConfig}; tears everything down afterwards."""
    import contextlib
    from pathlib import Path

    from harness.experiments.config import HostConfig
    from harness.sim import init_target
    from tests.support.sshd import SSHServer

    @contextlib.contextmanager
    def manager():
        made = []
        hosts = {}
        try:
            for i in range(n):
                ns = NetnsHost(f"hx{tag}{i}", 40 + i).create()
                made.append((ns, None))
                server = SSHServer(Path(root) / f"sshd{i}", address=ns.address, port=22).start(netns=ns.name)
                made[-1] = (ns, server)
                t = init_target(Path(root) / f"target{i}", arch="sm90")
                hosts[f"ns{i}"] = HostConfig(**server.host_entry(), repo=str(t.repo), python=str(t.python), gpus=8,
                                             arch="sm90", workdir=str(Path(root) / f"work{i}"))
            yield hosts
        finally:
            for ns, server in made:
                if server is not None:
                    server.stop()
                ns.destroy()

    return manager()
