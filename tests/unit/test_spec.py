"""Resolving experiments and building the attempt spec: argv lists only, patch contents inline."""

import io
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.experiments.config import HostConfig
from harness.experiments.files import read_experiment_file
from harness.experiments.resolve import resolve_file
from harness.experiments.spec import build_spec

DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "patches" / "p1").mkdir(parents=True)
    (tmp_path / "patches" / "p1" / "0001-x.patch").write_text(DIFF)
    (tmp_path / "patches" / "p1" / "files" / "pkg").mkdir(parents=True)
    (tmp_path / "patches" / "p1" / "files" / "pkg" / "new.py").write_text("print('new')\n")
    return tmp_path


def exp_file(project: Path, text: str) -> Path:
    f = project / "e.yaml"
    f.write_text(text)
    return f


HOST = HostConfig(address="local", repo="/r", python="/venv/bin/python", env={"HF_TOKEN": "s3cret"})


def test_backend_and_patches_resolve_into_spec(project):
    f = exp_file(project, "name: e\nbackend: flashinfer-mla\npatches: [p1]\nmodel: {path: '/m; rm -rf /'}\n"
                          "server: {tp: 8, kv_cache_dtype: fp8_e4m3, extra_args: ['--x', '$(touch y)']}\n"
                          "bench: [{name: c1, num_prompts: 2, max_concurrency: 1}]\n")
    r = resolve_file(f, project / "patches")
    spec = build_spec(r, HOST, run_id="r1", attempt_id="e-01")
    argv = spec.server.argv
    assert argv[:3] == ["/venv/bin/python", "-m", "sglang.launch_server"]
    # Strings from YAML stay single argv elements: nothing is ever parsed by a shell.
    assert "/m; rm -rf /" in argv and "$(touch y)" in argv
    assert argv[argv.index("--attention-backend") + 1] == "flashinfer"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
    assert [p.name for p in spec.patches] == ["0001-x.patch"]
    assert spec.files[0].path == "pkg/new.py"
    bench = spec.bench[0].argv
    assert bench[bench.index("--max-concurrency") + 1] == "1" and "--output-file" not in bench
    assert spec.server.env == {"HF_TOKEN": "s3cret"}


def test_unknown_backend_suggests(project):
    f = exp_file(project, "model: {path: /m}\nbackend: trtllm-mla\n")
    err = pytest.raises(ConfigError, resolve_file, f, project / "patches").value
    assert ":2:" in str(err) and "did you mean 'trtllm_mla'" in str(err)


def test_missing_patch_set_names_line_and_lists_available(project):
    f = exp_file(project, "model: {path: /m}\npatches:\n  - p1\n  - p2\n")
    err = pytest.raises(ConfigError, resolve_file, f, project / "patches").value
    assert ":4:" in str(err) and "'p2' not found" in str(err) and "p1" in str(err)


def test_backend_and_explicit_attention_backend_conflict(project):
    f = exp_file(project, "model: {path: /m}\nbackend: flashinfer-mla\nserver: {attention_backend: triton}\n")
    assert "not both" in str(pytest.raises(ConfigError, resolve_file, f, project / "patches").value)


def test_patch_set_hash_changes_with_content(project):
    from harness.experiments.patchsets import load_patch_set

    a = load_patch_set(project / "patches", "p1").sha256
    (project / "patches" / "p1" / "0001-x.patch").write_text(DIFF.replace("+b", "+c"))
    assert load_patch_set(project / "patches", "p1").sha256 != a


def test_non_diff_patch_rejected(project):
    from harness.experiments.patchsets import load_patch_set

    (project / "patches" / "p1" / "0002-bad.patch").write_text("just text\n")
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "p1").value
    assert "0002-bad.patch" in str(err) and "not a diff git can apply" in str(err)


def test_files_entry_below_a_file_the_diff_writes_is_refused_before_any_host(project):
    """files/x.py/inner.py where the set's diff writes x.py: no host could ever write it."""
    from harness.experiments.patchsets import load_patch_set

    (project / "patches" / "p1" / "files" / "x.py").mkdir()
    (project / "patches" / "p1" / "files" / "x.py" / "inner.py").write_text("print('never')\n")
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "p1").value
    assert "files/x.py/inner.py" in str(err) and "x.py a file" in str(err)
    assert str(project / "patches" / "p1" / "files" / "x.py" / "inner.py") in str(err)


def test_files_entry_below_a_file_the_diff_deletes_is_not_refused(project):
    """The diff deletes x.py: files/x.py/inner.py then makes x.py a folder, which a host can write."""
    from harness.experiments.patchsets import load_patch_set

    (project / "patches" / "p1" / "0002-rm.patch").write_text(
        "diff --git a/x.py b/x.py\ndeleted file mode 100644\nindex 1111111..0000000\n--- a/x.py\n+++ /dev/null\n"
        "@@ -1 +0,0 @@\n-print('x')\n")
    (project / "patches" / "p1" / "0001-x.patch").unlink()
    (project / "patches" / "p1" / "files" / "x.py").mkdir()
    (project / "patches" / "p1" / "files" / "x.py" / "inner.py").write_text("print('inner')\n")
    ps = load_patch_set(project / "patches", "p1")
    assert "x.py/inner.py" in {f.path for v in ps.variants for f in v.files}


@pytest.mark.parametrize("kind", ["link to a file", "link to a folder", "fifo"])
def test_files_entry_that_is_a_link_or_not_a_file_is_refused_naming_it(project, tmp_path, kind):
    """Skipped, it would silently apply less than the folder shows; followed, it reads any file of this
    machine into the host's tree."""
    from harness.experiments.patchsets import load_patch_set

    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "id_rsa").write_text("PRIVATE\n")
    entry = project / "patches" / "p1" / "files" / "pkg" / "extra"
    if kind == "fifo":
        os.mkfifo(entry)
    else:
        entry.symlink_to(secret / "id_rsa" if kind == "link to a file" else secret)
    err = pytest.raises(ConfigError, load_patch_set, project / "patches", "p1").value
    assert "files/pkg/extra is" in str(err) and str(entry) in str(err)
    assert ("symbolic link" if kind.startswith("link") else "not a regular file") in str(err)


def test_record_redacts_secret_env():
    from harness.masking import redact_env

    assert redact_env({"HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y", "NCCL_DEBUG": "INFO"}) == {
        "HF_TOKEN": "<redacted>", "AWS_SECRET_ACCESS_KEY": "<redacted>", "NCCL_DEBUG": "INFO"}


HOSTILE = ["a'b", 'say "hi"', "$(touch pwned)", "; rm -rf ~", "`id`", "x | y && z", "two\nlines", "*", "~", "",
           "--flag=$HOME", "\\"]


class _RecordingChannel:
    """Enough of a paramiko channel for SSHTransport.start(): it records the command line it is given."""

    def __init__(self):
        self.command = None

    def exec_command(self, command):
        self.command = command

    def makefile(self, mode):
        return io.BytesIO()

    makefile_stderr = makefile


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_ssh_transport_command_gives_the_remote_shell_back_each_argv_element_unchanged(shell):
    # sshd runs the command line through the user's shell; every argv element, hostile ones included,
    # must reach the program as exactly that one argument.
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    from harness.hosts.ssh import SSHTransport

    chan = _RecordingChannel()
    transport = SSHTransport.__new__(SSHTransport)  # no connection: only the command line is under test
    transport.name, transport.host = "box", HOST.model_copy(update={"python": sys.executable})
    transport._conn = types.SimpleNamespace(transport=types.SimpleNamespace(open_session=lambda: chan))
    echo_args = "import json, sys; print(json.dumps(sys.argv[1:]))"
    transport.start([sys.executable, "-c", echo_args, *HOSTILE])
    out = subprocess.run([shell, "-c", chan.command], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == HOSTILE


def test_yaml_strings_with_shell_metacharacters_reach_the_server_and_bench_argv_unchanged(project):
    import yaml

    f = exp_file(project, yaml.safe_dump({
        "name": "e", "backend": "flashinfer-mla", "model": {"path": "/m/" + HOSTILE[2], "served_name": HOSTILE[0]},
        "server": {"extra_args": HOSTILE, "env": {"X": HOSTILE[3]}},
        "bench": [{"name": "c1", "num_prompts": 2, "extra_args": HOSTILE}]}))
    spec = build_spec(resolve_file(f, project / "patches"), HOST, run_id="r1", attempt_id="e-01")
    spec = json.loads(json.dumps(spec.to_dict()))  # as the agent receives it, over its stdin
    argv = spec["server"]["argv"]
    assert argv[argv.index("--model-path") + 1] == "/m/$(touch pwned)"
    assert argv[argv.index("--served-model-name") + 1] == "a'b"
    assert argv[-len(HOSTILE):] == HOSTILE
    assert spec["server"]["env"]["X"] == "; rm -rf ~"
    assert spec["bench"][0]["argv"][-len(HOSTILE):] == HOSTILE


def test_a_case_runs_its_own_repeats_and_the_others_the_experiments(project):
    f = exp_file(project, "name: e\nbackend: flashinfer-mla\nmodel: {path: /m}\nrepeats: 4\n"
                          "bench: [{name: greedy, repeats: 1}, {name: bs1}]\n")
    spec = build_spec(resolve_file(f, project / "patches"), HOST, run_id="r1", attempt_id="e-01")
    assert [(c.name, c.repeats) for c in spec.bench] == [("greedy", 1), ("bs1", 4)]


def test_a_case_with_zero_repeats_is_refused_with_its_line(project):
    f = exp_file(project, "name: e\nmodel: {path: /m}\nbench:\n  - {name: greedy, repeats: 0}\n")
    with pytest.raises(ConfigError) as err:
        read_experiment_file(f)
    assert err.value.line == 4 and "repeats" in str(err.value)


def test_a_cases_warmup_is_one_wave_of_its_prompts_with_its_other_arguments_unchanged(project):
    f = exp_file(project, "name: e\nbackend: flashinfer-mla\nmodel: {path: /m}\nbench:\n"
                          "  - {name: c8, num_prompts: 64, max_concurrency: 8, extra_args: [--api-key=k1]}\n"
                          "  - {name: all-at-once, num_prompts: 5}\n"
                          "  - {name: few, num_prompts: 3, max_concurrency: 8}\n"
                          "  - {name: cold, num_prompts: 8, warmup: false}\n")
    spec = build_spec(resolve_file(f, project / "patches"), HOST, run_id="r1", attempt_id="e-01")

    def prompts(argv):
        return int(argv[argv.index("--num-prompts") + 1])

    waves = {c.name: prompts(c.warmup_argv) for c in spec.bench if c.warmup_argv is not None}
    assert waves == {"c8": 8, "all-at-once": 5, "few": 3}
    assert spec.bench[3].warmup_argv is None
    for c in spec.bench[:3]:  # only the prompt count differs (so the secrets on it are the case's own)
        at = c.argv.index("--num-prompts") + 1
        assert c.warmup_argv[:at] + c.warmup_argv[at + 1:] == c.argv[:at] + c.argv[at + 1:]
