"""How many GPUs each sweep host has: the inventory's `gpus:` when given (that is how a user limits a host),
else what the host's nvidia-smi shows (within its CUDA_VISIBLE_DEVICES) — asked once, before a sweep
schedules anything. A host that cannot be asked is not used by the sweep: its attempts are left for a resume.

Attempt keys do not depend on the answer (they use the configured `gpus:`), so a resume plans the same
keys whatever the host says that day."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Union

from .config import HostConfig
from .errors import HarnessError
from .protocol import Status

AskStatus = Callable[[str, HostConfig], Mapping[str, Any]]
Answer = Union[int, str]  # a GPU count, or why the host could not say


@dataclass(frozen=True)
class CountedHosts:
    usable: dict[str, HostConfig]  # every one with its GPU count
    unusable: dict[str, str] = field(default_factory=dict)  # host → why it could not be asked
    asked: dict[str, int] = field(default_factory=dict)  # the counts that came from the hosts


def answer_from_status(status: Mapping[str, Any]) -> Answer:
    """Pure: the GPU count in a `harness status` report, or why the report has none."""
    if status.get("status") not in (None, Status.OK, Status.OK.value):
        return f"its agent could not look at the host: {status.get('error') or status.get('status')}"
    if "gpus" not in status:
        return f"{status.get('repo')} is not a git checkout on the host (check `repo:`)"
    gpus = status["gpus"]
    if not isinstance(gpus, list):
        return ("nvidia-smi is missing or failed on the host (not on the PATH of the host's environment?); "
                "give the host `gpus:` in the hosts file to say how many it has")
    return len(gpus)


def apply_answers(hosts: Mapping[str, HostConfig], answers: Mapping[str, Answer]) -> CountedHosts:
    """Pure: the hosts with their GPU counts filled in from the answers (hosts with `gpus:` keep it)."""
    usable: dict[str, HostConfig] = {}
    unusable: dict[str, str] = {}
    asked: dict[str, int] = {}
    for name, host in hosts.items():
        answer = answers.get(name, host.gpus)
        if isinstance(answer, int):
            usable[name] = host if host.gpus is not None else host.model_copy(update={"gpus": answer})
            if host.gpus is None:
                asked[name] = answer
        else:
            unusable[name] = f"could not ask how many GPUs it has: {answer}"
    return CountedHosts(usable, unusable, asked)


def count_gpus(hosts: Mapping[str, HostConfig], ask: AskStatus) -> CountedHosts:
    """Ask every host without `gpus:` (all at once: an unreachable one costs its connect timeout, not more)."""
    to_ask = [name for name, host in hosts.items() if host.gpus is None]
    if not to_ask:
        return apply_answers(hosts, {})
    with ThreadPoolExecutor(max_workers=len(to_ask), thread_name_prefix="ask-gpus") as pool:
        answers = dict(zip(to_ask, pool.map(lambda n: ask_host(ask, n, hosts[n]), to_ask)))
    return apply_answers(hosts, answers)


def ask_host(ask: AskStatus, name: str, host: HostConfig) -> Answer:
    """The host's answer, or why it gave none (also the sweep's re-probe of a down host)."""
    try:
        return answer_from_status(ask(name, host))
    except HarnessError as exc:  # unreachable, agent died: the host is unusable for this sweep, not the sweep
        return exc.message
