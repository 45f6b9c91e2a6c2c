"""The promises on hosts configured other ways than ours: an sshd without the SFTP subsystem, a user
whose login shell is tcsh. Real sshds on loopback, started by the tests."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from harness.errors import HostError
from harness.experiments.config import HostConfig
from harness.experiments.resolve import resolve_file
from harness.results.store import ResultsStore, load_record, new_run_id
from harness.run.runner import run_attempt
from harness.sim import init_target
from tests.conftest import PATCHES, marked_processes, tree_snapshot, write_experiment
from tests.support.figures import figure, write_figures
from tests.support.sshd import SSHServer, free_port

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]
BENCH = [{"name": "bs1", "num_prompts": 2, "input_len": 16, "output_len": 8, "max_concurrency": 1}]


@pytest.fixture(scope="module", autouse=True)
def _write_figures():
    yield
    write_figures()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw_bytes_patch(tmp_path: Path) -> Path:
    """A patch set whose server prints bytes that are not UTF-8 (a latin-1 path, a binary blob) to its log."""
    scratch = init_target(tmp_path / "scratch")
    ls = scratch.repo / "python/sglang/launch_server.py"
    ls.write_text("import sys\nsys.stdout.buffer.write(b'model at /mnt/caf\\xe9 \\xff\\xfe\\x00 blob\\n')\n"
                  "sys.stdout.flush()\n" + ls.read_text())
    diff = subprocess.run(["git", "-C", str(scratch.repo), "diff"], capture_output=True, text=True).stdout
    (tmp_path / "patches" / "raw_bytes").mkdir(parents=True)
    (tmp_path / "patches" / "raw_bytes" / "0001.patch").write_text(diff)
    return tmp_path / "patches"


@pytest.fixture
def sshd_without_sftp(tmp_path):
    server = SSHServer(tmp_path / "sshd-nosftp", sftp=False).start()
    yield server
    server.stop()


def test_without_sftp_every_artifact_arrives_byte_for_byte(tmp_path, sim_target, sshd_without_sftp):
    patches = raw_bytes_patch(tmp_path)
    for name in ("sim_fp8_kv_into_mla_plan", "sim_flashinfer_mla_gather_cast"):
        shutil.copytree(PATCHES / name, patches / name)
    before = tree_snapshot(sim_target.repo)
    host = HostConfig(**sshd_without_sftp.host_entry(), repo=str(sim_target.repo), python=str(sim_target.python),
                      gpus=8, arch="sm90", workdir=str(tmp_path / "work"))
    f = write_experiment(tmp_path, "nosftp", free_port(), backend="flashinfer-mla", patches=["raw_bytes"],
                         bench=BENCH, profile={"steps": 2}, server={"tp": 2})
    out = run_attempt(resolve_file(f, patches), "nosftp", host, ResultsStore(tmp_path / "results"),
                      new_run_id())
    rec = load_record(out.directory / "record.json")
    assert rec.status == "ok", rec.error
    assert rec.fetch_missing is None
    host_dir = next((tmp_path / "work" / "attempts").rglob("server.log")).parent
    fetched = [p for p in out.directory.rglob("*") if p.is_file() and p.name != "record.json"]
    gz = [p for p in fetched if p.name.endswith(".trace.json.gz")]
    assert gz and (out.directory / "server.log") in fetched and any(p.suffix == ".jsonl" for p in fetched)
    assert b"caf\xe9 \xff\xfe\x00 blob" in (out.directory / "server.log").read_bytes()
    for p in fetched:
        original = host_dir / p.name if p.parent == out.directory else host_dir / "profile" / p.name
        assert sha256(p) == sha256(original), f"{p.name} changed in transit"
    assert tree_snapshot(sim_target.repo) == before and not marked_processes(rec.run_id)
    figure("host without the SFTP subsystem", survived=True, time_to_clean_s=None, lost=0,
           note=f"{len(fetched)} artifacts (gzip traces, a log with non-UTF-8 bytes) fetched byte for byte, "
                "each checked against the sha256 the agent reported")


# ============================================================================ another login shell


@pytest.fixture(scope="module")
def tcsh_user():
    """A user whose login shell is tcsh (its quoting differs from sh: a quoted newline is an error)."""
    if os.geteuid() != 0:
        pytest.skip("creating a user with another login shell needs root")
    if not shutil.which("tcsh") or not shutil.which("useradd"):
        pytest.skip("tcsh or useradd is not installed (scripts/test installs tcsh)")
    if not Path("/usr/bin/python3").exists():
        pytest.skip("the user needs a Python outside /root: /usr/bin/python3 is missing")
    name = f"hx{uuid.uuid4().hex[:6]}"
    home = Path(tempfile.mkdtemp(prefix="harness-tcsh-home-"))
    # '*': no password, but not a locked account (sshd refuses locked ones).
    subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", shutil.which("tcsh"),
                    "--password", "*", name], check=True)
    pw = pwd.getpwnam(name)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    home.chmod(0o755)
    # sshd reads authorized_keys as the user: this sshd's files live where the user can read them.
    sshd_dir = Path(tempfile.mkdtemp(prefix="harness-tcsh-sshd-"))
    sshd_dir.chmod(0o755)
    server = SSHServer(sshd_dir / "sshd").start()
    server.root.chmod(0o755)
    server.authorized_keys.chmod(0o644)
    try:
        yield name, home, server
    finally:
        server.stop()
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(sshd_dir, ignore_errors=True)


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True, timeout=120)


def test_a_user_whose_login_shell_is_tcsh_runs_an_attempt_and_the_host_is_left_as_found(tmp_path, tcsh_user):
    user, home, sshd = tcsh_user
    target_dir = home / f"sglang-{uuid.uuid4().hex[:6]}"
    # The target as that user makes it, with a Python that user can run (root's pyenv is not readable).
    # The simulated target's maker, copied where that user can read it (this checkout may not be).
    pkg = home / f"pkg-{uuid.uuid4().hex[:6]}"
    shutil.copytree(PROJECT / "harness" / "sim", pkg / "harness" / "sim")
    (pkg / "harness" / "__init__.py").write_text("")
    subprocess.run(["chown", "-R", user, str(pkg)], check=True)
    made = as_user(user, "/usr/bin/python3", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                   "from harness.sim import init_target; print(init_target(sys.argv[2]).python)",
                   str(pkg), str(target_dir))
    assert made.returncode == 0, made.stderr
    python = made.stdout.strip().splitlines()[-1]
    before = tree_snapshot(target_dir)
    host = HostConfig(**sshd.host_entry(user=user), repo=str(target_dir), python=python, gpus=8, arch="sm90",
                      workdir=str(home / "work"))
    f = write_experiment(tmp_path, "tcsh", free_port(), backend="flashinfer-mla", patches=["sim_fp8_kv_into_mla_plan"],
                         server={"kv_cache_dtype": "auto"}, bench=BENCH)
    out = run_attempt(resolve_file(f, PATCHES), "tcsh-box", host, ResultsStore(tmp_path / "results"),
                      new_run_id())
    rec = load_record(out.directory / "record.json")
    assert rec.status == "ok", rec.error
    assert rec.metrics["bs1"].completed == 2
    assert rec.revert is not None and rec.revert.verified
    assert tree_snapshot(target_dir) == before and not marked_processes(rec.run_id)
    figure("user whose login shell is tcsh", survived=True, time_to_clean_s=None, lost=0,
           note="every command is the host's Python with a quote-free bootstrap; ran, reverted")


# ============================================================================ a work dir that cannot be written


def small_full_disk(tmp_path: Path) -> Path | None:
    """A 1 MiB tmpfs filled to the last byte, or None where this machine does not let us mount one."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        return None
    with open(mnt / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return mnt


@pytest.mark.parametrize("case", ["not-a-directory", "disk-full"])
def test_a_work_dir_that_cannot_be_written_is_a_clear_error_naming_it_and_changes_nothing(tmp_path, sim_target,
                                                                                          sshd, case):
    if case == "not-a-directory":
        (tmp_path / "a-file").write_text("not a folder")
        workdir = tmp_path / "a-file" / "harness"
    else:
        mnt = small_full_disk(tmp_path)
        if mnt is None:
            pytest.skip("mounting a small tmpfs needs root and a mount namespace that allows it")
        workdir = mnt / "harness"
    before = tree_snapshot(sim_target.repo)
    try:
        host = HostConfig(**sshd.host_entry(), repo=str(sim_target.repo), python=str(sim_target.python), gpus=8,
                          arch="sm90", workdir=str(workdir))
        f = write_experiment(tmp_path, "wd", free_port(), backend="flashinfer-mla", bench=BENCH)
        with pytest.raises(HostError) as exc:
            run_attempt(resolve_file(f, PATCHES), "box", host, ResultsStore(tmp_path / "results"),
                        new_run_id())
        message = str(exc.value)
        assert f"the work dir {workdir} on the host cannot be written" in message
        assert "`workdir:`" in message and "Traceback" not in message
        assert tree_snapshot(sim_target.repo) == before
        assert not (sim_target.repo / ".git" / "harness" / "journal.json").exists()
        figure(f"work dir {'on a full disk' if case == 'disk-full' else 'that is not a directory'}",
               survived=True, time_to_clean_s=None, lost=0, note="clear error naming the path and `workdir:`; "
               "nothing changed on the host")
    finally:
        if case == "disk-full":
            subprocess.run(["umount", str(tmp_path / "full")], check=False)


# ============================================================================ a bastion (ProxyJump)


@pytest.fixture
def bastion_and_target(tmp_path):
    bastion = SSHServer(tmp_path / "sshd-bastion").start()
    target = SSHServer(tmp_path / "sshd-target").start()
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User {bastion.user}\n"
        f"  IdentityFile {bastion.client_key}\n  IdentitiesOnly yes\n"
        f"Host gpu-behind-bastion\n  HostName 127.0.0.1\n  Port {target.port}\n  User {target.user}\n"
        f"  IdentityFile {target.client_key}\n  IdentitiesOnly yes\n  ProxyJump bastion\n")
    yield bastion, target, config
    bastion.stop()
    target.stop()


@pytest.mark.parametrize("bastion_key", ["known", "unknown", "changed"])
def test_host_keys_are_checked_on_every_hop_through_a_bastion(tmp_path, sim_target, bastion_and_target, bastion_key):
    bastion, target, config = bastion_and_target
    known = tmp_path / "known_hosts"
    lines = target.known_hosts.read_text()
    if bastion_key == "known":
        lines += bastion.known_hosts.read_text()
    elif bastion_key == "changed":  # the bastion's name with another machine's key
        other = SSHServer(tmp_path / "sshd-other").prepare()
        name = bastion.known_hosts.read_text().split()[0]
        lines += name + " " + " ".join(other.known_hosts.read_text().split()[1:]) + "\n"
    known.write_text(lines)
    before = tree_snapshot(sim_target.repo)
    host = HostConfig(address="gpu-behind-bastion", ssh_config=str(config), known_hosts=str(known),
                      repo=str(sim_target.repo), python=str(sim_target.python), gpus=8, arch="sm90",
                      workdir=str(tmp_path / "work"))
    f = write_experiment(tmp_path, "jump", free_port(), backend="flashinfer-mla", bench=BENCH)
    run = lambda: run_attempt(resolve_file(f, PATCHES), "behind", host,  # noqa: E731
                              ResultsStore(tmp_path / "results"), new_run_id())
    if bastion_key == "known":
        rec = load_record(run().directory / "record.json")
        assert rec.status == "ok", rec.error
    else:
        with pytest.raises(HostError) as exc:
            run()
        text = str(exc.value)
        assert f"[127.0.0.1]:{bastion.port}" in text, text
        assert ("unknown SSH host key" if bastion_key == "unknown" else "has CHANGED") in text
        assert not (tmp_path / "work").exists(), "nothing may be uploaded through an unverified bastion"
        figure(f"bastion (ProxyJump) whose host key is {bastion_key}", survived=True, time_to_clean_s=None,
               lost=0, note="refused before anything is sent, naming the bastion")
    assert tree_snapshot(sim_target.repo) == before


# ============================================================================ processes that try to escape


def patch_set(tmp_path: Path, name: str, prologue: str) -> Path:
    """A patch set that runs `prologue` at the top of the simulated launch_server.py."""
    scratch = init_target(tmp_path / f"scratch-{name}")
    ls = scratch.repo / "python/sglang/launch_server.py"
    ls.write_text(prologue + ls.read_text())
    diff = subprocess.run(["git", "-C", str(scratch.repo), "diff"], capture_output=True, text=True).stdout
    folder = tmp_path / "patches" / name
    folder.mkdir(parents=True)
    (folder / "0001.patch").write_text(diff)
    return tmp_path / "patches"


ESCAPE = '''import os, sys
pidfile = os.environ.get("ESCAPE_PIDFILE")
if pidfile and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild: own session, parent gone (re-parented), and an empty environment
        code = ("import os, time; open(%r, 'w').write(str(os.getpid())); os.rename(%r, %r); time.sleep(600)"
                % (pidfile + ".tmp", pidfile + ".tmp", pidfile))
        os.execve(sys.executable, [sys.executable, "-c", code], {})  # no marker left in /proc/<pid>/environ
    os._exit(0)
'''


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_grandchild_that_calls_setsid_and_clears_its_environment_does_not_outlive_the_attempt(tmp_path,
                                                                                             sim_target, host):
    patches = patch_set(tmp_path, "escape", ESCAPE)
    pidfile = tmp_path / "escaped.pid"
    name, host_cfg = host  # over sshd and through the local transport
    f = write_experiment(tmp_path, "escape", free_port(), backend="flashinfer-mla", patches=["escape"], bench=BENCH,
                         server={"env": {"ESCAPE_PIDFILE": str(pidfile)}})
    out = run_attempt(resolve_file(f, patches), name, host_cfg, ResultsStore(tmp_path / "results"),
                      new_run_id())
    rec = load_record(out.directory / "record.json")
    assert rec.status == "ok", rec.error
    pid = int(pidfile.read_text())
    escaped = alive(pid)
    if escaped:
        os.kill(pid, 9)
    assert not escaped, "the escaped grandchild is still running after the attempt"
    assert rec.server is not None and rec.server.stop is not None and pid in rec.server.stop.stragglers
    figure(f"a grandchild that calls setsid() and clears its environment ({name})", survived=True,
           time_to_clean_s=rec.server.stop.stop_s, lost=0,
           note="re-parented to the agent (a child subreaper) and ended with the server")


# ============================================================================ a frozen server


def test_a_server_frozen_during_the_benchmark_is_hung_within_no_progress_not_the_bench_timeout(tmp_path, sim_target, host):
    before = tree_snapshot(sim_target.repo)
    name, host_cfg = host  # over sshd and through the local transport
    long_bench = [{"name": "long", "num_prompts": 400, "input_len": 32, "output_len": 64, "max_concurrency": 1}]
    f = write_experiment(tmp_path, "frozen", free_port(), backend="flashinfer-mla", bench=long_bench,
                         timeouts={"ready": 60, "no_progress": 4, "bench": 600, "stop_grace": 2})

    class FreezeAtBench:
        def stage(self, label: str, stage: str) -> None:
            if stage == "bench":
                journal = json.loads((sim_target.repo / ".git" / "harness" / "journal.json").read_text())
                os.kill(journal["server"]["pid"], signal.SIGSTOP)

        def note(self, label: str, message: str) -> None:
            pass

    out = run_attempt(resolve_file(f, PATCHES), name, host_cfg, ResultsStore(tmp_path / "results"),
                      new_run_id(), reporter=FreezeAtBench())
    rec = load_record(out.directory / "record.json")
    assert rec.status == "hung", rec.error
    assert "/health" in (rec.error or "")
    assert rec.timings["total_s"] < 60, "caught by the 600 s bench timeout, not by the liveness check"
    assert tree_snapshot(sim_target.repo) == before and not marked_processes(rec.run_id)
    frozen_for = rec.timings.get("bench_s")
    figure(f"server frozen (SIGSTOP) during the benchmark ({name})", survived=True,
           time_to_clean_s=round(rec.timings.get("bench_s", 0) + rec.timings.get("stop_s", 0)
                                 + rec.timings.get("revert_s", 0), 1) if frozen_for is not None else None,
           lost=0, note="hung after no_progress (4 s) without an answer on /health, not after the 600 s "
                        "bench timeout; stopped, reverted")


# ============================================================================ a server that writes where it runs


def test_what_the_server_writes_in_its_working_directory_never_lands_in_the_tree(tmp_path, sim_target, host):
    patches = patch_set(tmp_path, "core_dumper", "open('core.4242', 'wb').write(b'a core dump')\n")
    before = tree_snapshot(sim_target.repo)
    name, host_cfg = host  # over sshd and through the local transport
    for run in ("first", "second"):
        f = write_experiment(tmp_path, run, free_port(), backend="flashinfer-mla", patches=["core_dumper"],
                             bench=BENCH)
        out = run_attempt(resolve_file(f, patches), name, host_cfg, ResultsStore(tmp_path / "results"),
                          new_run_id())
        rec = load_record(out.directory / "record.json")
        assert rec.status == "ok", f"{run}: {rec.error}"  # the second one too: nothing stray blocks it
        assert rec.revert is not None and rec.revert.verified
    assert tree_snapshot(sim_target.repo) == before
    assert any((tmp_path / "work").rglob("core.4242")), "the file went to the attempt's own folder"
    figure(f"server that writes into its working directory ({name})", survived=True, time_to_clean_s=None, lost=0,
           note="runs outside the tree; two attempts in a row both ok")


def test_files_the_attempt_leaves_under_ignored_paths_are_named_in_the_record(tmp_path, sim_target, host):
    prologue = ("import os\n_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n"
                "os.makedirs(os.path.join(_root, 'python', 'sglang', '__pycache__'), exist_ok=True)\n"
                "open(os.path.join(_root, 'python', 'sglang', '__pycache__', 'jit.cache'), 'w').write('x')\n")
    patches = patch_set(tmp_path, "cache_writer", prologue)
    before = tree_snapshot(sim_target.repo)
    name, host_cfg = host  # over sshd and through the local transport
    f = write_experiment(tmp_path, "cache", free_port(), backend="flashinfer-mla", patches=["cache_writer"],
                         bench=BENCH)
    out = run_attempt(resolve_file(f, patches), name, host_cfg, ResultsStore(tmp_path / "results"),
                      new_run_id())
    rec = load_record(out.directory / "record.json")
    assert rec.status == "ok", rec.error
    assert rec.revert is not None and rec.revert.verified  # ignored paths are not the user's tree...
    assert rec.revert.stray_ignored == ["python/sglang/__pycache__/jit.cache"]  # ...but what was left is named
    after = tree_snapshot(sim_target.repo)
    assert {k for k in after if k not in before} == {"python/sglang/__pycache__/",
                                                      "python/sglang/__pycache__/jit.cache"}
