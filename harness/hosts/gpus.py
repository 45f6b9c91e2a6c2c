"""How many GPUs each sweep host has: the inventory's `gpus:` when given (that is how a user limits a host),
else what the host's nvidia-smi shows (within its CUDA_VISIBLE_DEVICES) — asked once, before a sweep
schedules anything. A host that cannot be asked is not used by the sweep: its attempts are left for a resume.
The same question learns the GPU arch of a host whose inventory has no `arch:` (from the compute capability
nvidia-smi reports, when all its GPUs agree), so the sweep can keep an experiment's rounds on it; a host whose
answer cannot tell stays of unknown arch. A host with `gpus:` but no `arch:` is asked too, and stays usable
(of unknown arch) when it cannot be asked.

Attempt keys do not depend on the answer (they use the configured `gpus:`), so a resume plans the same
keys whatever the host says that day."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Union, get_args

from ..common.protocol import Final, Status
from ..errors import HarnessError
from ..experiments.config import Arch, HostConfig

AskStatus = Callable[[str, HostConfig], Final]  # `runner.host_status`
Answer = Union[int, str]  # a GPU count, or why the host could not say


@dataclass(frozen=True)
class CountedHosts:
    usable: dict[str, HostConfig]  # every one with its GPU count
    unusable: dict[str, str] = field(default_factory=dict)  # host → why it could not be asked
    asked: dict[str, int] = field(default_factory=dict)  # the counts that came from the hosts
    learned_arch: dict[str, str] = field(default_factory=dict)  # host without `arch:` → the arch its GPUs report


def answer_from_status(status: Final) -> Answer:
    """Pure: the GPU count in a `harness status` report, or why the report has none."""
    if status.status != Status.OK:
        return f"its agent could not look at the host: {status.error or status.status}"
    repo = status.repo_status
    if repo is None or not repo.git:
        return f"{repo.repo if repo else None} is not a git checkout on the host (check `repo:`)"
    gpus = repo.gpus
    if gpus is None:
        return ("nvidia-smi is missing or failed on the host (not on the PATH of the host's environment?); "
                "give the host `gpus:` in the hosts file to say how many it has")
    return len(gpus)


def arch_from_status(status: Final) -> Optional[str]:
    """Pure: the GPU arch a `harness status` report shows ("9.0" → sm90), or None when it cannot tell (no
    GPUs, no or odd compute capability, GPUs of more than one arch, an arch the harness does not know)."""
    gpus = status.repo_status.gpus if status.repo_status is not None else None
    if not gpus:
        return None
    archs = set()
    for g in gpus:
        major, _, minor = g.compute_cap.strip().partition(".")
        if not (major.isdigit() and minor.isdigit() and len(minor) == 1):
            return None
        archs.add(f"sm{int(major)}{minor}")
    arch = archs.pop() if len(archs) == 1 else None
    return arch if arch in get_args(Arch) else None


def apply_answers(hosts: Mapping[str, HostConfig], answers: Mapping[str, Answer],
                  archs: Mapping[str, Optional[str]] | None = None) -> CountedHosts:
    """Pure: the hosts with their GPU counts (hosts with `gpus:` keep it) and, for hosts without `arch:`, the
    arch learned from the answers filled in."""
    usable: dict[str, HostConfig] = {}
    unusable: dict[str, str] = {}
    asked: dict[str, int] = {}
    learned: dict[str, str] = {}
    for name, host in hosts.items():
        answer = answers.get(name, host.gpus) if host.gpus is None else host.gpus
        if isinstance(answer, int):
            update: dict[str, Any] = {} if host.gpus is not None else {"gpus": answer}
            arch = (archs or {}).get(name) if host.arch is None else None
            if arch is not None:
                update["arch"] = learned[name] = arch
            usable[name] = host.model_copy(update=update) if update else host
            if host.gpus is None:
                asked[name] = answer
        else:
            unusable[name] = f"could not ask how many GPUs it has: {answer}"
    return CountedHosts(usable, unusable, asked, learned)


def count_gpus(hosts: Mapping[str, HostConfig], ask: AskStatus) -> CountedHosts:
    """Ask every host without `gpus:` or `arch:` (all at once: an unreachable one costs its connect timeout,
    not more)."""
    to_ask = [name for name, host in hosts.items() if host.gpus is None or host.arch is None]
    if not to_ask:
        return apply_answers(hosts, {})
    with ThreadPoolExecutor(max_workers=len(to_ask), thread_name_prefix="ask-gpus") as pool:
        got = dict(zip(to_ask, pool.map(lambda n: probe_host(ask, n, hosts[n]), to_ask)))
    return apply_answers(hosts, {n: a for n, (a, _) in got.items()}, {n: arch for n, (_, arch) in got.items()})


def probe_host(ask: AskStatus, name: str, host: HostConfig) -> tuple[Answer, Optional[str]]:
    """The host's GPU count (or why it gave none) and the arch its GPUs report (None: cannot tell)."""
    try:
        status = ask(name, host)
    except HarnessError as exc:  # unreachable, agent died: the host is unusable for this sweep, not the sweep
        return exc.message, None
    return answer_from_status(status), arch_from_status(status)


def ask_host(ask: AskStatus, name: str, host: HostConfig) -> Answer:
    """The host's answer, or why it gave none (also the sweep's re-probe of a down host)."""
    return probe_host(ask, name, host)[0]
