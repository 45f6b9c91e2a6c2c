"""Any target of the inventory by its entry: a host (SSH or this machine) or a Slurm cluster, whose attempts
run as batch jobs through its login node — and how an attempt's agent is talked to on each."""

from __future__ import annotations

from ..experiments.config import ClusterHost, HostConfig
from .channel import AttemptChannel
from .direct import connect as connect_host
from .jsonlines import JsonLinesChannel
from .slurmjob import SlurmTransport
from .transport import Transport


def connect(name: str, host: HostConfig) -> Transport:
    if isinstance(host, ClusterHost):
        return SlurmTransport(name, host)
    return connect_host(name, host)


def open_attempt(transport: Transport, host_name: str, host: HostConfig, agent_path: str) -> AttemptChannel:
    """The channel to the agent at `agent_path` for one attempt: a batch job on a cluster, else the agent's own
    process, whose silence for three keepalives (at least 6 s) means the link is gone."""
    if isinstance(transport, SlurmTransport):
        return transport.attempt(python=host.python, agent=agent_path)
    proc = transport.start([host.python, agent_path])
    return JsonLinesChannel(proc, host_name, silence_s=max(6.0, 3 * host.keepalive))
