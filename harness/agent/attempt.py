"""One attempt as a sequence of stages — and nothing else: each stage's work lives in its own module.

    lock → preflight (recover a leftover journal first) → patch → launch → wait → [answers] → bench → [profile]
         → stop → revert/verify                                  (cleanup runs on every path)
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any, Optional

from ..common.outcome import JournalCheckout
from ..common.protocol import (
    ChangedPaths,
    Final,
    Journal,
    JournalServer,
    LockHolder,
    Mode,
    PreflightWarning,
    Ready,
    Recovering,
    RecoveryReport,
    Spec,
    StageChanged,
    Status,
)
from ..common.targetid import read_server_version, target_identity
from . import watchdog
from .answers import check_answers
from .bench import Load
from .checkout import check_out, current_ref, refuse_changes, resolve_commit
from .errors import Aborted, FailureFacts, StageFailed, abort_message
from .gpu import wait_gpu_release
from .link import Link
from .lock import RepoLock
from .procs import MARKER_ENV, pick_free_port, port_free
from .profiling import Capture
from .server import Server
from .stack import read_stack
from .status import stop_recorded_server
from .target import choose_variants, fit_problems
from .tree import UNVERIFIED, Tree


class Attempt:
    def __init__(self, spec: Spec, link: Link, watchdog: bool = False) -> None:
        self.spec = spec
        self.watchdog = watchdog  # start the host-side watchdog (only when running as the shipped zipapp)
        self.link = link
        self.repo = os.path.abspath(os.path.expanduser(spec.repo))
        self.workdir = os.path.abspath(os.path.expanduser(spec.workdir or "~/.cache/harness"))
        self.attempt_dir = os.path.join(self.workdir, "attempts", spec.run_id, spec.attempt_id)
        self.marker = "%s/%s" % (spec.run_id, spec.attempt_id)
        self.tree = Tree(self.repo, self.attempt_dir)
        self.lock: Optional[RepoLock] = None
        self.journal: Optional[Journal] = None
        self.patches, self.files = spec.patches, spec.files  # narrowed to the host's variants in preflight
        self.server: Optional[Server] = None
        self.timings: dict[str, float] = {}
        self.result = Final(status=Status.OK)  # filled in stage by stage; sent as the final report
        self._stage: Optional[str] = None
        self._stage_t = 0.0
        self.t_start = time.monotonic()

    @property
    def log_path(self) -> str:
        return os.path.join(self.attempt_dir, "server.log")

    # ------------------------------------------------------------------ plumbing

    def stage(self, name: Optional[str]) -> None:
        now = time.monotonic()
        if self._stage is not None:
            self.timings[self._stage + "_s"] = round(now - self._stage_t, 4)
        self._stage, self._stage_t = name, now
        if name is not None:
            self.link.send(StageChanged(stage=name))

    def check_abort(self) -> None:
        """Between and inside stages: the budget, the controller's heartbeat, an abort on the link."""
        deadline = self.spec.deadline_s
        if deadline and time.monotonic() - self.t_start > float(deadline) and not self.link.abort_reason:
            self.result.budget_exceeded = True
            self.link.abort("the attempt's time budget of %ss is spent" % deadline)
        hb = self.spec.heartbeat_timeout_s
        if hb and time.monotonic() - self.link.last_heard > hb:
            self.link.abort("controller-silent")
        if self.link.abort_reason:
            raise Aborted(self.link.abort_reason)

    def server_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.spec.server.env)
        python = str(self.spec.server.argv[0])
        if os.path.isabs(python):
            env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        # Bytecode goes to our work dir, not into __pycache__/ beside the sources: the target tree must
        # stay byte-identical even where the repo does not ignore __pycache__. And it is written there even
        # where the host forbids bytecode (container images often set PYTHONDONTWRITEBYTECODE): otherwise the
        # server and every benchmark client compile SGLang, torch's Python side and transformers from source
        # again (~40 s a process, seen live on an H200 image) — the folder is ours.
        env["PYTHONPYCACHEPREFIX"] = os.path.join(self.workdir, "pycache")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env[MARKER_ENV] = self.marker
        return env

    def fail(self, exc: BaseException) -> None:
        if isinstance(exc, StageFailed) and self.link.abort_reason and self.link.abort_reason.startswith("signal "):
            # The stop signal reached the whole process tree (scancel, a job's end, a closed terminal): what failed
            # meanwhile — a benchmark client killed by the same signal — is its consequence, not a result.
            self._end(Status.ABORTED, "%s (meanwhile: %s)" % (abort_message(self.link.abort_reason),
                                                              exc.message.strip()))
        elif isinstance(exc, Aborted):
            self._end(Status.ABORTED, abort_message(str(exc)))
        elif isinstance(exc, StageFailed):
            self._end(exc.status, exc.message)
            exc.facts.record_in(self.result)
        else:
            self._end(Status.INFRA_ERROR, "agent error:\n" + traceback.format_exc())

    def _end(self, status: Status, error: str) -> None:
        self.result.status, self.result.error = status, error

    # ------------------------------------------------------------------ the sequences

    def run(self) -> Final:
        t0 = self.t_start = time.monotonic()
        try:
            self.stage("lock")
            self.take_lock()
            if self.watchdog:  # from here on the tree may change: cover this agent's own death
                watchdog.spawn(self.repo, self.attempt_dir, self.server_env(), float(self.spec.timeouts.stop_grace),
                               float(self.spec.timeouts.gpu_release))
            self.stage("preflight")
            self.recover_leftover_journal()
            plan = self.preflight()
            self.check_abort()
            self.stage("patch")
            self.apply(plan)
            self.check_abort()
            if self.spec.mode == Mode.APPLY_REVERT.value:
                self.stage("compile")
                self.compile_changed()
                return self.result
            self.stage("launch")
            self.launch()
            self.stage("wait")
            assert self.server is not None
            ready_s = self.server.wait_ready()
            self.timings["ready_s"] = ready_s
            self.link.send(Ready(ready_s=round(time.monotonic() - self.server.t_launch, 3)))
            load = Load(self.spec, self.link, self.server, self.attempt_dir, self.server_env(), self.check_abort,
                        self.result)
            if self.spec.answers:
                # Before the benchmark: a short check whose answers must exist even when the attempt's budget
                # ends during a long bench (the reference of a slow stock backend, seen live), and whose
                # traffic warms the server before the first measured case instead of after the last.
                self.stage("answers")
                self.timings["answers_s"] = check_answers(load)
            self.stage("bench")
            self.timings["bench_s"] = load.bench()
            if self.spec.profile:
                self.stage("profile")
                Capture(load).run()  # never fails the attempt: a profile that did not come is `profile_error`
        except Exception as exc:
            self.fail(exc)
        finally:
            self.cleanup()
            self.timings["total_s"] = round(time.monotonic() - t0, 4)
        return self.result

    def recover(self) -> Final:
        """On demand: take the lock, and if a journal is left, stop its server and restore the tree."""
        t0 = time.monotonic()
        try:
            self.stage("lock")
            self.take_lock()
            self.stage("recover")
            if not self.recover_leftover_journal():
                self.result.recovered = watchdog.last_report(self.tree)
                self.result.message = "no journal: nothing to recover"
        except Exception as exc:
            self.fail(exc)
        finally:
            self.stage(None)
            self.release_lock()
            self.timings["total_s"] = round(time.monotonic() - t0, 4)
        return self.result

    def cleanup(self) -> None:
        """Stop and revert on every path; a failure here is reported, never swallowed."""
        try:
            if self.server is not None and self.server.proc is not None:
                self.stage("stop")
                self.result.server.stop = self.server.stop()
            if self.journal is not None:
                self.stage("revert")
                revert = self.tree.revert(self.journal)
                self.result.revert = revert
                if revert.verified:
                    self.journal = None
                else:
                    # This agent did its own cleanup; the kept journal is for the next preflight, not for
                    # the watchdog (which would otherwise take it for a dead agent's and race that preflight).
                    self.journal.state = UNVERIFIED
                    self.tree.save(self.journal)
                if not revert.verified and self.result.status == Status.OK:
                    self._end(Status.INFRA_ERROR, "revert could not be verified")
        except Exception:
            self._end(Status.INFRA_ERROR, "cleanup failed:\n" + traceback.format_exc())
        finally:
            self.stage(None)
            self.release_lock()

    # ------------------------------------------------------------------ stages

    def take_lock(self) -> None:
        harness_dir = self.tree.open()
        self.lock = RepoLock(harness_dir)
        # A watchdog still cleaning up after a killed agent (stop its server, revert) holds the lock for a
        # bounded time: wait for it — seen as a retried Slurm job that found the repo locked and failed.
        t = self.spec.timeouts
        cleanup = float(t.stop_grace) + float(t.gpu_release) + 30.0
        self.lock.acquire(self.repo, LockHolder(run_id=self.spec.run_id, attempt_id=self.spec.attempt_id),
                          float(self.spec.lock_wait_s or 0), self._wait_tick, cleanup_wait_s=cleanup)

    def _wait_tick(self) -> None:
        self.check_abort()
        self.link.wake.wait(0.25)

    def release_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def recover_leftover_journal(self) -> bool:
        """A journal left by an interrupted attempt: stop its server, restore the tree. Refuse to go on
        when the tree cannot be restored exactly."""
        journal = self.tree.leftover_journal()
        if journal is None:
            return False
        self.link.send(Recovering(journal=journal))
        stopped = stop_recorded_server(journal, float(self.spec.timeouts.stop_grace), self.server_env(),
                                       float(self.spec.timeouts.gpu_release))
        revert = self.tree.revert(journal)
        self.result.recovered = RecoveryReport(journal=journal, stop=stopped, revert=revert, by="recover")
        watchdog.save_report(self.tree, self.result.recovered)
        if not revert.verified:
            raise StageFailed(Status.PREFLIGHT_FAILED,
                              "found the journal of an interrupted attempt (%s) and could not restore the "
                              "tree exactly; changed paths: %s" % (journal.attempt_id, ", ".join(revert.diff[:20])))
        if stopped.gpu_dirty:
            raise StageFailed(Status.PREFLIGHT_FAILED, "the interrupted attempt's server still holds GPU memory after "
                              "recovery: %s" % stopped.gpu_dirty, FailureFacts(gpu_dirty=stopped.gpu_dirty))
        return True

    def preflight(self) -> dict[str, Any]:
        """Everything that can refuse the attempt, before anything changes on the host (a bisect step's checkout
        aside: what the tree holds is then the commit's, so it comes first, journaled)."""
        facts = self.result.preflight
        os.makedirs(self.attempt_dir, exist_ok=True)
        head = self.check_out(self.spec.checkout) if self.spec.checkout else self.tree.head()
        facts.base_commit = head
        self.tree.check_base(self.spec.base_ref, head)
        facts.server_version = read_server_version(self.repo)
        self.patches, self.files, chosen, problems = choose_variants(self.spec.patches, self.spec.files,
                                                                     target_identity(self.repo))
        if chosen:
            facts.patch_variants = chosen
        if problems:
            raise StageFailed(Status.PREFLIGHT_FAILED, "; ".join(problems))
        python = str(self.spec.server.argv[0]) if self.spec.server.argv else None
        facts.stack, facts.gpus = read_stack(python, self.server_env())
        facts.flashinfer_version = facts.stack.flashinfer
        self._check_gpus_released()
        dirty_before, _ = self.tree.dirty_paths(self.spec.allow_dirty)
        self._choose_port()
        self._check_target_fits()
        plan = self.tree.plan(self.patches, self.files, dirty_before,
                              os.path.join(self.attempt_dir, "patches"), head)
        plan.update(base=head, dirty_before=sorted(dirty_before))
        return plan

    def check_out(self, ref: str) -> str:
        """A bisect step: `ref` checked out before anything else reads the tree — in a clean tree only (untracked
        files the allow-list covers aside), journaled first like the patches, so every revert (this attempt's, its
        watchdog's, a recovery's) puts HEAD and its branch back."""
        refuse_changes(self.tree.git, self.spec.allow_dirty)
        commit = resolve_commit(self.tree.git, ref)
        head, branch = current_ref(self.tree.git)
        untracked = sorted(self.tree.git.status_entries())  # allow-listed: the user's, never the patches'
        self.journal = self.tree.new_journal(self.spec.run_id, self.spec.attempt_id, self.marker, commit, untracked,
                                             {"restore": [], "delete": [], "created_dirs": []})
        self.journal.checkout, self.journal.state = JournalCheckout(commit=commit, head=head, branch=branch), "checkout"
        self.tree.begin(self.journal)
        check_out(self.tree.git, commit)
        return commit

    def _check_gpus_released(self) -> None:
        """A recovered server whose GPU memory is still held (a stuck CUDA context) would make this attempt
        die of a false out-of-memory: refuse instead, naming what holds it."""
        report = watchdog.last_report(self.tree)
        dirty = report.stop.gpu_dirty if report is not None else None
        if not dirty:
            return
        held = wait_gpu_release([int(p) for p in dirty], self.server_env(), float(self.spec.timeouts.gpu_release))
        if held:
            raise StageFailed(Status.PREFLIGHT_FAILED, "GPU memory of an interrupted attempt's server (%s) is still "
                              "held by pids %s; free it (or reset the GPUs) before the next attempt"
                              % (report.journal.attempt_id if report else None, ", ".join(sorted(held))),
                              FailureFacts(gpu_dirty=held))

    def _choose_port(self) -> None:
        srv = self.spec.server
        if srv.port == "auto":
            srv.port = pick_free_port(srv.host)
            self.result.preflight.port = srv.port
        elif not port_free(srv.host, int(srv.port)):
            raise StageFailed(Status.PREFLIGHT_FAILED, "port %s is already in use on the host (set `port: auto` in "
                              "the experiment to let the harness pick a free one)" % srv.port,
                              FailureFacts(port_in_use=int(srv.port)))

    def _check_target_fits(self) -> None:
        """With `expect: crash` it runs anyway (to reproduce a failure on purpose), with warnings."""
        facts = self.result.preflight
        problems = fit_problems(self.spec.requirements, self.repo, facts.gpus, facts.server_version, self.patches,
                                facts)
        if not problems:
            return
        if self.spec.expect == "crash":
            facts.warnings = problems
            self.link.send(PreflightWarning(problems=problems))
        else:
            raise StageFailed(Status.PREFLIGHT_FAILED, "cannot run here: " + "; ".join(problems),
                              FailureFacts(cannot_run=problems))

    def apply(self, plan: dict[str, Any]) -> None:
        if self.journal is None:
            self.journal = self.tree.new_journal(self.spec.run_id, self.spec.attempt_id, self.marker, plan["base"],
                                                 plan["dirty_before"], plan)
        else:  # the checkout's journal (its tree as found kept): the patches' paths join it
            j = self.journal
            j.restore, j.delete, j.created_dirs = plan["restore"], plan["delete"], plan["created_dirs"]
            j.dirty_before, j.state = plan["dirty_before"], "applying"
        self.tree.apply(self.journal, plan)
        self.result.patch.changed_paths = ChangedPaths(restore=self.journal.restore, delete=self.journal.delete)

    def compile_changed(self) -> None:
        """Every patched or new .py file must at least compile (syntax) under the host's Python."""
        assert self.journal is not None
        paths, errors = self.tree.compile_errors(self.journal)
        self.result.patch.compiled = paths
        if errors:
            raise StageFailed(Status.APPLY_FAILED, "patched files do not compile:\n" + "\n".join(errors),
                              FailureFacts(compile_errors=errors))

    def launch(self) -> None:
        assert self.journal is not None
        self.server = Server(self.spec, self.link, self.attempt_dir, self.server_env(), self.marker,
                             self.check_abort, self.result)
        # Its working directory is outside the tree: what a server writes where it runs (a core dump,
        # a cache) must not land in the repo it is measured from.
        self.server.launch(cwd=self.attempt_dir, on_started=self._journal_server)

    def _journal_server(self, pid: int, pgid: int, start: Optional[int]) -> None:
        """Before anything else happens: a killed agent's successor must know which server to stop."""
        assert self.journal is not None
        self.journal.server = JournalServer(pid=pid, pgid=pgid, start=start)
        self.journal.state = "running"
        self.tree.save(self.journal)
