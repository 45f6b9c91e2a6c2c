"""Where a planned attempt may run (pure): which hosts fit it, the next attempt a host takes, keeping an
experiment's rounds on one kind of GPU, and what becomes of an attempt no live host can take."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..experiments.config import HostConfig
from ..experiments.plan import PlannedAttempt


def why_host_does_not_fit(a: PlannedAttempt, host: HostConfig) -> str | None:
    """Pure: the reason this host cannot take the attempt, or None. Arch (and, before a sweep asks the host,
    the GPU count) is only known when the inventory says it; otherwise the agent checks on the host (nvidia-smi)."""
    exp = a.resolved.experiment
    if a.arch and host.arch != a.arch:
        return f"this run of the baseline is for {a.arch} hosts"
    if host.gpus is not None and exp.gpus_needed > host.gpus:
        return f"needs {exp.gpus_needed} GPUs, has {host.gpus}"
    backend = a.resolved.backend
    if backend and not backend.fits_arch(host.arch) and exp.expect != "crash":
        return f"backend {backend.name} needs {'/'.join(backend.archs or ())}, host is {host.arch}"
    return None


@dataclass(frozen=True)
class NoLiveHost:
    """What becomes of an attempt no live host can take: refused — a deterministic outcome, recorded with every
    host's reason — or left waiting (for a host to come back, else for a resume)."""

    refused: bool
    reasons: dict[str, str | None]  # host → why it cannot run the attempt (None: it could, were it in use)


class Placement:
    """The sweep's hosts as placement sees them: each (attempt, host) fit, memoised (it does not change in a
    sweep), and the GPU arch each experiment's rounds run on (only a KNOWN arch pins)."""

    def __init__(self, hosts: Mapping[str, HostConfig], planned_archs: Iterable[str]) -> None:
        self.hosts = hosts
        self._planned_archs = set(planned_archs)  # the archs the run's keys were made with
        self._fit: dict[tuple[str, str], str | None] = {}
        self._kind: dict[str, str] = {}  # experiment → the GPU arch its rounds run on

    def why(self, a: PlannedAttempt, host: str) -> str | None:
        """`why_host_does_not_fit`, memoised: the answer for a key and a host does not change in a sweep."""
        k = (a.key, host)
        if k not in self._fit:
            self._fit[k] = why_host_does_not_fit(a, self.hosts[host])
        return self._fit[k]

    def first_for(self, pending: Iterable[PlannedAttempt], host: str, live: set[str],
                  avoid: Mapping[str, set[str]]) -> PlannedAttempt | None:
        """The first pending attempt `host` can take now (`avoid`: key → hosts where it failed for
        infrastructure reasons)."""
        for a in pending:
            if self.why(a, host) is not None or not self.kind_allows(a, host, live):
                continue
            failed_on = avoid.get(a.key, set())
            if host in failed_on and any(n != host and n not in failed_on and self.why(a, n) is None for n in live):
                continue  # it failed here for infrastructure reasons: let another host try first
            return a
        return None

    def kind_allows(self, a: PlannedAttempt, host: str, live: set[str]) -> bool:
        """Keep an experiment's rounds on one kind of GPU, so its samples pool: another kind (or a host of
        unknown arch) takes them only when no live host of the experiment's kind could."""
        kind = None if a.arch else self._kind.get(a.name)
        if kind is None or self.hosts[host].arch == kind:
            return True
        return not any(self.hosts[n].arch == kind and self.why(a, n) is None for n in live)

    def took(self, a: PlannedAttempt, host: str) -> str | None:
        """`host` took `a`: the experiment's kind of GPU is now the host's KNOWN arch (a host of unknown arch pins
        nothing). Returns what to say when that moves the experiment to another kind."""
        arch = self.hosts[host].arch
        kind = self._kind.get(a.name)
        if a.arch or arch is None or arch == kind:
            return None
        self._kind[a.name] = arch
        if kind is None:
            return None
        return f"moves from {kind} to {arch} ({host}): no live {kind} host can take it; later rounds stay on {arch}"

    def without_live_host(self, a: PlannedAttempt, live: set[str], out: Mapping[str, str]) -> NoLiveHost | None:
        """None when a live host can take `a`. Else: an attempt no host can take is refused; one that only a host
        out of use (`out`: host → why: unusable for this sweep, or down) might take waits — unless its backend
        runs on no arch known here and only hosts of unknown arch, all out of use, remain: that is refused (a
        host's unknown arch is no reason to wait for it)."""
        if any(self.why(a, n) is None for n in live):
            return None  # the common case, and cheap
        reasons = {n: self.why(a, n) for n in self.hosts}
        if all(reasons.values()):
            return NoLiveHost(refused=not self._another_kind_could(a), reasons=reasons)
        backend = a.resolved.backend
        only_unknown = all(reasons[n] or self.hosts[n].arch is None for n in self.hosts)
        if backend is not None and backend.archs and only_unknown:
            return NoLiveHost(refused=True, reasons={n: r or f"arch unknown and not in use: {out[n]}"
                                                     for n, r in reasons.items()})
        return NoLiveHost(refused=False, reasons=reasons)

    def _another_kind_could(self, a: PlannedAttempt) -> bool:
        """On a resume over other hosts: a GPU arch the run was planned with that none of these hosts has might
        run it — no outcome, left for a resume there (a new run's plan has no such arch)."""
        missing = self._planned_archs - {h.arch for h in self.hosts.values()}
        backend = a.resolved.backend
        if a.arch:
            return a.arch in missing
        return backend is not None and bool(backend.archs) and any(backend.fits_arch(x) for x in missing)
