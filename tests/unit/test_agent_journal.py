"""The journal and recovery, run in-process against real git repositories (and real processes).

The journal on disk is read by a different agent than the one that wrote it — the next one after this
agent was SIGKILLed, or `harness recover` — and by `harness status`: whatever state this agent dies in,
what is on disk must be enough to stop its server and put the tree back. These tests kill the agent
(by stopping to drive it) at each point and let a fresh `Attempt` recover; the tree is judged with
`tree_snapshot`, the processes with `marked_processes` (tests/conftest.py).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harness.agent import watchdog
from harness.agent.attempt import Attempt
from harness.agent.serve import final_report
from harness.agent.tree import Git
from harness.common.protocol import ChangedPaths, Journal, RecoveryReport, RevertReport, Status, StopReport
from tests.conftest import marked_processes, tree_snapshot
from tests.unit.test_agent_tree import (
    RecordingLink,
    awkward_patch,
    diff_of,
    git,
    journal_path,
    make_repo,
    spec_for,
    stages,
)

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]  # a "server" that runs until stopped
AWKWARD_RESTORE = ["pkg/old_name.py", "pkg/server.py", "pkg/sub/gone.py", "run.sh", "tool.py"]
AWKWARD_DELETE = ["extra/dir/blob.bin", "pkg/new/deeper/deepest/module.py", "pkg/new_name.py"]
BLOB = [("extra/dir/blob.bin", b"blob", 0o644)]


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path)


def read_journal(repo: Path) -> dict:
    return json.loads(journal_path(repo).read_text())


def start_time(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat: what tells a process from a later one with the same pid."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def end_leftovers(run_id: str) -> None:
    """After the assertions' facts are taken: a test never leaves its own server running."""
    for pid in marked_processes(run_id + "/"):
        os.kill(pid, signal.SIGKILL)


def killed_while_patched(repo: Path, tmp_path: Path) -> None:
    """Attempt "killed" applied the awkward patch set, then its agent died (SIGKILL: no cleanup ran)."""
    dying = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], files=BLOB, attempt_id="killed"), RecordingLink())
    dying.take_lock()
    dying.apply(dying.preflight())
    dying.release_lock()  # the kernel drops a dead process's flock


def recover(repo: Path, tmp_path: Path, link: RecordingLink | None = None) -> dict:
    return Attempt(spec_for(repo, tmp_path, [], attempt_id="recover", run_id="rescuer"), link or RecordingLink()).recover()


# ------------------------------------------------------------------ what the journal says


def test_the_journal_while_patched_says_what_recovery_and_harness_status_need(repo, tmp_path):
    head = git(repo, "rev-parse", "HEAD").strip()
    seen: dict = {}
    def look() -> None:
        seen.update(read_journal(repo))
        backup = Path(seen["backup"])
        seen["saved"] = sorted(str(p.relative_to(backup)) for p in backup.rglob("*") if not p.is_dir())

    link = RecordingLink({"compile": look})
    attempt = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], files=BLOB), link)
    result = attempt.run()
    assert result.status == "ok", result.error

    expected = {"version": 4, "run_id": "r1", "attempt_id": "a1", "marker": "r1/a1", "agent_pid": os.getpid(),
                "repo": str(repo), "base_commit": head, "dirty_before": ["notes.txt"], "restore": AWKWARD_RESTORE,
                "delete": AWKWARD_DELETE, "server": None, "state": "applied", "checkout": None}
    assert {k: seen.get(k, "(missing)") for k in expected} == expected
    # Nothing else: recovery by another agent version reads exactly these keys.
    assert set(seen) == set(expected) | {"created_dirs", "tree_before", "created", "backup", "ignored_before",
                                         "saved"}
    created_dirs = seen["created_dirs"]  # deepest first: each is removed once emptied
    assert sorted(created_dirs) == ["extra", "extra/dir", "pkg/new", "pkg/new/deeper", "pkg/new/deeper/deepest"]
    assert [d.count("/") for d in created_dirs] == sorted((d.count("/") for d in created_dirs), reverse=True)
    assert len(seen["tree_before"]) == 64
    # The raw bytes of every file to restore are saved beside the journal before the first change (and
    # removed with the journal once the revert is verified).
    assert Path(seen["backup"]).parent == repo / ".git" / "harness"
    assert seen["saved"] == sorted(AWKWARD_RESTORE)
    assert not Path(seen["backup"]).exists()
    created = datetime.strptime(seen["created"], "%Y-%m-%dT%H:%M:%S%z")
    assert abs(datetime.now(timezone.utc) - created) < timedelta(minutes=10)

    assert result.patch.changed_paths == ChangedPaths(restore=AWKWARD_RESTORE, delete=AWKWARD_DELETE)
    assert stages(link) == ["lock", "preflight", "patch", "compile", "revert"]
    assert final_report(result, attempt, link).status == "ok"  # every key is one the protocol declares


class KilledHere(BaseException):
    """Stands for SIGKILL: nothing after this point runs in the dying agent."""


def edits_deletions_new_dirs_and_modes(s: Path) -> None:
    (s / "pkg" / "new" / "deeper").mkdir(parents=True)
    (s / "pkg" / "new" / "deeper" / "module.py").write_text("NEW = True\n")
    (s / "pkg" / "sub" / "gone.py").unlink()
    (s / "pkg" / "server.py").write_text("def serve():\n    return 'patched'\n")
    (s / "tool.py").chmod(0o755)


def a_rename(s: Path) -> None:
    (s / "pkg" / "old_name.py").rename(s / "pkg" / "new_name.py")




@pytest.mark.parametrize("edit", [edits_deletions_new_dirs_and_modes,
                                  a_rename])
def test_agent_killed_right_after_git_apply_is_recovered_from_the_journal_written_before(repo, tmp_path, edit):
    class DiesRightAfterGitApply(Git):
        def __call__(self, *args, **kw):
            p = super().__call__(*args, **kw)
            if args[0] == "apply" and "--check" not in args and "--numstat" not in args:
                raise KilledHere()
            return p

    before = tree_snapshot(repo)
    dying = Attempt(spec_for(repo, tmp_path, [diff_of(repo, edit)], files=BLOB, attempt_id="killed"), RecordingLink())
    dying.take_lock()
    plan = dying.preflight()
    dying.tree.git = DiesRightAfterGitApply(dying.repo)
    with pytest.raises(KilledHere):
        dying.apply(plan)
    dying.release_lock()
    assert tree_snapshot(repo) != before  # the patch is in the tree

    journal = read_journal(repo)
    assert journal["state"] == "applying" and journal["attempt_id"] == "killed"
    result = recover(repo, tmp_path)
    assert result.status == "ok", result.error
    assert result.recovered.revert.verified is True
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_a_journal_file_that_is_not_a_json_object_is_not_taken_for_a_journal(repo, tmp_path):
    journal_path(repo).parent.mkdir(parents=True)
    journal_path(repo).write_text("[]")
    before = tree_snapshot(repo)
    result = recover(repo, tmp_path)
    assert result.status == "ok", result.error
    assert result.recovered is None and "nothing to recover" in result.message
    assert tree_snapshot(repo) == before


# ------------------------------------------------------------------ a server and its end


def test_cleanup_stops_the_server_it_launched_then_restores_the_tree(repo, tmp_path):
    before = tree_snapshot(repo)
    run_id = "serve-" + tmp_path.name
    link = RecordingLink()
    attempt = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], run_id=run_id, mode="attempt", argv=SLEEPER), link)
    try:
        attempt.take_lock()
        attempt.apply(attempt.preflight())
        attempt.launch()
        pid = attempt.server.proc.pid
        started = start_time(pid)
        running = read_journal(repo)  # before anything else happens, the journal knows the server
        attempt.cleanup()
        alive = marked_processes(run_id + "/")
    finally:
        end_leftovers(run_id)

    assert running["state"] == "running"
    assert running["server"] == {"pid": pid, "pgid": pid, "start": started}
    assert alive == []
    assert attempt.result.server.stop.signal == "TERM" and attempt.result.server.stop.left == []
    assert stages(link) == ["stop", "revert"]
    assert attempt.result.revert.verified is True
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()
    assert final_report(attempt.result, attempt, link).status == "ok"


def test_agent_killed_while_its_server_runs_the_next_agent_stops_that_server_and_restores_the_tree(repo, tmp_path):
    before = tree_snapshot(repo)
    run_id = "killed-" + tmp_path.name
    dying = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], run_id=run_id, attempt_id="killed",
                             mode="attempt", argv=SLEEPER), RecordingLink())
    link = RecordingLink()
    try:
        dying.take_lock()
        dying.apply(dying.preflight())
        dying.launch()
        dying.release_lock()  # killed: no cleanup, the server goes on
        pid = dying.server.proc.pid
        result = recover(repo, tmp_path, link)
        alive = marked_processes(run_id + "/")
    finally:
        end_leftovers(run_id)

    assert alive == []
    assert result.status == "ok", result.error
    assert result.recovered.stop.state == "stopped"
    assert [e["journal"]["server"]["pid"] for e in link.events if e["event"] == "recovering"] == [pid]
    assert result.recovered.revert.verified is True
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


# ------------------------------------------------------------------ recover, and what it refuses


def test_recover_reports_its_stages_and_its_wall_time(repo, tmp_path):
    link = RecordingLink()
    attempt = Attempt(spec_for(repo, tmp_path, []), link)
    t0 = time.monotonic()
    attempt.recover()
    elapsed = time.monotonic() - t0
    assert stages(link) == ["lock", "recover"]
    assert set(attempt.timings) == {"lock_s", "recover_s", "total_s"}
    assert 0 < attempt.timings["total_s"] <= round(elapsed, 4)  # rounded to 0.1 ms, as the stages are


def test_recover_while_another_agent_holds_the_lock_names_it_and_changes_nothing(repo, tmp_path):
    holder = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], attempt_id="holder"), RecordingLink())
    holder.take_lock()
    holder.apply(holder.preflight())
    try:
        patched, journal = tree_snapshot(repo), journal_path(repo).read_text()
        result = recover(repo, tmp_path)
        assert tree_snapshot(repo) == patched and journal_path(repo).read_text() == journal
    finally:
        holder.cleanup()
    assert result.status == "infra-error"
    assert result.preflight.locked_by.attempt_id == "holder" and result.preflight.locked_by.run_id == "r1"
    assert "holder" in result.error


def test_a_revert_that_fails_is_reported_as_infra_error_and_the_journal_kept_for_recovery(repo, tmp_path):
    before = tree_snapshot(repo)
    index_lock = repo / ".git" / "index.lock"  # another git command holds the index while we revert
    link = RecordingLink({"compile": lambda: index_lock.write_text("")})
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run()
    assert result.status == "infra-error"
    assert "cleanup failed" in result.error and "index.lock" in result.error
    assert journal_path(repo).exists()

    index_lock.unlink()
    assert recover(repo, tmp_path).status == "ok"
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()


def test_recovery_that_cannot_restore_exactly_refuses_naming_the_attempt_and_up_to_20_changed_paths(repo, tmp_path):
    killed_while_patched(repo, tmp_path)
    strays = [f"core.{i}" for i in range(25)]
    for name in strays:
        (repo / name).write_bytes(b"core dump")
    result = recover(repo, tmp_path)
    assert result.status == "preflight-failed"
    assert "killed" in result.error
    listed = result.error.split("changed paths: ", 1)[1].split(", ")
    assert len(listed) == 20 and set(listed) <= set(strays)
    assert result.recovered.revert.verified is False and journal_path(repo).exists()


def test_recovery_after_git_pruned_the_recorded_tree_still_refuses_naming_the_attempt(repo, tmp_path):
    """Weeks later, `git gc` has pruned the (unreachable) tree object the journal recorded: git can no longer
    say what differs, but the recovery still reports the interrupted attempt instead of failing in git."""
    killed_while_patched(repo, tmp_path)
    (repo / "core.1").write_bytes(b"core dump")
    git(repo, "gc", "-q", "--prune=now")
    result = recover(repo, tmp_path)
    assert result.status == "preflight-failed"
    assert result.recovered.journal.attempt_id == "killed"
    assert result.recovered.revert.verified is False and journal_path(repo).exists()


# ------------------------------------------------------------------ what the revert saves, checks and reports


def test_files_left_under_ignored_paths_are_named_even_in_a_folder_already_ignored(repo, tmp_path):
    latin1 = os.fsdecode(b"dump-\xe9.bin")

    def leave_files() -> None:
        (repo / "build" / "new.o").write_bytes(b"x")  # build/ is ignored and existed before
        (repo / "build" / latin1).write_bytes(b"y")

    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), RecordingLink({"compile": leave_files})).run()
    assert result.status == "ok", result.error
    assert result.revert.verified is True  # ignored files are not the user's tree...
    assert result.revert.stray_ignored == ["build/dump-\ufffd.bin", "build/new.o"]  # ...but they are named


def test_nothing_left_under_ignored_paths_names_nothing(repo, tmp_path):
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), RecordingLink()).run()
    assert result.status == "ok" and result.revert.stray_ignored is None


def test_a_backup_left_by_a_recovered_attempt_is_replaced_not_reused(repo, tmp_path):
    stale = repo / ".git" / "harness" / "backup" / "pkg" / "server.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("bytes from some earlier attempt\n")
    before = tree_snapshot(repo)
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), RecordingLink()).run()
    assert result.status == "ok", result.error
    assert tree_snapshot(repo) == before


def test_without_its_saved_bytes_the_revert_restores_every_file_from_the_base_commit(repo, tmp_path):
    """A journal written by an older agent has no backup; a backup lost to a full disk neither."""
    import shutil

    before = tree_snapshot(repo)
    dying = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), RecordingLink())
    dying.take_lock()
    dying.apply(dying.preflight())
    dying.release_lock()
    shutil.rmtree(repo / ".git" / "harness" / "backup")
    result = Attempt(spec_for(repo, tmp_path, [], attempt_id="rescue"), RecordingLink()).recover()
    assert result.recovered.revert.verified is True
    assert "nothing to recover" not in (result.message or ""), "it did recover: the message must not say not"
    assert tree_snapshot(repo) == before


def test_an_unverified_revert_without_the_snapshot_file_still_reports_and_keeps_the_journal(repo, tmp_path):
    def stray() -> None:
        (repo / "core.1").write_bytes(b"x")
        (repo / ".git" / "harness" / "manifest.json").unlink()  # lost (an older agent never wrote one)

    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), RecordingLink({"compile": stray})).run()
    assert result.revert.verified is False and "core.1" in result.revert.diff
    assert journal_path(repo).exists()


def test_an_unverified_revert_says_so_in_the_records_error(repo, tmp_path):
    """The words a user reads: the attempt ends infra-error saying the revert could not be verified (not a
    traceback of the cleanup)."""
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]),
                     RecordingLink({"compile": lambda: (repo / "core.1").write_bytes(b"x")})).run()
    assert result.status == Status.INFRA_ERROR and result.revert.verified is False
    assert result.error == "revert could not be verified"


def test_what_the_plan_misses_the_journal_still_covers(repo, tmp_path, monkeypatch):
    """Defence in depth: should git ever describe a patch in a way the plan cannot read, the check against
    git status after applying adds every changed path to the journal before anything else happens."""
    import harness.agent.tree as tree_module

    monkeypatch.setattr(tree_module, "numstat_paths", lambda raw: set())
    monkeypatch.setattr(tree_module, "rename_sources", lambda text: set())
    before = tree_snapshot(repo)
    seen: dict = {}
    link = RecordingLink({"compile": lambda: seen.update(read_journal(repo))})
    result = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run()
    assert result.status == "ok", result.error
    assert seen["restore"] == AWKWARD_RESTORE
    assert seen["delete"] == ["pkg/new/deeper/deepest/module.py", "pkg/new_name.py"]
    assert tree_snapshot(repo) == before


def fake_nvidia_smi(bin_dir: Path, held: dict[int, int], released_after: int | None = None) -> Path:
    """A `python` beside an `nvidia-smi` that reports `held` ({pid: MiB}) as compute apps — forever, or for
    the first `released_after` queries (a context that takes a moment to go)."""
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    apps = "\\n".join(f"{pid}, {mib}" for pid, mib in held.items())
    counter = bin_dir / "queries"
    limit = released_after if released_after is not None else 10 ** 9
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncase \"$1\" in --query-compute-apps*)\n"
                   f"  echo x >> {counter}\n"
                   f"  [ \"$(wc -l < {counter})\" -le {limit} ] && printf '{apps}\\n';;\n"
                   f"*) printf '0, NVIDIA H200, 9.0, 143771, 1\\n';; esac\n")
    smi.chmod(0o755)
    return bin_dir / "python"


def die_while_serving(repo: Path, tmp_path: Path, server) -> None:
    """An agent that applied the patches, launched `server` and was then killed (no cleanup ran)."""
    dying = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), RecordingLink())
    dying.take_lock()
    dying.apply(dying.preflight())
    dying._journal_server(server.pid, server.pid, start_time(server.pid))
    dying.release_lock()


def test_recovery_whose_server_still_holds_gpu_memory_refuses_the_attempt_naming_it(repo, tmp_path):
    server = __import__("subprocess").Popen(SLEEPER, start_new_session=True)
    try:
        die_while_serving(repo, tmp_path, server)
        python = fake_nvidia_smi(tmp_path / "bin", {server.pid: 4242})
        spec = spec_for(repo, tmp_path, [], attempt_id="next")
        spec.server.argv = [str(python)]
        spec.timeouts.gpu_release = 0.3
        result = Attempt(spec, RecordingLink()).run()
    finally:
        server.kill()
        server.wait()
    assert result.status == "preflight-failed"
    assert "still holds GPU memory" in result.error and str(server.pid) in result.error
    assert result.gpu_dirty == {str(server.pid): 4242}
    assert result.recovered.stop.gpu_dirty == {str(server.pid): 4242}
    assert result.recovered.revert.verified is True


def test_gpu_memory_a_recovery_left_held_refuses_every_next_attempt_whoever_recovered(repo, tmp_path):
    """The recovery above was a preflight's, not the watchdog's (a controller or `harness recover` can take
    the lock first): the attempt after it must still see the memory held, not launch into a false OOM."""
    server = __import__("subprocess").Popen(SLEEPER, start_new_session=True)
    try:
        die_while_serving(repo, tmp_path, server)
        python = fake_nvidia_smi(tmp_path / "bin", {server.pid: 4242})
        results = []
        for attempt_id in ("next", "after-next"):
            spec = spec_for(repo, tmp_path, [], attempt_id=attempt_id)
            spec.server.argv = [str(python)]
            spec.timeouts.gpu_release = 0.3
            results.append(Attempt(spec, RecordingLink()).run())
    finally:
        server.kill()
        server.wait()
    assert results[0].recovered.by == "recover"
    assert results[1].status == "preflight-failed", results[1].error
    assert str(server.pid) in results[1].error and results[1].gpu_dirty == {str(server.pid): 4242}


def test_recover_reports_what_the_watchdog_already_did(repo, tmp_path):
    report = {"journal": {"run_id": "r1", "attempt_id": "a1"}, "stop": {"state": "stopped"},
              "revert": {"verified": True}, "by": "watchdog", "took_s": 1.5}
    (repo / ".git" / "harness").mkdir(exist_ok=True)
    (repo / ".git" / "harness" / "watchdog.json").write_text(json.dumps(report))
    result = Attempt(spec_for(repo, tmp_path, [], attempt_id="rescue"), RecordingLink()).recover()
    assert result.recovered == RecoveryReport(journal=Journal(run_id="r1", attempt_id="a1"),
                                              stop=StopReport(state="stopped"), revert=RevertReport(verified=True),
                                              by="watchdog", took_s=1.5)
    assert "nothing to recover" in result.message


def test_recovery_waits_for_gpu_memory_to_be_released_as_after_a_normal_stop(repo, tmp_path):
    """A dying CUDA context frees its memory a moment after the process is gone: recovery waits for it
    (up to `gpu_release`) instead of refusing the next attempt at once."""
    server = __import__("subprocess").Popen(SLEEPER, start_new_session=True)
    try:
        die_while_serving(repo, tmp_path, server)
        python = fake_nvidia_smi(tmp_path / "bin", {server.pid: 4242}, released_after=3)
        spec = spec_for(repo, tmp_path, [], attempt_id="next")
        spec.server.argv = [str(python)]
        spec.timeouts.gpu_release = 30.0
        result = Attempt(spec, RecordingLink()).run()
    finally:
        server.kill()
        server.wait()
    assert result.status == "ok", result.error
    assert result.recovered.stop.gpu_dirty is None



# ------------------------------------------------------------------ the watchdog


def hand_to_watchdog(repo: Path, tmp_path: Path) -> int:
    """Make the journal's agent a process that has ended (in-process, the agent is this test), then run
    the watchdog for it as the agent's own spawn would; returns the watchdog's exit code."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    journal = read_journal(repo)
    journal["agent_pid"] = ended.pid
    journal_path(repo).write_text(json.dumps(journal))
    args = {"repo": str(repo), "scratch": str(tmp_path / "work" / "watchdog"), "agent_pid": ended.pid,
            "agent_start": None, "stop_grace": 1, "gpu_release": 1, "path": os.environ.get("PATH", "")}
    return watchdog.watch(base64.b64encode(json.dumps(args).encode()).decode())


def watchdog_report(repo: Path) -> Path:
    return repo / ".git" / "harness" / "watchdog.json"


def test_watchdog_restores_the_tree_of_an_agent_that_died_while_patched(repo, tmp_path):
    before = tree_snapshot(repo)
    killed_while_patched(repo, tmp_path)
    assert hand_to_watchdog(repo, tmp_path) == 0
    assert tree_snapshot(repo) == before and not journal_path(repo).exists()
    report = json.loads(watchdog_report(repo).read_text())
    assert report["by"] == "watchdog" and report["revert"]["verified"] is True
    assert report["journal"]["attempt_id"] == "killed"


def test_watchdog_leaves_alone_a_journal_its_agent_kept_after_an_unverified_revert(repo, tmp_path):
    """The agent reverted, could not verify, kept the journal for the next preflight and exited normally.
    The watchdog must not take that for a dead agent's work: it would take the lock and race (and make
    fail as locked) the very next attempt, which is what is meant to refuse the tree and say why."""
    link = RecordingLink({"compile": lambda: (repo / "core.7").write_bytes(b"x")})
    assert Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)]), link).run().revert.verified is False
    left = tree_snapshot(repo)
    kept = read_journal(repo)
    assert hand_to_watchdog(repo, tmp_path) == 0
    assert not watchdog_report(repo).exists(), "the watchdog acted on a journal its agent had closed"
    assert tree_snapshot(repo) == left
    assert {k: v for k, v in read_journal(repo).items() if k != "agent_pid"} == \
        {k: v for k, v in kept.items() if k != "agent_pid"}


def test_a_recovery_that_cannot_restore_the_tree_is_the_records_revert_unverified_naming_the_path(repo, tmp_path):
    """The agent died while patched and something changed a file the journal does not list: the controller's
    recovery (a real agent, through the local transport) cannot restore it, and the dead attempt's record
    says so in `revert` — not `revert: null` — naming the path, beside `recovered`."""
    from harness.errors import AgentProtocolError
    from harness.experiments.config import HostConfig
    from harness.experiments.resolve import resolve_file
    from harness.experiments.spec import build_spec
    from harness.hosts.direct import connect
    from harness.run.recording import AgentReport, make_record
    from harness.run.runner import SilentReporter, _recover_after_agent_death
    from tests.conftest import PATCHES, write_experiment

    killed_while_patched(repo, tmp_path)  # journal of attempt "killed" of run "r1"
    with open(repo / "pkg" / "__init__.py", "a") as f:  # tracked, not patched: nothing to restore it from
        f.write("# written while patched\n")
    host = HostConfig(address="local", repo=str(repo), python=sys.executable, workdir=str(tmp_path / "work"))
    exp = write_experiment(tmp_path, "victim", 30000)
    resolved = resolve_file(exp, PATCHES)
    spec = build_spec(resolved, host, run_id="r1", attempt_id="killed")

    final = _recover_after_agent_death(connect, "box", host, spec, SilentReporter(), "victim@box")
    record = make_record(resolved, "box", "r1", "01", spec, AgentReport(final=final), tmp_path,
                         AgentProtocolError("the agent on the host ended without a final report"), 1.0)

    assert record.status == "infra-error"
    assert record.recovered is not None and record.recovered.revert.verified is False
    assert record.revert is not None and record.revert.verified is False
    assert "pkg/__init__.py" in (record.revert.diff or [])
    assert json.loads(record.to_json())["revert"]["diff"] == record.revert.diff


def test_an_attempt_whose_controller_was_killed_learns_from_the_next_attempt_what_became_of_the_tree(repo, tmp_path):
    """Controller and agent both died while patched: the attempt kept only its provisional record. The next
    attempt on the host (a real one, through the local transport) recovers the journal; that provisional
    record then carries the recovery — `recovered`, and `revert` verified — instead of `revert: null`."""
    from harness.errors import HarnessError
    from harness.experiments.config import HostConfig
    from harness.experiments.resolve import resolve_file
    from harness.results.attemptdir import PROVISIONAL
    from harness.results.schemas import Record
    from harness.results.store import ResultsStore, load_record
    from harness.run.runner import run_attempt
    from tests.conftest import PATCHES, write_experiment

    before = tree_snapshot(repo)
    store = ResultsStore(tmp_path / "results")
    dead = store.new_attempt_dir("r1", "victim", "01")
    store.write_provisional(dead, Record(run_id="r1", experiment="victim", attempt="01", host="box", status="aborted",
                                         error="provisional record", provisional=True))
    dying = Attempt(spec_for(repo, tmp_path, [awkward_patch(repo)], attempt_id="victim-01", run_id="r1"),
                    RecordingLink())
    dying.take_lock()
    dying.apply(dying.preflight())
    dying.release_lock()  # both died here: no cleanup, no record.json

    host = HostConfig(address="local", repo=str(repo), python=sys.executable, workdir=str(tmp_path / "work"),
                      allow_dirty=("notes.txt",))
    f = write_experiment(tmp_path, "next", 30000)
    try:
        run_attempt(resolve_file(f, PATCHES), "box", host, store, "r2")
    except HarnessError:
        pass  # whatever became of the next attempt itself (nothing here is an SGLang): its recovery is the point
    assert tree_snapshot(repo) == before

    rec = load_record(dead / PROVISIONAL)
    assert rec.recovered is not None and rec.recovered.journal["attempt_id"] == "victim-01"
    assert rec.revert is not None and rec.revert.verified is True and rec.revert.tree_after == rec.revert.tree_before
    assert rec.status == "aborted" and not (dead / "record.json").exists()


def test_the_server_and_its_clients_keep_bytecode_even_where_the_host_forbids_it(tmp_path, monkeypatch):
    """Live on an H200 image (PYTHONDONTWRITEBYTECODE=1) every benchmark client compiled SGLang from source
    again, ~40 s each: the attempt's processes write bytecode, into the harness's own prefix only."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = Attempt(spec_for(repo, tmp_path, []), RecordingLink()).server_env()
    assert "PYTHONDONTWRITEBYTECODE" not in env
    module = tmp_path / "src" / "heavy_module.py"
    module.parent.mkdir()
    module.write_text("VALUE = 1\n")
    subprocess.run([sys.executable, "-c", "import heavy_module"], cwd=module.parent, env=env, check=True)
    cached = list(Path(env["PYTHONPYCACHEPREFIX"]).rglob("heavy_module*.pyc"))
    assert len(cached) == 1, "no bytecode written under the prefix"
    assert not (module.parent / "__pycache__").exists(), "bytecode beside the sources"


def _held_lock(tmp_path, attempt_id: str):
    from harness.agent.lock import RepoLock
    from harness.common.protocol import LockHolder

    holder = RepoLock(str(tmp_path))
    holder.acquire("/repo", LockHolder(run_id="r0", attempt_id=attempt_id), 0.0, lambda: None)
    return holder, RepoLock(str(tmp_path))


def test_an_attempt_waits_for_a_watchdogs_cleanup_instead_of_calling_the_repo_busy(tmp_path):
    """Seen in the Slurm retry of a killed agent: the retried job found the repo locked by the dead agent's
    watchdog (stopping its server, reverting) and failed; a cleanup is bounded, so the attempt waits for it."""
    from harness.agent.lock import WATCHDOG
    from harness.common.protocol import LockHolder

    watchdog, mine = _held_lock(tmp_path, WATCHDOG)
    ticks: list[int] = []

    def tick() -> None:  # the watchdog finishes while we wait
        ticks.append(1)
        watchdog.release()

    mine.acquire("/repo", LockHolder(run_id="r1", attempt_id="a1"), 0.0, tick, cleanup_wait_s=60.0)
    assert ticks == [1] and mine.holder().attempt_id == "a1"
    mine.release()


def test_another_attempt_holding_the_lock_is_still_refused_at_once(tmp_path):
    from harness.agent.errors import StageFailed
    from harness.common.protocol import LockHolder

    other, mine = _held_lock(tmp_path, "someone-else")
    with pytest.raises(StageFailed, match="locked by run r0 attempt someone-else"):
        mine.acquire("/repo", LockHolder(run_id="r1", attempt_id="a1"), 0.0,
                     lambda: pytest.fail("waited for a holder that is no cleanup"), cleanup_wait_s=60.0)
    other.release()
