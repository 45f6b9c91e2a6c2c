"""The agent's safety promises, each tested from what a user is told — never judged with the code's own
helpers: the tree is compared with `tree_snapshot` (files, modes and directories, read from disk) and
the attempt's processes are found with `marked_processes` (read from /proc).

1. A revert that cannot be verified is reported, keeps the journal, and blocks the next attempt.
2. Awkward patch sets (nested new dirs, deletes, renames with edits, mode changes, files/) serve and
   leave the tree byte-identical, directories included.
3. A controller that goes silent with its link open (SIGSTOP) is noticed by the heartbeat timeout.
4. The agent's stdin closing (the controller gone) aborts the attempt on its own, with no heartbeat.
5. A secret in the server's environment never reaches the terminal, the record or any kept file — also
   when it is inside the fatal line, a failed benchmark's output or a hung server's stack dump.
6. Terminal control sequences in a fatal line reach neither the terminal nor the record; the log keeps them.
7. A patch set writes only inside its tree: a whole file through a link the host's tree already has,
   pointing outside, is refused on the host before anything is written.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from harness.experiments.config import HostConfig
from harness.experiments.resolve import resolve_file
from harness.experiments.spec import build_spec
from harness.hosts.shipping import agent_zipapp
from harness.results.store import ResultsStore, load_record, new_run_id
from harness.run.runner import run_attempt
from harness.sim import init_target
from tests.conftest import PATCHES, marked_processes, tree_snapshot, wait_until, write_experiment
from tests.support.sshd import free_port

pytestmark = pytest.mark.integration

HARNESS = [sys.executable, "-m", "harness"]
LAUNCH_SERVER = "python/sglang/launch_server.py"
HTTP_SERVER = "python/sglang/srt/entrypoints/http_server.py"
BENCH_SERVING = "python/sglang/bench_serving.py"
ATTENTION = "python/sglang/srt/layers/attention"
SMALL_BENCH = [{"name": "small", "num_prompts": 3, "input_len": 16, "output_len": 8, "max_concurrency": 2}]
# Far longer than any deadline below: the attempt can only end early by being aborted.
LONG_BENCH = [{"name": "long", "num_prompts": 2000, "input_len": 32, "output_len": 64, "max_concurrency": 1}]


# ============================================================================ helpers


def local_host(target, tmp_path: Path) -> tuple[str, HostConfig]:
    return "sim-local", HostConfig(address="local", repo=str(target.repo), python=str(target.python), gpus=8,
                                   arch="sm90", workdir=str(tmp_path / "work"))


def host_entry(target, tmp_path: Path) -> dict:
    return {"address": "local", "repo": str(target.repo), "python": str(target.python), "gpus": 8,
            "workdir": str(tmp_path / "work")}


def journal_file(repo: Path) -> Path:
    return repo / ".git" / "harness" / "journal.json"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def make_patch_set(tmp_path: Path, name: str, edit, *, files: dict[str, str] | None = None) -> tuple[Path, str]:
    """A patch set made the way a user makes one: edit a scratch copy of the target, take `git diff`
    (staged, with rename detection), write it as patches/<name>/0001-<name>.patch plus a files/ tree.
    Returns (patches dir, the patch text)."""
    scratch = init_target(tmp_path / f"scratch-{name}")
    edit(scratch.repo)
    git(scratch.repo, "add", "-A")
    diff = git(scratch.repo, "diff", "--cached", "-M", "--binary")
    assert diff, "the edit changed nothing"
    folder = tmp_path / "patches" / name
    folder.mkdir(parents=True)
    (folder / f"0001-{name}.patch").write_text(diff)
    for rel, content in (files or {}).items():
        dest = folder / "files" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content)
    return tmp_path / "patches", diff


def insert_after(path: Path, anchor: str, code: str) -> None:
    text = path.read_text()
    assert text.count(anchor) == 1, f"anchor {anchor!r} not found once in {path}"
    path.write_text(text.replace(anchor, anchor + code))


def attempt(tmp_path: Path, host: tuple[str, HostConfig], exp_file: Path, patches_dir: Path = PATCHES):
    name, cfg = host
    run_id = new_run_id()
    out = run_attempt(resolve_file(exp_file, patches_dir), name, cfg,
                      ResultsStore(tmp_path / "results"), run_id)
    return load_record(out.directory / "record.json"), out.directory, run_id


def wait_for_stage(proc: subprocess.Popen, stage: str) -> list[str]:
    """Progress lines of `harness run` on a pipe are plain `label: stage` lines: read up to `stage`."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.rstrip().endswith(f": {stage}"):
            return seen
    raise AssertionError(f"never reached the {stage} stage:\n" + "".join(seen))


def changed_entries(before: dict, after: dict) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


# ============================================================================ 1. a revert that fails


# Runs in the server's main process only (spawned children import the module as __mp_main__): one
# change to a tracked file no patch touches, and one new untracked (not ignored) file, in the repo.
WRITE_INTO_TREE = """\
    _repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(_repo, "README.md"), "a") as _f:
        _f.write("\\nappended by the server under test\\n")
    with open(os.path.join(_repo, "left-by-server.txt"), "w") as _f:
        _f.write("a file nobody asked for\\n")
"""


def test_unverifiable_revert_is_reported_keeps_the_journal_and_next_attempt_refuses_changing_nothing(
        tmp_path, sim_target):
    patches, _ = make_patch_set(tmp_path, "writes_into_tree", lambda repo: insert_after(
        repo / LAUNCH_SERVER, 'if __name__ == "__main__":\n', WRITE_INTO_TREE))
    before = tree_snapshot(sim_target.repo)
    host = local_host(sim_target, tmp_path)
    f = write_experiment(tmp_path, "scribbler", free_port(), backend="flashinfer-mla", patches=["writes_into_tree"],
                         bench=SMALL_BENCH)
    rec, _, run_id = attempt(tmp_path, host, f, patches)

    # What is on disk now: exactly the server's two writes; the patched file itself was restored.
    after_first = tree_snapshot(sim_target.repo)
    assert changed_entries(before, after_first) == {"README.md", "left-by-server.txt"}
    assert rec.revert is not None and rec.revert.verified is False
    assert {"README.md", "left-by-server.txt"} <= set(rec.revert.diff)
    assert rec.revert.tree_before != rec.revert.tree_after
    assert rec.status != "ok", "a tree left changed must never be reported as a clean success"
    assert rec.status == "infra-error" and "revert could not be verified" in rec.error
    assert marked_processes(run_id) == []
    # The journal stays: it is what tells the next attempt (and `harness status`) that the tree is not clean.
    assert journal_file(sim_target.repo).exists()
    journal = json.loads(journal_file(sim_target.repo).read_text())
    assert journal["attempt_id"] == f"{rec.experiment}-{rec.attempt}"

    stock = write_experiment(tmp_path, "next", free_port(), backend="flashinfer-mla", bench=SMALL_BENCH)
    rec2, d2, run_id2 = attempt(tmp_path, host, stock)
    assert rec2.status == "preflight-failed"
    assert journal["attempt_id"] in rec2.error and "interrupted attempt" in rec2.error
    assert "README.md" in rec2.error and "left-by-server.txt" in rec2.error
    assert tree_snapshot(sim_target.repo) == after_first, "the refused attempt changed the tree"
    assert journal_file(sim_target.repo).exists(), "the journal of the unrestored tree was dropped"
    assert not (d2 / "server.log").exists(), "a server was launched on an unrestored tree"
    assert marked_processes(run_id2) == []


# ============================================================================ 2. awkward patch sets


def _awkward_edit(repo: Path) -> None:
    att = repo / ATTENTION
    # (a) a new file three new directories deep
    (repo / "a" / "b" / "c").mkdir(parents=True)
    (repo / "a" / "b" / "c" / "new.py").write_text("VALUE = 1\n")
    # (b) a tracked file deleted (the flashinfer-mla backend never imports it)
    (att / "cutedsl_mla_backend.py").unlink()
    # (c) a tracked file renamed into a new directory, with an edit (similarity < 100 %)
    moved = (att / "flashmla_backend.py").read_text()
    (att / "flashmla").mkdir()
    (att / "flashmla" / "backend.py").write_text(moved + "# moved here by the patch set\n")
    (att / "flashmla_backend.py").unlink()
    # (d) a tracked file made executable, with an edit
    tb = att / "triton_backend.py"
    tb.write_text(tb.read_text() + "# executable now\n")
    tb.chmod(0o755)
    # (f) a pure rename (100 % similar) into two new directories, and (g) a mode-only change: alone in a
    # patch file they are refused when the patch set is read (no '+++' header), beside hunks they apply
    (att / "fa" / "v3").mkdir(parents=True)
    (att / "flashattention_backend.py").rename(att / "fa" / "v3" / "flashattention_backend.py")
    (att / "torch_native_backend.py").chmod(0o755)


def test_awkward_patch_set_serves_and_leaves_tree_identical_directories_included(tmp_path, host, sim_target):
    patches, diff = make_patch_set(tmp_path, "awkward", _awkward_edit,
                                   files={"tools/extra/whole.py": "print('a whole new file')\n"})
    # The patch really has every awkward shape (else this test would prove less than it says).
    assert "new file mode 100644" in diff and "+++ b/a/b/c/new.py" in diff
    assert "deleted file mode 100644\nindex" in diff and f"--- a/{ATTENTION}/cutedsl_mla_backend.py" in diff
    similar = re.search(rf"similarity index (\d+)%\nrename from {ATTENTION}/flashmla_backend.py\n", diff)
    assert similar and int(similar.group(1)) < 100
    assert f"+++ b/{ATTENTION}/flashmla/backend.py" in diff
    assert "old mode 100644\nnew mode 100755" in diff and f"+++ b/{ATTENTION}/triton_backend.py" in diff
    assert (f"similarity index 100%\nrename from {ATTENTION}/flashattention_backend.py\n"
            f"rename to {ATTENTION}/fa/v3/flashattention_backend.py") in diff
    assert (f"diff --git a/{ATTENTION}/torch_native_backend.py b/{ATTENTION}/torch_native_backend.py\n"
            "old mode 100644\nnew mode 100755\n") in diff
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "awkward", free_port(), backend="flashinfer-mla", patches=["awkward"],
                         bench=SMALL_BENCH)
    rec, _, run_id = attempt(tmp_path, host, f, patches)
    assert rec.status == "ok", rec.error
    assert rec.metrics["small"].completed == 3
    changed = rec.changed_paths  # the attempt did apply all of it
    assert changed is not None
    assert {f"{ATTENTION}/cutedsl_mla_backend.py", f"{ATTENTION}/flashmla_backend.py",
            f"{ATTENTION}/triton_backend.py", f"{ATTENTION}/flashattention_backend.py",
            f"{ATTENTION}/torch_native_backend.py"} <= set(changed.restore)
    assert {"a/b/c/new.py", f"{ATTENTION}/flashmla/backend.py", "tools/extra/whole.py",
            f"{ATTENTION}/fa/v3/flashattention_backend.py"} <= set(changed.delete)
    after = tree_snapshot(sim_target.repo)
    assert after == before, f"left behind or changed: {sorted(changed_entries(before, after))}"
    assert marked_processes(run_id) == []
    assert not journal_file(sim_target.repo).exists()


# ============================================================================ 3. controller silent


HEARTBEAT_TIMEOUT_S = 3.0
# `harness run` with a short heartbeat timeout. The timeout is not a setting of the experiment or the
# host (build_spec's default, 20 s, is what every `harness run` sends), so set that default here.


def test_controller_stopped_with_stdin_open_server_stopped_and_tree_reverted_after_heartbeat_timeout(
        tmp_path, sim_target):
    before = tree_snapshot(sim_target.repo)
    entry = {**host_entry(sim_target, tmp_path), "heartbeat_timeout": HEARTBEAT_TIMEOUT_S}
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": entry}}))
    # A patch that still serves (BF16 KV cache), so there is something to revert.
    f = write_experiment(tmp_path, "silent", free_port(), backend="flashinfer-mla",
                         patches=["sim_fp8_kv_into_mla_plan"], server={"kv_cache_dtype": "auto"},
                         bench=LONG_BENCH, timeouts={"stop_grace": 2})
    proc = subprocess.Popen([*HARNESS, "run", str(f),
                             "--results-dir", str(tmp_path / "results"), "--patches-dir", str(PATCHES)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_stage(proc, "bench")
    journal = json.loads(journal_file(sim_target.repo).read_text())
    run_id = journal["run_id"]
    assert marked_processes(run_id) and tree_snapshot(sim_target.repo) != before  # serving, patched

    def clean() -> bool:
        return (not marked_processes(run_id) and not journal_file(sim_target.repo).exists()
                and tree_snapshot(sim_target.repo) == before)

    os.kill(proc.pid, signal.SIGSTOP)  # its pipe to the agent stays open; only the heartbeats stop
    try:
        took = wait_until(clean, HEARTBEAT_TIMEOUT_S + 8)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    if took is None:
        proc.kill()  # the agent's stdin closes: let it clean up before failing
        proc.wait()
        wait_until(clean, 30)
        pytest.fail(f"server still running or tree not restored {HEARTBEAT_TIMEOUT_S + 8} s after the controller "
                    f"went silent (heartbeat timeout {HEARTBEAT_TIMEOUT_S} s)")
    assert took >= HEARTBEAT_TIMEOUT_S - 1, f"cleaned up after {took:.1f} s: not the heartbeat timeout's doing"
    out = proc.communicate(timeout=60)[0]
    rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
    assert rec["status"] == "aborted", out
    assert rec["abort_reason"] == "controller-silent" and "controller-silent" in rec["error"]
    assert rec["revert"]["verified"]
    assert clean()


# ============================================================================ 4. stdin EOF


def _event_reader(stream) -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def run() -> None:
        for line in iter(stream.readline, b""):
            try:
                q.put(json.loads(line))
            except ValueError:
                continue
        q.put(None)  # end of stream

    threading.Thread(target=run, name="agent-events", daemon=True).start()
    return q


def _next_event(q: queue.Queue, until: float, waiting_for: str) -> dict | None:
    try:
        return q.get(timeout=max(0.0, until - time.monotonic()))
    except queue.Empty:
        raise AssertionError(f"the agent did not get to {waiting_for} in time") from None


def test_agent_stdin_eof_aborts_stops_server_and_reverts_with_no_heartbeat_timeout(tmp_path, sim_target):
    before = tree_snapshot(sim_target.repo)
    name, cfg = local_host(sim_target, tmp_path)
    f = write_experiment(tmp_path, "orphaned", free_port(), backend="flashinfer-mla",
                         patches=["sim_fp8_kv_into_mla_plan"], server={"kv_cache_dtype": "auto"},
                         bench=LONG_BENCH, timeouts={"stop_grace": 2})
    run_id = new_run_id()
    # Built as run_attempt builds it, but with no heartbeat timeout and no budget: only EOF can abort it.
    spec = build_spec(resolve_file(f, PATCHES), cfg, run_id=run_id, attempt_id="orphaned-01")
    spec.host_name = name
    spec.heartbeat_timeout_s = None
    assert spec.heartbeat_timeout_s is None and not spec.deadline_s
    agent_name, agent_bytes = agent_zipapp()  # the zipapp the controller ships
    agent_file = tmp_path / agent_name
    agent_file.write_bytes(agent_bytes)
    # Started as the local transport starts it: the host's Python, own session, pipes.
    with open(tmp_path / "agent.stderr", "wb") as err:
        proc = subprocess.Popen([str(sim_target.python), str(agent_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True)
    events = _event_reader(proc.stdout)
    try:
        proc.stdin.write((json.dumps(spec.to_dict()) + "\n").encode())
        proc.stdin.flush()
        until = time.monotonic() + 60
        while True:
            ev = _next_event(events, until, "the bench stage")
            assert ev is not None and ev["event"] != "final", f"ended before the bench stage: {ev}"
            if ev["event"] == "stage" and ev["stage"] == "bench":
                break
        assert marked_processes(run_id) and tree_snapshot(sim_target.repo) != before  # serving, patched

        proc.stdin.close()  # the controller is gone; the agent's stdout is still read
        until = time.monotonic() + 15
        final = None
        while final is None:
            ev = _next_event(events, until, "a final event within 15 s of its stdin closing")
            assert ev is not None, "the agent's stdout ended without a final event"
            if ev["event"] == "final":
                final = ev
        assert final["status"] == "aborted", final
        assert final["abort_reason"] == "controller-gone"
        assert final["revert"]["verified"]
        assert proc.wait(timeout=10) == 0
        assert marked_processes(run_id) == []
        assert tree_snapshot(sim_target.repo) == before
        assert not journal_file(sim_target.repo).exists()
    finally:
        if proc.poll() is None:  # failed: let the agent clean up (SIGTERM aborts it) before the next test
            proc.terminate()
            proc.wait(timeout=60)


# ============================================================================ 5. secrets


def _run_cli_with_secret(tmp_path: Path, target, exp: Path, patches: Path) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": host_entry(target, tmp_path)}}))
    p = subprocess.run(HARNESS + ["run", str(exp), "--results-dir", str(tmp_path / "results"), "--patches-dir",
                                  str(patches)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p, next((tmp_path / "results").rglob("record.json")).parent


def _assert_secret_nowhere(secret: str, p: subprocess.CompletedProcess, rec_dir: Path) -> list[Path]:
    assert secret not in p.stdout + p.stderr, "the secret reached the terminal"
    files = sorted(x for x in rec_dir.rglob("*") if x.is_file())
    for path in files:
        assert secret.encode() not in path.read_bytes(), f"the secret is in {path.relative_to(rec_dir)}"
    return files


def test_secret_inside_the_fatal_line_is_masked_everywhere_and_the_key_line_kept(tmp_path, sim_target):
    secret = "hf_" + uuid.uuid4().hex
    crash = ("    try:\n"
             "        raise RuntimeError('CUDA error: an illegal memory access was encountered '\n"
             "                           '(warmup, token=%s)' % os.environ['HF_TOKEN'])\n"
             "    except RuntimeError:\n"
             "        logger.error(f'Initialization failed. warmup error: {get_exception_traceback()}')\n"
             "        kill_process_tree(os.getpid())\n"
             "        return False\n")
    patches, _ = make_patch_set(tmp_path, "crash_with_token", lambda repo: insert_after(
        repo / HTTP_SERVER, "def _execute_server_warmup(server_args):\n", crash))
    f = write_experiment(tmp_path, "fatal-secret", free_port(), backend="flashinfer-mla",
                         patches=["crash_with_token"], server={"env": {"HF_TOKEN": secret}}, bench=SMALL_BENCH)
    p, rec_dir = _run_cli_with_secret(tmp_path, sim_target, f, patches)
    rec = json.loads((rec_dir / "record.json").read_text())
    assert rec["status"] == "crashed", rec["error"]
    assert rec["verdict"]["category"] == "illegal-memory-access"
    assert secret not in rec["verdict"]["key_line"]
    # The key line is the fatal line, minus the secret: masking must not drop the line.
    assert "CUDA error: an illegal memory access was encountered (warmup, token=" in rec["verdict"]["key_line"]
    assert "token=<redacted>" in (rec_dir / "server.log").read_text()
    files = _assert_secret_nowhere(secret, p, rec_dir)
    assert {x.name for x in files} >= {"record.json", "server.log"}


def test_secret_in_a_failed_benchmarks_output_is_masked_in_the_error_and_logs(tmp_path, sim_target):
    secret = "hf_" + uuid.uuid4().hex
    refuse = ("import os as _os, sys as _sys\n"
              "print('HTTP 401 from the server: invalid token=%s' % _os.environ['HF_TOKEN'], flush=True)\n"
              "_sys.exit(1)\n")
    patches, _ = make_patch_set(tmp_path, "bench_echoes_token", lambda repo: (repo / BENCH_SERVING).write_text(
        refuse + (repo / BENCH_SERVING).read_text()))
    f = write_experiment(tmp_path, "bench-secret", free_port(), backend="flashinfer-mla",
                         patches=["bench_echoes_token"], server={"env": {"HF_TOKEN": secret}}, bench=SMALL_BENCH)
    p, rec_dir = _run_cli_with_secret(tmp_path, sim_target, f, patches)
    rec = json.loads((rec_dir / "record.json").read_text())
    assert rec["status"] == "bench-failed"
    # The error still carries the client's own words, minus the secret.
    assert "HTTP 401 from the server: invalid token=<redacted>" in rec["error"]
    # The case's first run is its warm-up pass: its log is fetched (and masked) as a measured run's is.
    assert "invalid token=<redacted>" in (rec_dir / "bench-small.warmup.log").read_text()
    _assert_secret_nowhere(secret, p, rec_dir)


# A py-spy that, like `py-spy dump --locals`, shows a local variable holding the token.
FAKE_PY_SPY = """#!/bin/sh
echo "Thread 0x7f00 (idle): \\"MainThread\\""
echo "    hang_forever (sglang/_sim/__init__.py:104)"
echo "        Locals:"
echo "            token: \\"$HF_TOKEN\\""
"""


def test_secret_in_a_hung_servers_stack_dump_is_masked(tmp_path, sim_target):
    secret = "hf_" + uuid.uuid4().hex
    spy = sim_target.python.parent / "py-spy"  # the venv's bin/ comes first on the server's PATH
    spy.write_text(FAKE_PY_SPY)
    spy.chmod(0o755)
    f = write_experiment(tmp_path, "hung-secret", free_port(), backend="flashinfer-mla",
                         server={"env": {"HF_TOKEN": secret, "SGLANG_SIM_HANG_AFTER": "server-args"}},
                         timeouts={"ready": 3, "stop_grace": 2})
    p, rec_dir = _run_cli_with_secret(tmp_path, sim_target, f, PATCHES)
    rec = json.loads((rec_dir / "record.json").read_text())
    assert rec["status"] == "hung"
    dump = (rec_dir / "stack-dump.txt").read_text()
    assert 'token: "<redacted>"' in dump  # the dump is kept, minus the secret
    _assert_secret_nowhere(secret, p, rec_dir)


# ============================================================================ 6. hostile host text


def test_control_sequences_in_the_fatal_line_reach_neither_terminal_nor_record_but_stay_in_the_log(
        tmp_path, sim_target):
    """A fatal line holding OSC 52 (sets the clipboard) and OSC 0 (the window title) is shown escaped on the
    terminal and in the record's key line; server.log, the evidence, keeps the bytes as the host wrote them."""
    crash = ("    try:\n"
             "        raise RuntimeError('CUDA error: an illegal memory access was encountered '\n"
             "                           '\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b]0;pwned\\x1b\\\\ (warmup)')\n"
             "    except RuntimeError:\n"
             "        logger.error(f'Initialization failed. warmup error: {get_exception_traceback()}')\n"
             "        kill_process_tree(os.getpid())\n"
             "        return False\n")
    patches, _ = make_patch_set(tmp_path, "crash_with_osc", lambda repo: insert_after(
        repo / HTTP_SERVER, "def _execute_server_warmup(server_args):\n", crash))
    f = write_experiment(tmp_path, "fatal-osc", free_port(), backend="flashinfer-mla", patches=["crash_with_osc"],
                         bench=SMALL_BENCH)
    p, rec_dir = _run_cli_with_secret(tmp_path, sim_target, f, patches)
    rec = json.loads((rec_dir / "record.json").read_text())
    assert rec["status"] == "crashed", rec["error"]
    assert rec["verdict"]["category"] == "illegal-memory-access"
    key_line = rec["verdict"]["key_line"]
    assert "\x1b" not in key_line and "\x07" not in key_line
    assert "encountered \\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b]0;pwned\\x1b\\ (warmup)" in key_line  # shown, escaped
    terminal = p.stdout + p.stderr
    assert "\x1b" not in terminal and "\x07" not in terminal, terminal
    assert "\\x1b]52;c;cm0gLXJmIH4=" in p.stdout  # the crash was reported, escaped
    assert b"encountered \x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x1b\\ (warmup)" in (rec_dir / "server.log").read_bytes()


# ============================================================================ 3. per-version variants


def test_the_variant_made_for_the_hosts_sglang_is_applied_and_recorded(tmp_path, sim_target):
    """The simulated target (`harness-sim`): of a set with a variant for it and one for SGLang 0.5.16,
    the sim's runs (the 0.5.16 patch would not even apply here) and the record says which."""
    patches, _ = make_patch_set(tmp_path, "versioned", lambda repo: insert_after(
        repo / LAUNCH_SERVER, 'if __name__ == "__main__":\n', "    VARIANT = 'sim'\n"))
    old = patches / "versioned" / "sglang-0.5.16"
    old.mkdir()
    (old / "0001-old.patch").write_text("--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-x\n+y\n")
    (patches / "versioned" / "patchset.yaml").write_text(
        "applies_to: harness-sim\nvariants: {sglang==0.5.16: sglang-0.5.16}\n")
    before = tree_snapshot(sim_target.repo)
    host = local_host(sim_target, tmp_path)
    f = write_experiment(tmp_path, "versioned", free_port(), backend="flashinfer-mla", patches=["versioned"],
                         bench=SMALL_BENCH)
    rec, _, _ = attempt(tmp_path, host, f, patches)
    assert rec.status == "ok", rec.error
    assert rec.provenance.patch_variants == {"versioned": "harness-sim"}
    assert rec.changed_paths.restore == [LAUNCH_SERVER]
    assert tree_snapshot(sim_target.repo) == before


def test_a_host_whose_sglang_has_no_variant_is_refused_before_anything_changes(tmp_path, sim_target):
    patches, _ = make_patch_set(tmp_path, "elsewhere", lambda repo: insert_after(
        repo / LAUNCH_SERVER, 'if __name__ == "__main__":\n', "    VARIANT = 'none'\n"))
    folder = patches / "elsewhere"
    (folder / "v20").mkdir()
    (folder / "v20" / "0001-x.patch").write_text((folder / "0001-elsewhere.patch").read_text())
    (folder / "patchset.yaml").write_text("applies_to: sglang==0.5.16\nvariants: {sglang==0.5.20: v20}\n")
    before = tree_snapshot(sim_target.repo)
    host = local_host(sim_target, tmp_path)
    f = write_experiment(tmp_path, "elsewhere", free_port(), backend="flashinfer-mla", patches=["elsewhere"],
                         bench=SMALL_BENCH)
    rec, d, run_id = attempt(tmp_path, host, f, patches)
    assert rec.status == "preflight-failed"
    assert "elsewhere has variants for sglang==0.5.16, sglang==0.5.20" in rec.error and "harness-sim" in rec.error
    assert tree_snapshot(sim_target.repo) == before and not journal_file(sim_target.repo).exists()
    assert not (d / "server.log").exists() and marked_processes(run_id) == []


# ============================================================================ 7. writes only inside the tree


def test_a_whole_file_through_a_tracked_link_to_outside_is_refused_on_the_host_writing_nothing(
        tmp_path, sshd, sim_target):
    """The controller cannot see the host's tree: a tracked link there pointing outside is the agent's to
    notice — before a byte is written, so the tree and the folder outside stay as they were."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.txt").write_text("theirs\n")
    (sim_target.repo / "ext").symlink_to(outside)
    git(sim_target.repo, "add", "ext")
    git(sim_target.repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "a link to outside")
    folder = tmp_path / "patches" / "hostile" / "files" / "ext"
    folder.mkdir(parents=True)
    (folder / "evil.py").write_text("EVIL = 1\n")
    before = tree_snapshot(sim_target.repo)
    host = ("sim-ssh", HostConfig(**sshd.host_entry(), repo=str(sim_target.repo), python=str(sim_target.python),
                                  gpus=8, arch="sm90", workdir=str(tmp_path / "work")))
    f = write_experiment(tmp_path, "hostile", free_port(), patches=["hostile"], bench=SMALL_BENCH)
    rec, _, _ = attempt(tmp_path, host, f, tmp_path / "patches")

    assert rec.status == "apply-failed", rec.error
    assert rec.error is not None and "files/ext/evil.py" in rec.error and "symbolic link ext" in rec.error
    assert sorted(p.name for p in outside.iterdir()) == ["kept.txt"]
    assert tree_snapshot(sim_target.repo) == before and not journal_file(sim_target.repo).exists()
    assert rec.revert is None  # refused before anything changed: nothing reverted, so nothing claimed
