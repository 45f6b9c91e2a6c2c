"""Configuration files read once: a command reads each file it is given (a sweep, an experiment, the host
inventory) here, at the door, and passes the result inward. Each keeps its YAML document beside the model:
its lines, for errors that name `file:line` later (an unknown backend, a matrix axis that does not fit), and
its path, for what is relative to it and for provenance — never to read the file again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import (
    Experiment,
    HostConfig,
    Inventory,
    Sweep,
    experiment_from_data,
    inventory_from_doc,
    sweep_from_doc,
)
from .yamlsrc import YamlDoc, load_yaml


@dataclass(frozen=True)
class _ReadFile:
    """What every file read at the door keeps: its YAML document (lines for errors, the path as given)."""

    doc: YamlDoc

    @property
    def path(self) -> Path:
        """As it was given (a sweep's experiment files are relative to it)."""
        return self.doc.file


@dataclass(frozen=True)
class SweepFile(_ReadFile):
    sweep: Sweep


@dataclass(frozen=True)
class ExperimentFile(_ReadFile):
    """An experiment and the YAML it came from: a matrix's experiments share their base's."""

    experiment: Experiment


@dataclass(frozen=True)
class InventoryFile(_ReadFile):
    inventory: Inventory

    @property
    def hosts(self) -> dict[str, HostConfig]:
        """Every target by name (a cluster's too)."""
        return self.inventory.hosts


def read_sweep_file(path: Path) -> SweepFile:
    return _sweep(load_yaml(path))


def read_experiment_file(path: Path) -> ExperimentFile:
    return _experiment(load_yaml(path))


def read_inventory_file(path: Path) -> InventoryFile:
    return _inventory(load_yaml(path))


def read_any_file(path: Path) -> SweepFile | ExperimentFile | InventoryFile:
    """A file of any kind (`harness validate`): a host inventory, a sweep or an experiment, told apart by its
    top-level keys, read once."""
    doc = load_yaml(path)
    if isinstance(doc.data, dict):
        if "hosts" in doc.data:
            return _inventory(doc)
        if {"matrix", "base", "experiments", "rounds"} & set(doc.data):
            return _sweep(doc)
    return _experiment(doc)


def kind_of(read: SweepFile | ExperimentFile | InventoryFile) -> str:
    """'hosts', 'sweep' or 'experiment'."""
    return "hosts" if isinstance(read, InventoryFile) else "sweep" if isinstance(read, SweepFile) else "experiment"


def _sweep(doc: YamlDoc) -> SweepFile:
    return SweepFile(doc, sweep=sweep_from_doc(doc))


def _experiment(doc: YamlDoc) -> ExperimentFile:
    return ExperimentFile(doc, experiment=experiment_from_data(doc.data, doc, default_name=doc.file.stem))


def _inventory(doc: YamlDoc) -> InventoryFile:
    return InventoryFile(doc, inventory=inventory_from_doc(doc))
