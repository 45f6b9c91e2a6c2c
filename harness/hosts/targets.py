"""Any target of the inventory by its entry: a host (SSH or this machine) or a Slurm cluster, whose attempts
run as batch jobs through its login node."""

from __future__ import annotations

from ..experiments.config import ClusterHost, HostConfig
from .slurmjob import SlurmTransport
from .transport import Transport
from .transport import connect as connect_host


def connect(name: str, host: HostConfig) -> Transport:
    if isinstance(host, ClusterHost):
        return SlurmTransport(name, host)
    return connect_host(name, host)
