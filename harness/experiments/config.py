"""Configuration: YAML files → frozen, validated models.

Three kinds of file: an experiment (`experiments/**.yaml`), the host inventory (`hosts.yaml`) and the
optional `patchset.yaml` inside a patch set folder. Unknown keys are rejected; every error names the
file and line and, for a misspelt key, the closest valid one.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from .basecfg import Finite as Finite
from .basecfg import Name as Name
from .basecfg import Strict as Strict
from .benchcfg import AnswersSettings as AnswersSettings
from .benchcfg import BenchCase as BenchCase
from .benchcfg import CooldownSettings as CooldownSettings
from .benchcfg import ProfileSettings as ProfileSettings
from .benchcfg import Timeouts as Timeouts
from .configerrors import SAFE_NAME, config_error
from .yamlsrc import YamlDoc

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

EnvMap = dict[Annotated[str, Field(pattern=ENV_NAME)], str]
# GPU architectures as SGLang's hosts report them (compute capability 9.0 → sm90); the one list of them.
Arch = Literal["sm80", "sm86", "sm89", "sm90", "sm100", "sm103", "sm110", "sm120", "sm121"]


# --------------------------------------------------------------------------- hosts.yaml


class SSHSettings(Strict):
    """How to reach a machine: a host's, and a cluster's login node's."""

    address: str = Field(min_length=1, description="DNS name, IP, ~/.ssh/config alias, or 'local' (hosts only)")
    port: int | None = Field(None, ge=1, le=65535)
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    ssh_config: str | None = None
    connect_timeout: float = Field(10.0, gt=0)
    keepalive: float = Field(5.0, gt=0, description="seconds between SSH keepalives")


RETRY_AFTER_S = 30.0  # an infrastructure failure (a lost link, a killed agent) keeps its host idle this long


class HostConfig(SSHSettings):
    heartbeat_timeout: float = Field(20.0, ge=2, description="seconds of controller silence after which the "
                                     "agent stops the server and reverts by itself")
    repo: str = Field(min_length=1)
    python: str = "python3"
    gpus: int | None = Field(None, ge=0, description="GPUs the harness may use; absent: as many as nvidia-smi on "
                             "the host shows (within the host's CUDA_VISIBLE_DEVICES)")
    arch: Arch | None = None
    workdir: str = "~/.cache/harness"
    allow_dirty: tuple[str, ...] = ()
    env: EnvMap = {}
    retry_after: float = Field(RETRY_AFTER_S, ge=0, le=3600, description="seconds a sweep gives this host no "
                               "attempt after an infrastructure failure there (the attempt may retry elsewhere)")

    @property
    def is_local(self) -> bool:
        return self.address == "local"


# A Slurm time limit as sbatch takes it: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS.
SLURM_TIME = r"^(?:\d+-)?\d+(?::\d{1,2}){0,2}$"


class LoginConfig(SSHSettings):
    """The SSH side of a cluster's login node (the same keys as a host's)."""

    python: str = Field("python3", description="a Python 3.8+ on the login node (reads the job files)")


class ClusterConfig(Strict):
    """A Slurm cluster: each attempt is one batch job running the agent on the node Slurm picks."""

    kind: Literal["slurm"]
    login: str | LoginConfig | None = Field(None, description="SSH destination of a login node; absent: "
                                                                "run Slurm's commands on this machine")
    partition: str | None = None
    account: str | None = None
    gpus_per_node: int = Field(8, ge=1)
    exclusive: bool = Field(True, description="whole nodes (sbatch --exclusive): no other job shares the GPUs")
    time: str | None = Field(None, pattern=SLURM_TIME, description="job time limit when the sweep sets no "
                             "attempt budget (sbatch --time); default: from the experiment's timeouts")
    workdir: str = Field(min_length=1, description="a folder on storage the nodes and the login node share")
    python: str = "python3"
    repo: str = Field(min_length=1, description="the SGLang checkout as the nodes see it")
    sbatch_extra: tuple[str, ...] = Field((), description="more sbatch arguments, one word each")
    max_jobs: int = Field(2, ge=1, description="jobs this harness keeps in the queue at once")
    arch: Arch | None = None
    env: EnvMap = {}
    allow_dirty: tuple[str, ...] = ()
    poll: float = Field(1.0, gt=0, le=60, description="seconds between looks at the queue and the job's files")
    login_timeout: float = Field(600.0, gt=0, description="how long the login node may stay unreachable "
                                 "before the attempt is given up (the job itself runs on)")
    storage_lag: float = Field(15.0, ge=0, le=600, description="seconds a job's last files may take to appear "
                               "on the shared storage after it ended (NFS attribute caching): a job that ended "
                               "without its final report is judged only after this")
    retry_after: float = Field(RETRY_AFTER_S, ge=0, le=3600, description="seconds a sweep submits no attempt here "
                               "after an infrastructure failure (a job that died, a login node that failed)")

    @property
    def login_host(self) -> HostConfig:
        """The login node as a host the transports know (local when `login` is absent)."""
        if self.login is None:
            return HostConfig(address="local", repo=self.repo, python=self.python, workdir=self.workdir)
        login = LoginConfig(address=self.login) if isinstance(self.login, str) else self.login
        return HostConfig(**login.model_dump(), repo=self.repo, workdir=self.workdir)


class ClusterHost(HostConfig):
    """A cluster as the scheduler sees it: a host whose attempts run as Slurm jobs, `max_jobs` at a time."""

    cluster: ClusterConfig
    cluster_name: str

    @classmethod
    def of(cls, name: str, c: ClusterConfig) -> ClusterHost:
        return cls(address=f"slurm:{name}", repo=c.repo, python=c.python, workdir=c.workdir, gpus=c.gpus_per_node,
                   arch=c.arch, env=c.env, allow_dirty=c.allow_dirty, retry_after=c.retry_after, cluster=c,
                   cluster_name=name)


class Inventory(Strict):
    """hosts.yaml: SSH hosts under `hosts:`, Slurm clusters under `cluster:`; both are targets by name, so
    a cluster's entry appears in `hosts` too (as a `ClusterHost`)."""

    hosts: dict[Annotated[str, Field(pattern=SAFE_NAME)], HostConfig] = {}
    cluster: dict[Annotated[str, Field(pattern=SAFE_NAME)], ClusterConfig] = {}

    @model_validator(mode="after")
    def _targets(self) -> Inventory:
        if not self.hosts and not self.cluster:
            raise ValueError("lists no hosts (and no cluster)")
        both = sorted(set(self.hosts) & set(self.cluster))
        if both:
            raise ValueError(f"a name is both a host and a cluster: {', '.join(both)}")
        merged = dict(self.hosts)
        merged.update({name: ClusterHost.of(name, c) for name, c in self.cluster.items()})
        object.__setattr__(self, "hosts", merged)  # frozen: set once, here
        return self


# --------------------------------------------------------------------------- experiments


class ModelSettings(Strict):
    path: str = Field(min_length=1)
    tokenizer: str | None = None
    served_name: str | None = None


class ServerSettings(Strict):
    @field_validator("port")
    @classmethod
    def _port_range(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= 65535:
            raise ValueError("a port is between 1 and 65535 (or 'auto')")
        return v

    host: str = "127.0.0.1"
    port: int | Literal["auto"] = Field(30000, description="a port, or 'auto': a free one picked on the host")
    tp: int = Field(1, ge=1)
    dp: int | None = Field(None, ge=1)
    kv_cache_dtype: str | None = None
    mem_fraction_static: float | None = Field(None, gt=0, le=1)
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    page_size: int | None = Field(None, ge=1)
    context_length: int | None = Field(None, ge=1)
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = Field(None, ge=1)
    disable_cuda_graph: bool = False
    trust_remote_code: bool = False
    attention_backend: str | None = None
    extra_args: tuple[str, ...] = ()
    env: EnvMap = {}



class Experiment(Strict):
    name: Name
    description: str = ""
    backend: str | None = None
    patches: tuple[Name, ...] = ()
    # Per backend, patch sets to use instead of the registry's (e.g. a simulated target's own versions).
    backend_patches: dict[str, tuple[Name, ...]] = {}
    model: ModelSettings
    server: ServerSettings = ServerSettings()
    bench: tuple[BenchCase, ...] = ()
    repeats: int = Field(1, ge=1, description="runs of each bench case per attempt")
    timeouts: Timeouts = Timeouts()
    expect: Literal["ok", "crash", "hang"] = "ok"
    base_ref: str | None = None
    gpus: int | None = Field(None, ge=0)
    allow_dirty: tuple[str, ...] = ()
    profile: ProfileSettings | None = None
    answers: AnswersSettings | None = None
    bench_clients: Literal["one-process", "per-run"] = Field(
        "one-process", description="how the bench cases' clients run: all in one process of the host's Python "
        "(their imports paid once), or a process per run (each case and repeat)")
    cooldown: CooldownSettings | None = Field(None, description="a wait between runs (runs them a process each)")

    @model_validator(mode="after")
    def _profile_case(self) -> Experiment:
        if self.profile is not None:
            names = [c.name for c in self.bench]
            if not names:
                raise ValueError("profile: needs at least one bench case to drive the load")
            if self.profile.case is not None and self.profile.case not in names:
                raise ValueError(f"profile.case {self.profile.case!r} is not a bench case ({', '.join(names)})")
        return self

    @field_validator("bench")
    @classmethod
    def _unique_cases(cls, v: tuple[BenchCase, ...]) -> tuple[BenchCase, ...]:
        names = [c.name for c in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"bench case names must be unique; repeated: {', '.join(dupes)}")
        return v

    @property
    def gpus_needed(self) -> int:
        return self.gpus if self.gpus is not None else self.server.tp * (self.server.dp or 1)


# --------------------------------------------------------------------------- sweeps


class Budget(Strict):
    attempt: float | None = Field(None, gt=0, description="seconds; an attempt running longer is stopped")
    sweep: float | None = Field(None, gt=0, description="seconds; no new attempt starts after this")


class Sweep(Strict):
    """A base experiment plus matrix axes, and/or a list of experiment files; run `rounds` times
    interleaved (A B C A B C) so drift on the box spreads evenly over the experiments."""

    name: Name
    description: str = ""
    base: str | None = Field(None, description="experiment file the matrix varies, relative to this file")
    matrix: dict[str, tuple[Any, ...]] = {}
    experiments: tuple[str, ...] = Field((), description="experiment files, relative to this file")
    rounds: int = Field(1, ge=1)
    baseline: str | None = None
    budget: Budget = Budget()
    hosts: tuple[Annotated[str, Field(pattern=SAFE_NAME)], ...] = ()

    @model_validator(mode="after")
    def _shape(self) -> Sweep:
        if self.matrix and not self.base:
            raise ValueError("a matrix needs a `base:` experiment to vary")
        if not self.base and not self.experiments:
            raise ValueError("a sweep needs `base:` (with an optional matrix) or `experiments:` (a list of files)")
        for axis, values in self.matrix.items():
            if not values:
                raise ValueError(f"matrix axis {axis!r} has no values")
        return self


def sweep_from_doc(doc: YamlDoc) -> Sweep:
    data = doc.data
    if isinstance(data, dict) and "name" not in data:
        data = {"name": doc.file.stem, **data}
    return validate_model(Sweep, data, doc, what="sweep")


# --------------------------------------------------------------------------- patchset.yaml


# --------------------------------------------------------------------------- loading


def experiment_from_data(data: Any, doc: YamlDoc, *, default_name: str) -> Experiment:
    if isinstance(data, dict) and "name" not in data:
        data = {"name": default_name, **data}
    return validate_model(Experiment, data, doc, what="experiment")


def inventory_from_doc(doc: YamlDoc) -> Inventory:
    return validate_model(Inventory, doc.data, doc, what="host inventory")


M = typing.TypeVar("M", bound=BaseModel)


def validate_model(model: type[M], data: Any, doc: YamlDoc, *, what: str) -> M:
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of keys for the {what}, got {type(data).__name__}",
                          file=doc.file, line=1)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise config_error(model, exc, doc) from None
