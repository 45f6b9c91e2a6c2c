"""The agent as the host receives it: one zipapp, content-addressed, standard library only, Python >= 3.8."""

from __future__ import annotations

import ast
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.common import protocol
from harness.hosts.shipping import MIN_PYTHON, agent_sources, agent_zipapp

PYENV = Path.home() / ".pyenv" / "versions"
# scripts/mutation.py runs the tests on a copy whose modules mutmut rewrote (longer, importing mutmut):
# checks of the source's shape say nothing there.
about_the_source = pytest.mark.skipif("/mutants/" in __file__, reason="mutmut's rewritten copy of the sources")


def test_the_same_sources_give_the_same_bytes_and_the_name_is_their_hash():
    import hashlib

    agent_zipapp.cache_clear()
    name1, data1 = agent_zipapp()
    agent_zipapp.cache_clear()
    name2, data2 = agent_zipapp()
    assert (name1, data1) == (name2, data2)
    assert name1 == f"agent-{hashlib.sha256(data1).hexdigest()[:16]}.pyz"


def test_the_zip_holds_the_agent_package_and_the_protocol_and_nothing_of_the_controller():
    names = set(zipfile.ZipFile(io.BytesIO(agent_zipapp()[1])).namelist())
    assert {"__main__.py", "harness/__init__.py", "harness/common/protocol.py", "harness/agent/attempt.py",
            "harness/agent/tree.py", "harness/agent/link.py"} <= names
    assert not any(n in names for n in ("harness/run/runner.py", "harness/cli/app.py", "harness/results/store.py"))


@about_the_source
def test_every_module_shipped_imports_only_the_standard_library_and_itself():
    stdlib = set(sys.stdlib_module_names)
    for name, data in agent_sources():
        for node in ast.walk(ast.parse(data, name)):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                assert top in stdlib or top in ("harness", "__future__"), f"{name} imports {top}"


@about_the_source
def test_no_shipped_module_is_over_about_400_lines():
    for name, data in agent_sources():
        assert data.count(b"\n") <= 420, name


def oldest_python() -> str | None:
    for v in sorted(PYENV.glob(f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]}.*")):
        exe = v / "bin" / "python"
        if exe.exists():
            return str(exe)
    return shutil.which(f"python{MIN_PYTHON[0]}.{MIN_PYTHON[1]}")


@pytest.mark.parametrize("python", ["current", "oldest"])
def test_the_zipapp_answers_a_status_request_under_the_hosts_python(tmp_path, python):
    exe = sys.executable if python == "current" else oldest_python()
    if exe is not None and python == "oldest" and "/mutants/" in __file__:
        pytest.skip("mutmut's rewritten copy imports mutmut, which only the current Python has")
    if exe is None:
        pytest.skip(f"no Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} on this machine to run the agent under")
    name, data = agent_zipapp()
    (tmp_path / name).write_bytes(data)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    spec = protocol.Spec(run_id="s", attempt_id="status", repo=str(repo), mode="status", workdir=str(tmp_path / "w"),
                         server=protocol.ServerSpec(argv=[exe]))
    p = subprocess.run([exe, str(tmp_path / name)], input=(json.dumps(spec.to_dict()) + "\n").encode(),
                       capture_output=True, timeout=60)
    events = [protocol.decode(json.loads(x)) for x in p.stdout.splitlines()]
    assert p.returncode == 0, p.stderr.decode()
    assert isinstance(events[0], protocol.Hello) and events[0].protocol == protocol.PROTOCOL
    final = events[-1]
    assert isinstance(final, protocol.Final) and final.status == "ok"
    seen = final.repo_status
    assert seen is not None and seen.exists is True and seen.git is True
    assert seen.lock == protocol.LockState(held=False)


def test_an_agent_of_another_protocol_answers_with_an_infra_error_naming_both_versions(tmp_path):
    name, data = agent_zipapp()
    (tmp_path / name).write_bytes(data)
    body = {"protocol": protocol.PROTOCOL - 1, "run_id": "s", "attempt_id": "a", "repo": str(tmp_path),
            "server": {"argv": ["python"]}}
    p = subprocess.run([sys.executable, str(tmp_path / name)], input=(json.dumps(body) + "\n").encode(),
                       capture_output=True, timeout=60)
    final = protocol.decode(json.loads(p.stdout.splitlines()[-1]))
    assert isinstance(final, protocol.Final) and final.status == "infra-error"
    assert f"protocol {protocol.PROTOCOL - 1}, this agent {protocol.PROTOCOL}" in (final.error or "")
    assert p.returncode == 3
