"""A newcomer's first hour, through the CLI as users run it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.errors import ExitCode
from tests.conftest import write_experiment
from tests.support.sshd import free_port

pytestmark = pytest.mark.integration


def harness(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_compare_from_another_folder_finds_the_run_a_command_wrote(tmp_path, sim_target):
    """The record lands in the default results folder, not in the folder the command ran from; `harness
    compare RUN` run from elsewhere finds it."""
    here, elsewhere, store = tmp_path / "here", tmp_path / "elsewhere", tmp_path / "store"
    here.mkdir()
    elsewhere.mkdir()
    f = write_experiment(here, "stock", free_port(), backend="flashinfer-mla",
                         bench=[{"name": "bs1", "num_prompts": 4, "input_len": 16, "output_len": 8,
                                 "max_concurrency": 1}])
    (here / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": {
        "address": "local", "repo": str(sim_target.repo), "python": str(sim_target.python),
        "workdir": str(tmp_path / "work")}}}))
    env = {**os.environ, "HARNESS_RESULTS_DIR": str(store), "PYTHONPATH": str(Path(__file__).parents[2])}
    p = harness("run", str(f), cwd=here, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"results: {store}" in p.stdout  # it says where records go
    assert not (here / "results").exists()
    (run_dir,) = [d for d in store.iterdir() if d.is_dir()]
    p = harness("compare", run_dir.name, "--format", "csv", cwd=elsewhere, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stock" in p.stdout and "ok" in p.stdout


# A stand-in for a cold disk: the first `import typer` (the CLI's first heavy import) says so on the pipe
# whose fd is in HARNESS_TEST_IMPORT_FD, then waits for a signal, so Ctrl-C lands inside the imports.
SLOW_IMPORT_SHIM = '''
import os, signal, sys

class _SlowTyper:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            sys.meta_path.remove(self)
            os.write(int(os.environ["HARNESS_TEST_IMPORT_FD"]), b"importing")
            signal.pause()
        return None

if "HARNESS_TEST_IMPORT_FD" in os.environ:
    sys.meta_path.insert(0, _SlowTyper())
'''


def entry_point_command() -> list[str]:
    """The `harness` script as pip writes it from pyproject.toml's entry point (the installed one may be older)."""
    import tomllib

    target = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]["harness"]
    module, func = target.split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]


@pytest.mark.parametrize("how", ["script", "python -m harness"])
def test_ctrl_c_while_the_cli_imports_is_one_line_and_exit_130(tmp_path, how):
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORT_SHIM)
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(__file__).parents[2]}",
           "HARNESS_TEST_IMPORT_FD": str(write_end)}
    argv = entry_point_command() if how == "script" else [sys.executable, "-m", "harness"]
    proc = subprocess.Popen([*argv, "--help"], env=env, pass_fds=(write_end,), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 60)
        assert ready and os.read(read_end, 16) == b"importing", "the CLI never reached its imports"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(read_end)
        proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, (proc.returncode, err)
    assert "Traceback" not in err and err.strip() == "interrupted", err
    assert out == ""


def test_compare_takes_md_for_markdown_and_names_the_formats_it_takes(tmp_path):
    from harness.results.schemas import Record
    from harness.results.store import ResultsStore

    store = ResultsStore(tmp_path / "results")
    for exp in ("base", "fast"):
        rec = Record(run_id="r1", experiment=exp, attempt="01", host="h", status="ok",
                     metrics={"bs1": {"output_throughput": 100.0, "samples": {"output_throughput": [100.0] * 4}}})
        store.write_record(store.new_attempt_dir("r1", exp), rec)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    md = harness("compare", "r1", "--format", "md", "--results-dir", str(store.root), cwd=tmp_path, env=env)
    markdown = harness("compare", "r1", "--format", "markdown", "--results-dir", str(store.root), cwd=tmp_path, env=env)
    assert md.returncode == 0, md.stderr
    assert md.stdout == markdown.stdout and "| experiment |" in md.stdout
    p = harness("compare", "r1", "--format", "html", "--results-dir", str(store.root), cwd=tmp_path, env=env)
    assert p.returncode == 2 and "unknown format 'html'" in p.stderr, p.stderr
    assert "table, markdown (or md), csv or json" in " ".join(p.stderr.split())
