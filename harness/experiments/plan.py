"""Planning a sweep: expand the matrix, resolve every experiment, key each attempt by content, and
order the attempts interleaved (A B C A B C) — before anything runs, so `--dry-run` shows exactly
what will happen and `--resume` can tell done work from stale work."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from .config import Budget, Experiment, HostConfig, Sweep
from .files import ExperimentFile, SweepFile, read_experiment_file
from .resolve import Resolved, resolve
from .yamlsrc import YamlDoc


@dataclass(frozen=True)
class PlannedAttempt:
    key: str
    resolved: Resolved
    round: int  # 1-based
    order: int  # position in the interleaved order
    arch: str | None = None  # pinned to hosts of this GPU arch (the baseline, once per kind of GPU)

    @property
    def name(self) -> str:
        return self.resolved.name


@dataclass(frozen=True)
class Plan:
    name: str
    file: Path
    attempts: tuple[PlannedAttempt, ...]
    baseline: str | None
    budget: Budget
    hosts: tuple[str, ...]
    # What the keys were made from: the planned hosts' signature and GPU archs (a resume over other hosts
    # keys with the run's own, so finished work keeps its keys)
    key_signature: str = ""
    key_archs: tuple[str, ...] = ()

    @property
    def experiments(self) -> list[str]:
        return list(dict.fromkeys(a.name for a in self.attempts))


def host_signature(hosts: dict[str, HostConfig]) -> str:
    """What identifies the machines an attempt may run on; part of every attempt's key."""
    return json.dumps(sorted([name, h.address, h.port, h.repo, h.arch, h.gpus] for name, h in hosts.items()))


def _key_fields(exp: Experiment) -> dict[str, Any]:
    """The experiment as its key sees it. A bench case's `repeats` (and `answers`, `bench_clients`) came after
    keys were first made: left out while unset (default), so a sweep begun with an older harness still resumes
    with its old keys."""
    data = exp.model_dump(mode="json")
    for case in data["bench"]:
        if case.get("repeats") is None:
            case.pop("repeats", None)
        if case.get("warmup") is True:  # the warm-up pass (issue 36), when it is the default
            case.pop("warmup", None)
        if case.get("prefix_cache") == "cold":  # what each repeat meets in the cache (issue 43), likewise
            case.pop("prefix_cache", None)
    if data.get("answers") is None:  # likewise the answer check
        data.pop("answers", None)
    elif data["answers"].get("spread_bar") == 1.75:  # and its spread rule's bar (issue 44), when it is the default
        data["answers"].pop("spread_bar", None)
    if data.get("bench_clients") == "one-process":  # and how the clients run, when it is the default
        data.pop("bench_clients", None)
    if data.get("cooldown") is None:  # and the cool-down, when there is none
        data.pop("cooldown", None)
    return data


def content_key(r: Resolved, round_no: int, hosts_sig: str) -> str:
    """Same experiment, same patch contents, same hosts, same round → same key. Edit a patch and the
    key changes, so a resumed sweep never reuses a result made with the old patch."""
    h = hashlib.sha256()
    h.update(json.dumps(_key_fields(r.experiment), sort_keys=True).encode())
    for s in r.patch_sets:
        h.update(f"\0{s.name}\0{s.sha256}".encode())
    h.update(f"\0round={round_no}\0hosts={hosts_sig}".encode())
    return h.hexdigest()[:20]


def plan_sweep(source: SweepFile, patches_dir: Path, hosts: dict[str, HostConfig],
               keyed_on: tuple[str, tuple[str, ...]] | None = None) -> Plan:
    """The sweep's attempts, keyed from `hosts` — or, on a resume, from `keyed_on` (the run's own host signature
    and archs, from its run.json), so the keys do not change with the hosts it resumes on. The experiment files
    it names are read here, once each."""
    sweep, doc, file = source.sweep, source.doc, source.path
    experiments = expand(sweep, doc, file)
    resolved = [resolve(e.experiment, e.path, patches_dir, doc=e.doc) for e in experiments]
    names = [r.name for r in resolved]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"the sweep yields experiments with the same name: {', '.join(dupes)}", file=file,
                          hint="give the listed experiment files distinct `name:`s")
    if sweep.baseline is not None and sweep.baseline not in names:
        raise ConfigError(f"baseline {sweep.baseline!r} is not one of the sweep's experiments", file=file,
                          line=doc.line_of(("baseline",)), hint="experiments: " + ", ".join(names))
    sig, archs = keyed_on if keyed_on is not None else key_basis(hosts)
    # On a mixed fleet a ratio means something only against the baseline measured on the same kind of
    # GPU: the baseline runs once per GPU arch the hosts have.
    attempts: list[PlannedAttempt] = []
    for rnd, r in interleave(resolved, sweep.rounds):
        pins = archs if (r.name == sweep.baseline and len(archs) > 1) else [None]
        for pin in pins:
            key = content_key(r, rnd, sig + (f"\0arch={pin}" if pin else ""))
            attempts.append(PlannedAttempt(key, r, rnd, len(attempts), pin))
    return Plan(sweep.name, file, tuple(attempts), sweep.baseline, sweep.budget, sweep.hosts, sig, tuple(archs))


def key_basis(hosts: dict[str, HostConfig]) -> tuple[str, tuple[str, ...]]:
    """What a plan's keys are made from: the hosts' signature and their (configured) GPU archs."""
    return host_signature(hosts), tuple(sorted({h.arch for h in hosts.values() if h.arch}))


def interleave(items: list[Any], rounds: int) -> list[tuple[int, Any]]:
    """A B C A B C, not A A B B C C: slow drift on the box (thermals, other jobs) hits every item alike."""
    return [(rnd, item) for rnd in range(1, rounds + 1) for item in items]


def expand(sweep: Sweep, doc: YamlDoc, file: Path) -> list[ExperimentFile]:
    out: list[ExperimentFile] = []
    for i, rel in enumerate(sweep.experiments):
        path = (file.parent / rel).resolve()
        if not path.is_file():
            raise ConfigError(f"experiment file {rel!r} not found", file=file, line=doc.line_of(("experiments", i)))
        out.append(read_experiment_file(path))
    if sweep.base is None:
        return out
    base_file = (file.parent / sweep.base).resolve()
    if not base_file.is_file():
        raise ConfigError(f"base experiment {sweep.base!r} not found", file=file, line=doc.line_of(("base",)))
    base_read = read_experiment_file(base_file)  # the base itself is valid
    base_doc = base_read.doc
    axes = list(sweep.matrix.items())
    if not axes:
        return out + [base_read]
    for combo in itertools.product(*(values for _, values in axes)):
        data = copy.deepcopy(base_doc.data)
        for (axis, _), value in zip(axes, combo):
            _set_path(data, axis, value, file, doc)
        data["name"] = _combo_name(sweep.name, combo)
        try:
            # its errors: the base's lines
            out.append(ExperimentFile(base_doc, experiment=Experiment.model_validate(data)))
        except ValidationError as exc:
            raise _axis_error(exc, axes, combo, file, doc) from None
    return out


def _combo_name(sweep_name: str, combo: tuple[Any, ...]) -> str:
    return "-".join([sweep_name] + [_slug(v) for v in combo])[:128]


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(value)).strip("_") or "_"


def _set_path(data: dict[str, Any], axis: str, value: Any, file: Path, doc: YamlDoc) -> None:
    parts = axis.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"matrix axis {axis!r}: {part!r} is not a mapping in the base experiment", file=file,
                              line=doc.line_of(("matrix", axis)))
        node = child
    node[parts[-1]] = value


def _axis_error(exc: ValidationError, axes: list[tuple[str, tuple[Any, ...]]], combo: tuple[Any, ...], file: Path,
                doc: YamlDoc) -> ConfigError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    culprit = next(((axis, v) for (axis, _), v in zip(axes, combo) if loc == axis or loc.startswith(axis + ".")
                    or axis.startswith(loc + ".") or loc.startswith(axis)), None)
    if culprit is None:
        culprit = (axes[0][0], combo[0])
    axis, value = culprit
    values = dict(axes)[axis]
    idx = list(values).index(value) if value in values else None
    line = doc.line_of(("matrix", axis, idx) if idx is not None else ("matrix", axis))
    hint = None
    if err["type"] == "extra_forbidden":
        hint = "the axis names a field experiments do not have"
    return ConfigError(f"matrix axis {axis!r} value {value!r}: {loc or '(top level)'}: {err['msg']}", file=file,
                       line=line, hint=hint)
