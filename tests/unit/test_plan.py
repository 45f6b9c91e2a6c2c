"""Planning sweeps (pure): matrix expansion, interleaving, content keys, errors that name axis and value."""

from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.experiments.config import HostConfig
from harness.experiments.files import read_sweep_file
from harness.experiments.plan import Plan, interleave, plan_sweep

PATCHES = Path(__file__).resolve().parents[2] / "patches"
HOSTS = {"a": HostConfig(address="local", repo="/r", arch="sm90", gpus=8),
         "b": HostConfig(address="local", repo="/s", arch="sm100", gpus=8)}


def plan_sweep_file(f: Path, patches: Path, hosts: dict[str, HostConfig]) -> Plan:
    """A sweep file read (once, as `harness sweep` does) and planned."""
    return plan_sweep(read_sweep_file(f), patches, hosts)


def write(tmp_path, name, doc):
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f


@pytest.fixture
def base(tmp_path):
    return write(tmp_path, "base.yaml", {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/m"},
                                         "server": {"tp": 2}})


def test_interleave_is_round_major():
    assert [(r, x) for r, x in interleave(["A", "B", "C"], 2)] == [(1, "A"), (1, "B"), (1, "C"), (2, "A"), (2, "B"),
                                                                  (2, "C")]


def test_matrix_expands_in_order_with_dotted_axes(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml",
                                   "matrix": {"backend": ["flashinfer-mla", "trtllm_mla"],
                                              "server.mem_fraction_static": [0.8, 0.9]}, "rounds": 2})
    plan = plan_sweep_file(f, PATCHES, {"a": HOSTS["a"]})
    names = [a.name for a in plan.attempts]
    assert names[:4] == ["s-flashinfer-mla-0.8", "s-flashinfer-mla-0.9", "s-trtllm_mla-0.8", "s-trtllm_mla-0.9"]
    assert names[4:] == names[:4] and [a.round for a in plan.attempts] == [1] * 4 + [2] * 4
    exp = plan.attempts[1].resolved.experiment
    assert exp.server.mem_fraction_static == 0.9 and exp.server.tp == 2  # the base's other settings kept
    assert len({a.key for a in plan.attempts}) == 8


def test_keys_are_stable_and_depend_on_hosts(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml", "matrix": {"backend": ["flashinfer-mla"]}})
    k1 = plan_sweep_file(f, PATCHES, {"a": HOSTS["a"]}).attempts[0].key
    assert plan_sweep_file(f, PATCHES, {"a": HOSTS["a"]}).attempts[0].key == k1
    assert plan_sweep_file(f, PATCHES, {"b": HOSTS["b"]}).attempts[0].key != k1


def test_keys_do_not_depend_on_the_order_of_a_mapping_in_the_experiment_file(tmp_path):
    # The same settings written in another order are the same experiment: a resume must find its results.
    def key(env):
        write(tmp_path, "base.yaml", {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/m"},
                                      "server": {"tp": 2, "env": env}})
        f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml"})
        return plan_sweep_file(f, PATCHES, {"a": HOSTS["a"]}).attempts[0].key

    assert key({"NCCL_DEBUG": "WARN", "CUDA_LAUNCH_BLOCKING": "1"}) == key({"CUDA_LAUNCH_BLOCKING": "1",
                                                                            "NCCL_DEBUG": "WARN"})
    assert key({"NCCL_DEBUG": "WARN", "CUDA_LAUNCH_BLOCKING": "1"}) != key({"NCCL_DEBUG": "INFO",
                                                                            "CUDA_LAUNCH_BLOCKING": "1"})


# ---------------------------------------------------------------------------- resume keys and patch contents
# `--resume` reruns an attempt only when its key has no final record: any change to what a patch set writes
# into the target must give a new key, or a result made with the old contents would be reused.


@pytest.fixture
def patched_sweep(tmp_path):
    """A one-attempt sweep whose experiment uses a patch set with a .patch file and a files/ tree."""
    ps = tmp_path / "patches" / "mine"
    (ps / "files" / "python" / "sglang" / "srt").mkdir(parents=True)
    (ps / "0001-x.patch").write_text("--- a/python/sglang/x.py\n+++ b/python/sglang/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n")
    (ps / "files" / "python" / "sglang" / "srt" / "new_kernel.py").write_text("SCALE = 1.0\n")
    (ps / "files" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (ps / "files" / "run.sh").chmod(0o644)
    write(tmp_path, "base.yaml", {"name": "base", "backend": "flashinfer-mla", "patches": ["mine"],
                                  "model": {"path": "/m"}})
    sweep = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml"})

    def key() -> str:
        (attempt,) = plan_sweep_file(sweep, tmp_path / "patches", {"a": HOSTS["a"]}).attempts
        return attempt.key

    return ps, key


def test_attempt_key_is_the_same_when_nothing_changed(patched_sweep):
    _, key = patched_sweep
    assert key() == key()


def test_attempt_key_changes_when_a_file_in_files_tree_changes_content(patched_sweep):
    ps, key = patched_sweep
    before = key()
    (ps / "files" / "python" / "sglang" / "srt" / "new_kernel.py").write_text("SCALE = 2.0\n")  # same size
    assert key() != before


def test_attempt_key_changes_when_a_file_in_files_tree_becomes_executable(patched_sweep):
    ps, key = patched_sweep
    before = key()
    (ps / "files" / "run.sh").chmod(0o755)
    assert key() != before
    (ps / "files" / "run.sh").chmod(0o644)
    assert key() == before  # the mode, and nothing else, made the difference


def test_attempt_key_changes_when_a_file_is_added_to_files_tree(patched_sweep):
    ps, key = patched_sweep
    before = key()
    (ps / "files" / "python" / "sglang" / "srt" / "extra.py").write_text("")
    assert key() != before


def test_attempt_key_changes_when_a_patch_file_changes(patched_sweep):
    ps, key = patched_sweep
    before = key()
    patch = ps / "0001-x.patch"
    patch.write_text(patch.read_text().replace("+a = 2", "+a = 3"))
    assert key() != before


def test_baseline_runs_once_per_gpu_arch_on_a_mixed_fleet(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml", "baseline": "s-flashinfer-mla",
                                   "matrix": {"backend": ["flashinfer-mla", "trtllm_mla"]}})
    plan = plan_sweep_file(f, PATCHES, HOSTS)
    assert [(a.name, a.arch) for a in plan.attempts] == [("s-flashinfer-mla", "sm100"), ("s-flashinfer-mla", "sm90"),
                                                         ("s-trtllm_mla", None)]


def test_axis_value_rejected_names_axis_value_and_line(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml",
                                   "matrix": {"server.mem_fraction_static": [0.8, 1.5]}})
    err = pytest.raises(ConfigError, plan_sweep_file, f, PATCHES, {}).value
    assert "matrix axis 'server.mem_fraction_static' value 1.5" in str(err)
    assert err.file == f and err.line == 6


def test_unknown_axis_field(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml", "matrix": {"server.kv_dtype": ["fp8_e4m3"]}})
    assert "matrix axis 'server.kv_dtype'" in str(pytest.raises(ConfigError, plan_sweep_file, f, PATCHES, {}).value)


def test_unknown_backend_in_matrix(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml", "matrix": {"backend": ["cutlass-mla"]}})
    assert "did you mean 'cutlass_mla'" in str(pytest.raises(ConfigError, plan_sweep_file, f, PATCHES, {}).value)


def test_list_form_missing_file_and_bad_baseline(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "experiments": ["base.yaml", "nope.yaml"]})
    err = pytest.raises(ConfigError, plan_sweep_file, f, PATCHES, {}).value
    assert "'nope.yaml' not found" in str(err) and err.line == 4
    f = write(tmp_path, "s.yaml", {"name": "s", "experiments": ["base.yaml"], "baseline": "other"})
    assert "baseline 'other'" in str(pytest.raises(ConfigError, plan_sweep_file, f, PATCHES, {}).value)


def test_sweep_shape_errors(tmp_path, base):
    f = write(tmp_path, "s.yaml", {"name": "s", "matrix": {"backend": ["flashinfer-mla"]}})
    assert "needs a `base:`" in str(pytest.raises(ConfigError, plan_sweep_file, f, PATCHES, {}).value)
    f = write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml", "rounds": 0})
    assert "rounds" in str(pytest.raises(ConfigError, plan_sweep_file, f, PATCHES, {}).value)


def test_shipped_sweeps_plan(tmp_path):
    root = Path(__file__).resolve().parents[2]
    plan = plan_sweep_file(root / "experiments" / "sim" / "all-backends.yaml", PATCHES, HOSTS)
    assert {a.resolved.backend_name for a in plan.attempts} >= {"flashinfer-mla", "flashinfer-mla-gather-cast",
                                                                 "cutlass_mla", "trtllm_mla", "custom-fp8-mla"}


def _bench_sweep(tmp_path, greedy_case: dict) -> Path:
    write(tmp_path, "base.yaml", {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/m"},
                                  "bench": [greedy_case, {"name": "bs1", "max_concurrency": 1}], "repeats": 3})
    return write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml"})


def test_a_case_without_its_own_repeats_keeps_the_key_the_harness_made_before_cases_had_them(tmp_path):
    # The key this sweep had at commit 5b80274, before a bench case could set `repeats`: a sweep begun with
    # that harness must still find its results when resumed with this one.
    f = _bench_sweep(tmp_path, {"name": "greedy", "num_prompts": 4})
    assert plan_sweep_file(f, PATCHES, {"a": HOSTS["a"]}).attempts[0].key == "70aa313f95436587f679"


def test_a_case_with_its_own_repeats_is_another_experiment(tmp_path):
    unset = plan_sweep_file(_bench_sweep(tmp_path, {"name": "greedy", "num_prompts": 4}), PATCHES, {"a": HOSTS["a"]})
    once = plan_sweep_file(_bench_sweep(tmp_path, {"name": "greedy", "num_prompts": 4, "repeats": 1}), PATCHES,
                      {"a": HOSTS["a"]})
    assert unset.attempts[0].key != once.attempts[0].key


def _top_level_sweep(tmp_path, **extra) -> Path:
    write(tmp_path, "base.yaml", {"name": "base", "backend": "flashinfer-mla", "model": {"path": "/m"},
                                  "bench": [{"name": "bs1", "max_concurrency": 1}], **extra})
    return write(tmp_path, "s.yaml", {"name": "s", "base": "base.yaml"})


def _key(f: Path) -> str:
    return plan_sweep_file(f, PATCHES, {"a": HOSTS["a"]}).attempts[0].key


def test_an_answer_check_or_a_client_mode_makes_another_experiment_and_the_defaults_do_not(tmp_path):
    plain = _key(_top_level_sweep(tmp_path))
    assert _key(_top_level_sweep(tmp_path, bench_clients="one-process")) == plain  # the default: the old key
    assert _key(_top_level_sweep(tmp_path, bench_clients="per-run")) != plain
    answers = _key(_top_level_sweep(tmp_path, answers={"prompts": 4}))
    assert answers != plain
    assert _key(_top_level_sweep(tmp_path, answers={"prompts": 8})) != answers


def test_the_prefix_cache_and_the_spread_bar_change_the_key_only_when_not_the_default(tmp_path):
    unset = _key(_bench_sweep(tmp_path, {"name": "c", "num_prompts": 4}))
    assert _key(_bench_sweep(tmp_path, {"name": "c", "num_prompts": 4, "prefix_cache": "cold"})) == unset
    assert _key(_bench_sweep(tmp_path, {"name": "c", "num_prompts": 4, "prefix_cache": "hit"})) != unset
    answers = _key(_top_level_sweep(tmp_path, answers={"prompts": 4}))
    assert _key(_top_level_sweep(tmp_path, answers={"prompts": 4, "spread_bar": 1.75})) == answers
    assert _key(_top_level_sweep(tmp_path, answers={"prompts": 4, "spread_bar": 2.0})) != answers


def test_the_key_leaves_out_each_setting_at_its_default_as_keys_made_before_it_did(tmp_path):
    """A key made before a setting existed hashed no such field: at its default the setting is left out of what
    the key hashes — checked on the fields themselves (two keys that both keep it would still agree)."""
    from harness.experiments.files import read_experiment_file
    from harness.experiments.plan import _key_fields

    f = write(tmp_path, "e.yaml", {"name": "e", "backend": "flashinfer-mla", "model": {"path": "/m"},
                                   "answers": {"prompts": 4, "spread_bar": 1.75},
                                   "bench": [{"name": "c", "num_prompts": 4, "prefix_cache": "cold"}]})
    fields = _key_fields(read_experiment_file(f).experiment)
    assert "spread_bar" not in fields["answers"] and fields["answers"]["prompts"] == 4
    assert not {"repeats", "warmup", "prefix_cache"} & set(fields["bench"][0])
    assert not {"bench_clients", "cooldown"} & set(fields)
    f = write(tmp_path, "e.yaml", {"name": "e", "backend": "flashinfer-mla", "model": {"path": "/m"},
                                   "answers": {"prompts": 4, "spread_bar": 2.0},
                                   "bench": [{"name": "c", "num_prompts": 4, "prefix_cache": "hit"}]})
    fields = _key_fields(read_experiment_file(f).experiment)
    assert fields["answers"]["spread_bar"] == 2.0 and fields["bench"][0]["prefix_cache"] == "hit"
