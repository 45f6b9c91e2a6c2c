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
class SweepFile:
    sweep: Sweep
    doc: YamlDoc

    @property
    def path(self) -> Path:
        """As it was given (its experiment files are relative to it)."""
        return self.doc.file


@dataclass(frozen=True)
class ExperimentFile:
    """An experiment and the YAML it came from: a matrix's experiments share their base's."""

    experiment: Experiment
    doc: YamlDoc

    @property
    def path(self) -> Path:
        return self.doc.file


@dataclass(frozen=True)
class InventoryFile:
    inventory: Inventory
    doc: YamlDoc

    @property
    def path(self) -> Path:
        return self.doc.file

    @property
    def hosts(self) -> dict[str, HostConfig]:
        """Every target by name (a cluster's too)."""
        return self.inventory.hosts


def read_sweep_file(path: Path) -> SweepFile:
    doc = load_yaml(path)
    return SweepFile(sweep_from_doc(doc), doc)


def read_experiment_file(path: Path) -> ExperimentFile:
    doc = load_yaml(path)
    return ExperimentFile(experiment_from_data(doc.data, doc, default_name=path.stem), doc)


def read_inventory_file(path: Path) -> InventoryFile:
    doc = load_yaml(path)
    return InventoryFile(inventory_from_doc(doc), doc)


def file_kind(file: Path) -> str:
    """'hosts', 'sweep' or 'experiment', from the top-level keys of a YAML file (a look for `harness validate`,
    which then reads the file as its kind)."""
    data = load_yaml(file).data
    if isinstance(data, dict):
        if "hosts" in data:
            return "hosts"
        if {"matrix", "base", "experiments", "rounds"} & set(data):
            return "sweep"
    return "experiment"
