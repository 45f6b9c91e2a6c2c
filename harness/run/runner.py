"""The controller side of one attempt: ship the agent, hand it the spec, follow its events, fetch the
artifacts and write exactly one record — whatever happens, including Ctrl-C and a lost host."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..common.filehash import sha256_file
from ..common.protocol import (
    BenchResult,
    Crashed,
    Event,
    Final,
    Hello,
    Hung,
    JobState,
    Mode,
    Pong,
    PreflightWarning,
    Recovering,
    ServerSpec,
    Spec,
    StageChanged,
    Status,
    Timeouts,
)
from ..errors import AgentProtocolError, HarnessError, HostError, Interrupted, ResultsError
from ..experiments.config import ClusterHost, HostConfig
from ..experiments.resolve import Resolved
from ..experiments.spec import build_spec
from ..hosts.channel import AttemptChannel
from ..hosts.shipping import ensure_agent
from ..hosts.slurm import JobInfo, describe
from ..hosts.targets import connect, open_attempt
from ..hosts.transport import Transport
from ..masking import attempt_secrets, mask_files, mask_secrets
from ..results.attemptdir import AttemptDir
from ..results.schemas import Record, Recovered, SlurmJob, SweepAttempt
from ..results.store import ResultsStore
from ..safetext import display_line
from ..triage.classify import triage_text
from .recording import AgentReport, make_provisional_record, make_record


class Reporter(Protocol):
    def stage(self, label: str, stage: str) -> None: ...

    def note(self, label: str, message: str) -> None: ...


class SilentReporter:
    def stage(self, label: str, stage: str) -> None:
        pass

    def note(self, label: str, message: str) -> None:
        pass


@dataclass
class AttemptOutcome:
    record: Record
    directory: Path


def run_attempt(resolved: Resolved, host_name: str, host: HostConfig, store: ResultsStore, run_id: str, *,
                reporter: Reporter | None = None, transport_factory: Callable[[str, HostConfig], Transport] = connect,
                lock_wait_s: float = 0.0, cancel: threading.Event | None = None,
                attempt_budget_s: float | None = None, record_extra: SweepAttempt | None = None) -> AttemptOutcome:
    """One attempt, one record. `cancel` (set from another thread) aborts it like Ctrl-C does; the
    record then says `aborted` and `Interrupted` is raised after it is written."""
    reporter = reporter or SilentReporter()
    exp = resolved.experiment
    directory = store.new_attempt_dir(run_id, exp.name)
    attempt = directory.name
    label = f"{exp.name}#{attempt}@{host_name}"
    spec = build_spec(resolved, host, run_id=run_id, attempt_id=f"{exp.name}-{attempt}", lock_wait_s=lock_wait_s)
    spec.deadline_s = attempt_budget_s
    t0 = time.monotonic()
    follow = AgentReport(cancel=cancel)
    host_error: HarnessError | None = None

    def checkpoint() -> None:
        """What has arrived, on disk now: a controller killed before the final report keeps its finished cases."""
        if not follow.bench_rows or follow.final is not None:
            return
        try:
            store.write_provisional(directory, make_provisional_record(
                resolved, host_name, run_id, attempt, spec, follow, directory, time.monotonic() - t0, record_extra))
        except (ResultsError, ValueError) as exc:  # never at the attempt's expense
            reporter.note(label, f"cannot keep the results so far on disk: {exc}")

    follow.checkpoint = checkpoint
    try:
        _run_agent(transport_factory, host_name, host, spec, follow, reporter, label, fetch_into=directory)
    except (HostError, AgentProtocolError) as exc:
        host_error = exc
        if isinstance(exc, AgentProtocolError) and follow.final is None and follow.hello is not None:
            follow.final = _recover_after_agent_death(transport_factory, host_name, host, spec, reporter, label)
    except (KeyboardInterrupt, Interrupted):
        # Outside the event loop (connecting, uploading, fetching): nothing on the host is left
        # running — the agent, if it started, has already stopped and reverted.
        follow.interrupted = True
        if follow.final is None:
            follow.final = Final(status=Status.ABORTED, error="interrupted before the attempt finished")
    record = make_record(resolved, host_name, run_id, attempt, spec, follow, directory, host_error,
                          time.monotonic() - t0, record_extra)
    store.write_record(directory, record)
    store.drop_provisional(directory)
    _tell_the_interrupted_attempt(store, follow.final, spec, reporter, label)
    outcome = AttemptOutcome(record, directory)
    if host_error is not None:
        raise host_error
    if follow.interrupted:
        raise Interrupted(f"interrupted; attempt {label} stopped and reverted, record in {directory}")
    return outcome


def _tell_the_interrupted_attempt(store: ResultsStore, final: Final | None, spec: Spec, reporter: Reporter,
                                  label: str) -> None:
    """This attempt recovered another's leftovers: an attempt of this store whose controller was killed keeps
    only a provisional record, which then learns what became of the tree."""
    recovered = final.recovered if final is not None else None
    if recovered is None or (recovered.journal.run_id, recovered.journal.attempt_id) == (spec.run_id, spec.attempt_id):
        return
    try:
        store.note_recovery(Recovered.of(recovered))
    except (ResultsError, ValueError) as exc:  # never at this attempt's expense
        reporter.note(label, f"cannot note the recovery in the interrupted attempt's record: {exc}")


def run_attempt_in_foreground(*args: Any, **kwargs: Any) -> AttemptOutcome:
    """`run_attempt` for a command line: the attempt runs in a worker thread, so an interrupt (Ctrl-C,
    SIGTERM, SIGHUP — all raised as KeyboardInterrupt in the main thread) can never land between reading
    an event and recording it. The first interrupt cancels (stop, revert, record); a second detaches."""
    cancel = threading.Event()
    done = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["outcome"] = run_attempt(*args, cancel=cancel, **kwargs)
        except BaseException as exc:  # handed to the main thread as it is
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="attempt", daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        cancel.set()
        try:
            while not done.wait(0.2):
                pass
        except KeyboardInterrupt:
            raise Interrupted("interrupted twice; the agent on the host stops the server and reverts by itself "
                              "(its dead man's switch)") from None
    if "error" in box:
        raise box["error"]
    outcome: AttemptOutcome = box["outcome"]
    return outcome


def _recover_after_agent_death(transport_factory: Callable[[str, HostConfig], Transport], host_name: str,
                               host: HostConfig, spec: Spec, reporter: Reporter, label: str) -> Final:
    """The agent died without its final word (killed on the host): recover now, while we are here —
    its watchdog has usually done it already; then the report says what it did."""
    reporter.note(label, "the agent on the host died; recovering the host now")
    try:
        res = service(host_name, host, "recover", transport_factory, lock_wait_s=60.0)
    except (HostError, AgentProtocolError) as exc:
        return Final(status=Status.INFRA_ERROR, error=f"recovery after the agent's death failed: {exc}")
    recovered = res.recovered
    if recovered is not None and (recovered.journal.attempt_id != spec.attempt_id
                                  or recovered.journal.run_id != spec.run_id):
        recovered = None  # a report about some other attempt
    return Final(status=Status.INFRA_ERROR, recovered=recovered)


def check_patches(resolved: Resolved, host_name: str, host: HostConfig, *,
                  transport_factory: Callable[[str, HostConfig], Transport] = connect) -> Final:
    """Dry run of an experiment's patch sets on a host, through the agent: lock, check the tree is clean,
    apply, compile every patched .py, revert, verify byte-identical. Launches nothing. Returns the agent's
    final report (`status` ok | apply-failed | preflight-failed | infra-error, `patch.compiled`, `revert`)."""
    run_id = "patchcheck-" + time.strftime("%Y%m%d-%H%M%S")
    spec = build_spec(resolved, host, run_id=run_id, attempt_id=resolved.name)
    spec.mode = Mode.APPLY_REVERT.value
    follow = AgentReport()
    _run_agent(transport_factory, host_name, host, spec, follow, SilentReporter(), resolved.name)
    return follow.final or no_final_report()


def host_status(host_name: str, host: HostConfig, *,
                transport_factory: Callable[[str, HostConfig], Transport] = connect) -> Final:
    """The host's lock holder, leftover journal, GPUs and their processes (read-only; `repo_status`). For a
    cluster: the repo as the login node sees it on the shared storage (its queue: `slurmjob.queued_jobs`)."""
    if isinstance(host, ClusterHost):
        return service(host_name, host.cluster.login_host, "status", transport_factory)
    return service(host_name, host, "status", transport_factory)


def recover_host(host_name: str, host: HostConfig, *,
                 transport_factory: Callable[[str, HostConfig], Transport] = connect) -> Final:
    """Finish what an interrupted attempt left: stop its server (only if it is still the same process) and
    restore the tree from the journal. Refused while another harness holds the repo's lock."""
    return service(host_name, host, "recover", transport_factory)


def service(host_name: str, host: HostConfig, mode: str,
            transport_factory: Callable[[str, HostConfig], Transport] = connect, **spec_fields: Any) -> Final:
    spec = Spec(run_id="service-" + time.strftime("%Y%m%d-%H%M%S"), attempt_id=mode, repo=host.repo, mode=mode,
                workdir=host.workdir, server=ServerSpec(argv=[host.python], env=dict(host.env), port=0),
                timeouts=Timeouts(stop_grace=30), heartbeat_timeout_s=60, **spec_fields)
    follow = AgentReport()
    _run_agent(transport_factory, host_name, host, spec, follow, SilentReporter(), f"{mode}@{host_name}")
    return follow.final or no_final_report()


def no_final_report() -> Final:
    return Final(status=Status.INFRA_ERROR, error="no final report")


def _run_agent(transport_factory: Callable[[str, HostConfig], Transport], host_name: str, host: HostConfig,
               spec: Spec, follow: AgentReport, reporter: Reporter, label: str, fetch_into: Path | None = None) -> None:
    transport: Transport | None = None
    try:
        reporter.stage(label, "connect")
        transport = transport_factory(host_name, host)
        agent_path = ensure_agent(transport, host)
        channel = open_attempt(transport, host_name, host, agent_path)
        spec.host_name = host_name
        # The clock offset is measured with a round trip; a local agent shares our clock, a Slurm job cannot answer.
        same_clock = host.is_local or isinstance(host, ClusterHost)
        _follow_agent(channel, spec, follow, reporter, label, same_clock)
        if follow.final is not None and fetch_into is not None:
            follow.fetch_missing = _fetch_artifacts(transport, follow.final, fetch_into)
            mask_files(fetch_into, follow.secrets)  # set by _follow_agent, which a final report implies
    finally:
        if transport is not None:
            transport.close()


def _follow_agent(channel: AttemptChannel, spec: Spec, follow: AgentReport, reporter: Reporter, label: str,
                  is_local: bool) -> None:
    stop_heartbeat = threading.Event()
    interval = max(0.5, (spec.heartbeat_timeout_s or 60) / 10)

    def heartbeat() -> None:
        while not stop_heartbeat.wait(interval):
            channel.ping()

    def watch_cancel() -> None:
        assert follow.cancel is not None
        while not stop_heartbeat.is_set():
            if follow.cancel.wait(0.2) and not stop_heartbeat.is_set():
                follow.interrupted = True
                reporter.note(label, "cancelled: stopping the server and reverting")
                channel.abort()
                return

    follow.secrets = attempt_secrets(spec)
    channel.send_spec(spec)
    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    if follow.cancel is not None:
        threading.Thread(target=watch_cancel, name="cancel", daemon=True).start()
    try:
        while True:
            try:
                ev = channel.receive()  # silence: HostUnreachable; another protocol: AgentProtocolError
            except KeyboardInterrupt:
                _interrupt(channel, follow, reporter, label)
                continue
            if ev is None:
                break
            try:
                if _on_event(ev, follow, channel, reporter, label, is_local):
                    break
            except KeyboardInterrupt:
                _interrupt(channel, follow, reporter, label)
    finally:
        stop_heartbeat.set()
        channel.close()
    if follow.final is None:
        ended = channel.exit(timeout=5)
        tail = ended.stderr_tail.strip()[-2000:]
        raise AgentProtocolError(f"the agent on the host ended without a final report (exit {ended.code})"
                                 + (f":\n{tail}" if tail else ""))


def _interrupt(channel: AttemptChannel, follow: AgentReport, reporter: Reporter, label: str) -> None:
    if follow.interrupted:  # second Ctrl-C: drop the channel; the agent's dead man's switch cleans up
        channel.kill()
        raise Interrupted(f"interrupted twice; the agent on the host stops and reverts {label} by itself")
    follow.interrupted = True
    reporter.note(label, "interrupted: stopping the server and reverting (Ctrl-C again to detach)")
    channel.abort()


def _on_event(ev: Event, follow: AgentReport, channel: AttemptChannel, reporter: Reporter, label: str,
              is_local: bool) -> bool:
    """Act on one event; True when it was the last (`Final`). Every kind of `protocol.EVENTS` is named."""
    if isinstance(ev, Hello):
        if follow.hello is not None:  # a requeued Slurm job starts over: what its killed run measured is redone
            follow.bench_rows.clear()
            follow.live_verdict = None
            if follow.job is not None:
                follow.job.requeued += 1
            reporter.note(label, f"the job was requeued; it runs again from the start on {ev.hostname}")
        follow.hello = ev
        if follow.job is not None and follow.job.agent_start_s is None:
            follow.job.agent_start_s = round(ev.host_time - follow.job_submitted, 3)
        if not is_local:  # same clock when local; else measure the offset with one round trip
            follow.ping_sent = time.time()
            channel.ping(echo=1)
    elif isinstance(ev, Pong):
        # NTP-style: the host read its clock about halfway through the round trip.
        follow.clock_offset = ev.host_time - (follow.ping_sent + time.time()) / 2
    elif isinstance(ev, StageChanged):
        follow.stage = ev.stage
        reporter.stage(label, ev.stage)
        if follow.checkpoint is not None:
            follow.checkpoint()
    elif isinstance(ev, Crashed):
        verdict = triage_text(mask_secrets(ev.log_tail or "", follow.secrets), ev.exit_code)
        follow.live_verdict = verdict.to_dict()
        if ev.died_at is not None:
            follow.detect_latency_s = round(time.time() - (ev.died_at - follow.clock_offset), 4)
        reporter.note(label, f"crashed ({verdict.category}): {display_line(verdict.key_line or ev.fatal_line or '')}")
    elif isinstance(ev, Hung):
        reporter.note(label, f"hung: {ev.reason}")
    elif isinstance(ev, BenchResult):
        follow.bench_rows.setdefault(ev.case, []).append(ev.result)
        if follow.checkpoint is not None:
            follow.checkpoint()
    elif isinstance(ev, Recovering):
        reporter.note(label, "found the journal of an interrupted attempt; recovering first")
    elif isinstance(ev, PreflightWarning):
        reporter.note(label, "runs although it cannot work here (expect: crash): " + "; ".join(ev.problems))
    elif isinstance(ev, JobState):
        _note_job_state(follow, ev)
        if ev.note:
            reporter.note(label, ev.note)
        else:
            reporter.stage(label, describe(JobInfo(ev.job_id, ev.state, ev.reason, ev.node)))
    elif isinstance(ev, Final):
        follow.final = ev
        return True
    # Alive (a quiet agent), Launched, Ready and BenchStarted: known, nothing to do on this side.
    return False


def _note_job_state(follow: AgentReport, ev: JobState) -> None:
    """The record's `slurm` facts: the job, where it ran, its last state (and PENDING reason), and how long it
    waited in the queue (submission to RUNNING, by this machine's clock)."""
    if follow.job is None:
        # Every field given, so the record lists each one (a record leaves out what was never set).
        follow.job = SlurmJob(job_id=ev.job_id, state=None, node=None, reason=None, queued_s=None,
                              agent_start_s=None, requeued=0, login_lost_s=None)
        follow.job_submitted = ev.t
    job = follow.job
    if ev.state == "RUNNING" and job.state != "RUNNING" and job.queued_s is None:
        job.queued_s = round(ev.t - follow.job_submitted, 3)
    job.state, job.node = ev.state, ev.node or job.node
    job.reason = display_line(ev.reason) if ev.reason else job.reason  # squeue's words, shown: escaped
    job.login_lost_s = ev.login_lost_s or job.login_lost_s


def _fetch_artifacts(t: Transport, final: Final, directory: Path) -> list[str]:
    """Copy the attempt's files from the host into `directory`; the ones that did not arrive whole."""
    folder = AttemptDir(directory)
    wanted = folder.fetched(final)
    if final.bench.profile_files:
        folder.profile.mkdir(exist_ok=True)
    expected = final.artifacts or {}
    missing = []
    for remote, local in wanted:
        try:
            t.get(remote, local)
        except OSError:
            missing.append(remote)
            local.unlink(missing_ok=True)  # never keep half a file
            continue
        # Byte for byte what the host has: a transfer that changed a byte is no copy at all.
        if remote in expected and sha256_file(str(local)) != expected[remote]:
            missing.append(f"{remote} (arrived with another sha256 than the host's)")
            local.unlink()
    return missing
