"""A host reached directly: this machine, or over SSH (a cluster's login node is one too)."""

from __future__ import annotations

from ..experiments.config import HostConfig
from .local import LocalTransport
from .ssh import SSHTransport
from .transport import Transport


def connect(name: str, host: HostConfig) -> Transport:
    """A host's transport (a cluster's is `targets.connect`'s)."""
    return LocalTransport(name, host) if host.is_local else SSHTransport(name, host)
