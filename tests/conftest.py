"""Shared fixtures: a real sshd on loopback, fresh simulated SGLang targets, experiment files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.experiments.config import HostConfig
from tests.support.sshd import SSHServer, free_port

# Longest tests first (tests/durations.json), so a parallel run does not end on one long test started last.
pytest_plugins = ["tests.support.ordering"]



def pytest_configure(config) -> None:
    """Tests press Ctrl-C on the harness (SIGINT to its pid) as a user does in a terminal, where SIGINT is
    not ignored. A suite started in the background of a non-interactive shell (`scripts/test &`, nohup, some
    CI runners) inherits SIGINT ignored, and every child would then inherit that and ignore the Ctrl-C: a
    Python handler here is reset to the default in each child at exec, so children behave as in a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


PROJECT = Path(__file__).resolve().parents[1]
PATCHES = PROJECT / "patches"


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path, monkeypatch) -> None:
    """A command run without --results-dir writes to the default results folder (the checkout's `results/`
    when run from one): point it at the test's own folder, as the old cwd-relative default did."""
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path / "results"))


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch) -> None:
    """The CLI sizes its tables from COLUMNS on a pipe: a test reads what the CLI prints, so the width of the
    terminal the suite happens to run in must not change it (tests that want a width set it themselves)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SSHServer:
    if not (shutil.which("sshd") or Path("/usr/sbin/sshd").exists()):
        pytest.fail("sshd is not installed: run the tests through scripts/test, which installs openssh-server")
    server = SSHServer(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


@pytest.fixture
def sim_target(tmp_path):
    from harness.sim import init_target

    return init_target(tmp_path / "sglang", arch="sm90", gpus=8)


@pytest.fixture(params=["ssh", "local"])
def host(request, sim_target, tmp_path) -> tuple[str, HostConfig]:
    """The simulated target reached over real SSH, and the same through the local transport."""
    common = dict(repo=str(sim_target.repo), python=str(sim_target.python), gpus=8, arch="sm90",
                  workdir=str(tmp_path / "work"))
    if request.param == "ssh":
        server = request.getfixturevalue("sshd")
        return "sim-ssh", HostConfig(**server.host_entry(), **common)
    return "sim-local", HostConfig(address="local", **common)


@pytest.fixture
def port() -> int:
    return free_port()


def tree_snapshot(repo: Path) -> dict[str, tuple[int, str]]:
    """Every file under the repo except .git/ and the simulated venv: mode and content hash.
    Independent of the agent's git-based check, so the two cannot share a blind spot."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        rel_dir = os.path.relpath(dirpath, repo)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in (".git", ".venv")]
        snap[rel_dir + "/"] = (0, "dir")
        for name in filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            data = os.readlink(p).encode() if stat.S_ISLNK(st.st_mode) else p.read_bytes()
            snap[os.path.relpath(p, repo)] = (st.st_mode, hashlib.sha256(data).hexdigest())
    return snap


def marked_processes(marker_prefix: str) -> list[int]:
    """Live processes whose environment carries HARNESS_ATTEMPT=<run>/... for the given run."""
    found = []
    needle = f"HARNESS_ATTEMPT={marker_prefix}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(e.startswith(needle) for e in env):
            found.append(int(d))
    return found


def write_experiment(tmp_path: Path, name: str, port: int, **sections) -> Path:
    import yaml

    doc = {"name": name, "model": {"path": "/models/GLM-5-NVFP4"},
           "server": {"port": port, "tp": 2, "kv_cache_dtype": "fp8_e4m3"},
           "timeouts": {"ready": 30, "no_progress": 30, "stop_grace": 5, "bench": 60}}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f


# Final statuses as docs/experiments.md (Records) defines them (an `aborted` or `infra-error` record is final only when the
# attempt's budget was spent): spelled here, not imported, so the tests cannot share the code's mistake.
FINAL_STATUSES = {"ok", "crashed", "hung", "apply-failed", "preflight-failed", "bench-failed"}


def records_on_disk(results: Path, run_id: str) -> dict[str, list[SimpleNamespace]]:
    """Every record.json of a run, read straight from disk and grouped by attempt key (sweep records carry
    one), oldest attempt folder first — independent of the harness's own results reader."""
    by_key: dict[str, list[SimpleNamespace]] = {}
    for path in sorted((results / run_id).glob("*/*/record.json")):
        rec = SimpleNamespace(**json.loads(path.read_text()))
        by_key.setdefault(rec.key, []).append(rec)
    return by_key


def is_final_on_disk(rec: SimpleNamespace) -> bool:
    return rec.status in FINAL_STATUSES or bool(getattr(rec, "budget_exceeded", None))


def wait_until(predicate, timeout: float, step: float = 0.05) -> float | None:
    """Seconds until `predicate()` held, or None. Only for host state that sends no event we could wait
    on (a tree on disk, processes of another session)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        time.sleep(step)
    return None
