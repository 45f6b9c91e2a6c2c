"""Configuration errors name the file, the line and a fix; good files load into frozen models."""

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.experiments.files import read_experiment_file, read_inventory_file


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_experiment_loads_with_defaults_and_name_from_file(tmp_path):
    f = write(tmp_path, "stock.yaml", "model:\n  path: /models/glm\nserver:\n  tp: 8\n  kv_cache_dtype: fp8_e4m3\n")
    exp = read_experiment_file(f).experiment
    assert exp.name == "stock"
    assert exp.server.tp == 8 and exp.server.port == 30000
    assert exp.gpus_needed == 8
    with pytest.raises(ValueError):
        exp.name = "other"  # frozen (pydantic's ValidationError is a ValueError)


def test_misspelt_key_names_line_and_closest_key(tmp_path):
    f = write(tmp_path, "e.yaml", "model:\n  path: /m\nserver:\n  tp: 8\n  kv_cache_dtyp: fp8_e4m3\n")
    with pytest.raises(ConfigError) as ei:
        read_experiment_file(f)
    msg = str(ei.value)
    assert f"{f}:5:" in msg
    assert "'kv_cache_dtyp'" in msg and "did you mean 'kv_cache_dtype'" in msg
    assert ei.value.exit_code == 2


def test_misspelt_key_inside_list_item(tmp_path):
    f = write(tmp_path, "e.yaml", "model: {path: /m}\nbench:\n  - name: a\n    num_promts: 3\n")
    with pytest.raises(ConfigError) as ei:
        read_experiment_file(f)
    assert ":4:" in str(ei.value) and "did you mean 'num_prompts'" in str(ei.value)


def test_all_problems_reported_with_their_lines(tmp_path):
    f = write(tmp_path, "e.yaml", "model: {path: /m}\nserver:\n  tpp: 2\ntimeouts:\n  ready: -1\n")
    msg = str(pytest.raises(ConfigError, read_experiment_file, f).value)
    assert ":3:" in msg and "line 5" in msg and "greater than 0" in msg


def test_malformed_yaml_names_line(tmp_path):
    f = write(tmp_path, "e.yaml", "model:\n  path: /m\n server: [\n")
    err = pytest.raises(ConfigError, read_experiment_file, f).value
    assert err.line is not None and err.line >= 2
    assert "invalid YAML" in str(err)


def test_duplicate_key_is_an_error(tmp_path):
    f = write(tmp_path, "e.yaml", "model: {path: /m}\nrepeats: 1\nrepeats: 2\n")
    err = pytest.raises(ConfigError, read_experiment_file, f).value
    assert err.line == 3 and "duplicate key 'repeats'" in str(err)


def test_missing_required_key(tmp_path):
    f = write(tmp_path, "e.yaml", "server: {tp: 1}\n")
    assert "missing required key 'model'" in str(pytest.raises(ConfigError, read_experiment_file, f).value)


def test_not_a_mapping(tmp_path):
    f = write(tmp_path, "e.yaml", "- a\n- b\n")
    assert "expected a mapping" in str(pytest.raises(ConfigError, read_experiment_file, f).value)


@pytest.mark.parametrize("name", ["../escape", "/abs", "a b", "", ".hidden"])
def test_unsafe_experiment_names_rejected(tmp_path, name):
    f = write(tmp_path, "e.yaml", f"name: {name!r}\nmodel: {{path: /m}}\n")
    with pytest.raises(ConfigError) as ei:
        read_experiment_file(f)
    assert ":1:" in str(ei.value)


def test_env_names_validated(tmp_path):
    f = write(tmp_path, "e.yaml", "model: {path: /m}\nserver:\n  env:\n    'A;B': x\n")
    assert "env" in str(pytest.raises(ConfigError, read_experiment_file, f).value)


def test_missing_file(tmp_path):
    err = pytest.raises(ConfigError, read_experiment_file, tmp_path / "nope.yaml").value
    assert "file not found" in str(err)


def test_inventory_contract(tmp_path):
    f = write(tmp_path, "hosts.yaml", """
hosts:
  gpu-box:
    address: gpu-box.example.internal
    port: 22
    user: root
    key: ~/.ssh/id_ed25519
    known_hosts: ~/.ssh/known_hosts
    accept_new_host_key: false
    repo: /root/sglang
    python: /root/sglang/.venv/bin/python
    gpus: 8
    arch: sm120
""")
    inv = read_inventory_file(f).inventory
    h = inv.hosts["gpu-box"]
    assert h.gpus == 8 and h.arch == "sm120" and not h.is_local and h.port == 22


def test_inventory_unknown_key_and_bad_arch(tmp_path):
    f = write(tmp_path, "hosts.yaml", "hosts:\n  a:\n    address: local\n    repo: /r\n    arch: sm91\n    gpu: 2\n")
    msg = str(pytest.raises(ConfigError, read_inventory_file, f).value)
    assert ":5:" in msg or ":6:" in msg
    assert "did you mean 'gpus'" in msg


def test_inventory_empty(tmp_path):
    f = write(tmp_path, "hosts.yaml", "hosts: {}\n")
    assert "no hosts" in str(pytest.raises(ConfigError, read_inventory_file, f).value)
