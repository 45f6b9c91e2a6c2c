"""init_target: the checkout, its interpreter, the fake nvidia-smi, the shipped patch sets."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from harness.sim import ARCHES, TEMPLATE_DIR, SimTarget, init_target
from tests.sim.simproc import FP8_PATCH, HANG_PATCH


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def run_py(target: SimTarget, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(target.python), *args], cwd=target.repo, env=env, capture_output=True, text=True, timeout=60
    )


def smi(target: SimTarget, *args: str) -> subprocess.CompletedProcess:
    exe = target.python.parent / "nvidia-smi"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)


def test_init_creates_clean_git_repo_and_interpreter(shared_target):
    repo = shared_target.repo
    assert shared_target.python == repo / ".venv" / "bin" / "python"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert len(git(repo, "rev-list", "--all").split()) == 1
    tracked = git(repo, "ls-files").split()
    assert "python/sglang/srt/layers/attention/flashinfer_mla_backend.py" in tracked
    assert "python/sglang/launch_server.py" in tracked
    assert not any(p.startswith(".venv/") for p in tracked)
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in tracked)
    gitignore = (repo / ".gitignore").read_text().split()
    assert {".venv/", "__pycache__/", "*.pyc"} <= set(gitignore)

    out = run_py(shared_target, "-c", "import sglang, sys; print(sglang.__version__); print(sys.prefix)")
    assert out.returncode == 0, out.stderr
    version, prefix = out.stdout.split()
    assert version == "0.5.23"
    assert prefix == str(repo / ".venv")
    assert run_py(shared_target, "-m", "sglang.version").stdout.strip() == "0.5.23"
    # The venv is isolated: the harness's own packages are not importable there.
    assert run_py(shared_target, "-c", "import harness").returncode != 0


def test_init_same_content_gives_same_commit(tmp_path, shared_target):
    other = init_target(tmp_path / "again")
    assert git(other.repo, "rev-parse", "HEAD") == git(shared_target.repo, "rev-parse", "HEAD")


def test_init_refuses_non_empty_destination(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        init_target(tmp_path / "busy")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        init_target(tmp_path / "file")
    with pytest.raises(ValueError, match="arch"):
        init_target(tmp_path / "new", arch="sm80")
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    assert init_target(tmp_path / "empty", arch="sm120", gpus=2).repo == tmp_path / "empty"


def test_fake_nvidia_smi_formats(tmp_path):
    target = init_target(tmp_path / "b200", arch="sm100", gpus=2)
    q = "--query-gpu=index,name,compute_cap,memory.total,memory.used"
    out = smi(target, q, "--format=csv,noheader")
    assert out.returncode == 0
    assert out.stdout.splitlines() == [
        "0, NVIDIA B200, 10.0, 183359 MiB, 0 MiB",
        "1, NVIDIA B200, 10.0, 183359 MiB, 0 MiB",
    ]
    assert (
        smi(target, q, "--format=csv,noheader,nounits").stdout.splitlines()[1]
        == "1, NVIDIA B200, 10.0, 183359, 0"
    )
    assert smi(target, q, "--format=csv").stdout.splitlines()[0] == (
        "index, name, compute_cap, memory.total [MiB], memory.used [MiB]"
    )
    apps = smi(target, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert apps.returncode == 0 and apps.stdout == ""
    assert smi(target, "--query-compute-apps=pid,used_memory", "--format=csv").stdout.splitlines() == [
        "pid, used_gpu_memory [MiB]"
    ]
    bad = smi(target, "--query-gpu=index,bogus", "--format=csv")
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad.stdout
    assert smi(target, "-L").stdout.startswith("GPU 0: NVIDIA B200 (UUID: GPU-")
    assert smi(target, "-i", "1", q, "--format=csv,noheader").stdout.startswith("1, NVIDIA B200")


def test_nvidia_smi_ignores_dead_processes(shared_target):
    state = shared_target.repo / ".venv" / "sglang-sim" / "procs"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    (state / f"{pid}.json").write_text('{"pid": %d, "gpu": 0, "used_mib": 1234, "name": "python"}' % pid)
    out = smi(shared_target, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert out.stdout == ""
    used = smi(shared_target, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    assert used.stdout.splitlines()[0] == "0"


@pytest.mark.parametrize("patch", [FP8_PATCH, HANG_PATCH], ids=["fp8", "hang"])
def test_patch_sets_apply_and_revert_byte_identical(fresh_target, patch):
    repo = fresh_target.repo
    git(repo, "apply", "--check", str(patch))
    git(repo, "apply", str(patch))
    assert git(repo, "status", "--porcelain").strip().startswith("M python/sglang/srt/")
    git(repo, "apply", "-R", str(patch))
    assert git(repo, "status", "--porcelain") == ""


def test_patch_sets_have_a_readme():
    for patch in (FP8_PATCH, HANG_PATCH):
        assert (patch.parent / "README.md").is_file()


def test_template_is_stdlib_only_and_python38_syntax():
    stdlib = set(sys.stdlib_module_names)
    files = sorted(TEMPLATE_DIR.rglob("*.py"))
    assert len(files) > 20
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top in stdlib or top == "sglang", f"{path}: non-stdlib import {name}"
        assert not path.name.startswith("test_"), path


def test_arches_constant():
    assert ARCHES == ("sm90", "sm100", "sm120")
