"""YAML fuzzing: whatever is in an experiment, sweep or hosts file, the harness answers with a clean
ConfigError naming the file (and the line when there is one) — never a traceback."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError
from harness.experiments.config import Experiment, HostConfig, Inventory, Sweep
from harness.experiments.files import read_experiment_file, read_inventory_file, read_sweep_file
from harness.experiments.plan import plan_sweep

PATCHES = Path(__file__).resolve().parents[2] / "patches"
KEYS = sorted(set(Experiment.model_fields) | set(HostConfig.model_fields) | set(Sweep.model_fields)
              | {"tp", "port", "kv_cache_dtype", "path", "num_prompts", "ready", "backend", "matrix", "hosts"})

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.sampled_from(["auto", "flashinfer-mla", "fp8_e4m3", "sm90", "local", "../x", "$(id)", "~"]))
keys = st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=5)), max_leaves=25)
documents = st.one_of(st.dictionaries(keys, values, max_size=8), values)
raw_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)


def check(loader, text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "fuzz.yaml"
        f.write_text(text)
        try:
            loader(f)
        except ConfigError as exc:
            assert exc.file == f
            assert str(exc).startswith(str(f))


LOADERS = [read_experiment_file, read_inventory_file, lambda f: plan_sweep(read_sweep_file(f), PATCHES, {})]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents)
def test_structured_documents(doc):
    text = yaml.safe_dump(doc, allow_unicode=True)
    for loader in LOADERS:
        check(loader, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=raw_text)
def test_arbitrary_text(text):
    for loader in LOADERS:
        check(loader, text)


@settings(max_examples=100, deadline=None)
@given(host=st.dictionaries(st.sampled_from(sorted(HostConfig.model_fields)), values, max_size=6))
def test_host_entries(host):
    check(read_inventory_file, yaml.safe_dump({"hosts": {"box": host}}))


def test_models_are_frozen_after_load(tmp_path):
    f = tmp_path / "hosts.yaml"
    f.write_text("hosts:\n  a: {address: local, repo: /r}\n")
    assert isinstance(read_inventory_file(f).inventory, Inventory)
