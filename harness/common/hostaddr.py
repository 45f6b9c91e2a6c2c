"""Where a client on the server's own machine connects to reach a server that listens on an address: the
controller writes it into bench_serving's command line, the agent into its health and answer requests.

Standard library only: it ships inside the agent's zipapp (Python >= 3.8 on the host)."""

from __future__ import annotations

# Addresses a server listens on that a client cannot connect to as such ("every interface").
ANY_ADDRESS = ("0.0.0.0", "::", "")


def connectable_host(host: str) -> str:
    """Where a client on the same machine reaches a server listening on `host` (a wildcard address means this
    machine)."""
    return "127.0.0.1" if host in ANY_ADDRESS else host
