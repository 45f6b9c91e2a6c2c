"""The controller side of one attempt: ship the agent, hand it the spec, follow its events, fetch the
artifacts and write exactly one record — whatever happens, including Ctrl-C and a lost host."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import agent
from .config import HostConfig
from .errors import AgentProtocolError, HarnessError, HostError, HostUnreachable, Interrupted, RemoteCommandError
from .masking import mask_files, mask_secrets, secret_values
from .recording import AgentReport, make_record
from .results import Record, ResultsStore
from .spec import Resolved, build_spec
from .transport import RemoteProcess, Transport, connect
from .triage import triage_text

AGENT_SOURCE = Path(agent.__file__)
PROBE = (
    "import json,os,sys\n"
    "w=os.path.abspath(os.path.expanduser(sys.argv[1]))\n"
    "os.makedirs(w,exist_ok=True)\n"
    "p=os.path.join(w,sys.argv[2])\n"
    "print(json.dumps({'workdir':w,'agent':p,'present':os.path.exists(p),"
    "'python':list(sys.version_info[:3])}))\n"
)


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


def agent_name() -> str:
    digest = hashlib.sha256(AGENT_SOURCE.read_bytes()).hexdigest()[:16]
    return f"agent-{digest}.py"


def ensure_agent(t: Transport, host: HostConfig) -> str:
    """Upload the agent once per content (its name carries its hash); return its path on the host."""
    name = agent_name()
    try:
        r = t.run([host.python, "-c", PROBE, host.workdir, name], timeout=60)
    except RemoteCommandError as exc:
        hint = f"set `python:` for this host in hosts.yaml (now {host.python!r})"
        raise HostError(t.name, f"cannot run the host's Python {host.python!r} (exit {exc.remote_exit_code}): "
                        f"{exc.output_tail.strip()[-500:]}", hint=hint) from None
    try:
        info = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise HostError(t.name, f"unexpected answer from the host's Python: {r.stdout[-500:]!r}") from None
    if tuple(info["python"]) < (3, 8):
        raise HostError(t.name, f"the host's Python is {'.'.join(map(str, info['python']))}; the agent needs >= 3.8")
    if not info["present"]:
        t.put(AGENT_SOURCE, info["agent"])
    return info["agent"]


def run_attempt(resolved: Resolved, host_name: str, host: HostConfig, store: ResultsStore, run_id: str, *,
                reporter: Reporter | None = None, transport_factory: Callable[[str, HostConfig], Transport] = connect,
                lock_wait_s: float = 0.0, cancel: threading.Event | None = None,
                attempt_budget_s: float | None = None, record_extra: dict | None = None) -> AttemptOutcome:
    """One attempt, one record. `cancel` (set from another thread) aborts it like Ctrl-C does; the
    record then says `aborted` and `Interrupted` is raised after it is written."""
    reporter = reporter or SilentReporter()
    exp = resolved.experiment
    directory = store.new_attempt_dir(run_id, exp.name)
    attempt = directory.name
    label = f"{exp.name}#{attempt}@{host_name}"
    spec = build_spec(resolved, host, run_id=run_id, attempt_id=f"{exp.name}-{attempt}", lock_wait_s=lock_wait_s)
    spec["deadline_s"] = attempt_budget_s
    t0 = time.monotonic()
    follow = AgentReport(cancel=cancel)
    host_error: HarnessError | None = None
    try:
        _run_agent(transport_factory, host_name, host, spec, follow, reporter, label, fetch_into=directory)
    except (HostError, AgentProtocolError) as exc:
        host_error = exc
    except (KeyboardInterrupt, Interrupted):
        # Outside the event loop (connecting, uploading, fetching): nothing on the host is left
        # running — the agent, if it started, has already stopped and reverted.
        follow.interrupted = True
        if follow.final is None:
            follow.final = {"status": "aborted", "error": "interrupted before the attempt finished"}
    record = make_record(resolved, host_name, run_id, attempt, spec, follow, directory, host_error,
                          time.monotonic() - t0, record_extra or {})
    store.write_record(directory, record)
    outcome = AttemptOutcome(record, directory)
    if host_error is not None:
        raise host_error
    if follow.interrupted:
        raise Interrupted(f"interrupted; attempt {label} stopped and reverted, record in {directory}")
    return outcome


def check_patches(resolved: Resolved, host_name: str, host: HostConfig, *,
                  transport_factory: Callable[[str, HostConfig], Transport] = connect) -> dict:
    """Dry run of an experiment's patch sets on a host, through the agent: lock, check the tree is clean,
    apply, compile every patched .py, revert, verify byte-identical. Launches nothing. Returns the agent's
    final report (`status` ok | apply-failed | preflight-failed | infra-error, `compiled`, `revert`)."""
    run_id = "patchcheck-" + time.strftime("%Y%m%d-%H%M%S")
    spec = build_spec(resolved, host, run_id=run_id, attempt_id=resolved.name)
    spec["mode"] = "apply-revert"
    follow = AgentReport()
    _run_agent(transport_factory, host_name, host, spec, follow, SilentReporter(), resolved.name)
    return follow.final or {"status": "infra-error", "error": "no final report"}


def host_status(host_name: str, host: HostConfig, *,
                transport_factory: Callable[[str, HostConfig], Transport] = connect) -> dict:
    """The host's lock holder, leftover journal, GPUs and their processes (read-only)."""
    return _service(host_name, host, "status", transport_factory)


def recover_host(host_name: str, host: HostConfig, *,
                 transport_factory: Callable[[str, HostConfig], Transport] = connect) -> dict:
    """Finish what an interrupted attempt left: stop its server (only if it is still the same process) and
    restore the tree from the journal. Refused while another harness holds the repo's lock."""
    return _service(host_name, host, "recover", transport_factory)


def _service(host_name: str, host: HostConfig, mode: str, transport_factory) -> dict:
    spec = {"protocol": agent.PROTOCOL, "mode": mode, "run_id": "service-" + time.strftime("%Y%m%d-%H%M%S"),
            "attempt_id": mode, "repo": host.repo, "workdir": host.workdir,
            "server": {"argv": [host.python], "env": dict(host.env), "port": 0},
            "timeouts": {"stop_grace": 30}, "heartbeat_timeout_s": 60}
    follow = AgentReport()
    _run_agent(transport_factory, host_name, host, spec, follow, SilentReporter(), f"{mode}@{host_name}")
    return follow.final or {"status": "infra-error", "error": "no final report"}


def _run_agent(transport_factory: Callable[[str, HostConfig], Transport], host_name: str, host: HostConfig,
               spec: dict, follow: AgentReport, reporter: Reporter, label: str, fetch_into: Path | None = None) -> None:
    transport: Transport | None = None
    try:
        reporter.stage(label, "connect")
        transport = transport_factory(host_name, host)
        agent_path = ensure_agent(transport, host)
        proc = transport.start([host.python, agent_path])
        spec["host_name"] = host_name
        _follow_agent(proc, spec, follow, reporter, label, host.is_local, silence_s=max(6.0, 3 * host.keepalive))
        if follow.final is not None and fetch_into is not None:
            _fetch_artifacts(transport, follow.final, fetch_into)
            mask_files(fetch_into, secret_values(spec))
    finally:
        if transport is not None:
            transport.close()


def _follow_agent(proc: RemoteProcess, spec: dict, follow: AgentReport, reporter: Reporter, label: str,
                  is_local: bool, silence_s: float = 15.0) -> None:
    stop_heartbeat = threading.Event()
    interval = max(0.5, (spec.get("heartbeat_timeout_s") or 60) / 10)
    proc.set_read_timeout(silence_s)  # the agent says "alive" every 2 s: silence means the link is gone

    def heartbeat() -> None:
        while not stop_heartbeat.wait(interval):
            proc.write(b'{"cmd": "ping"}\n')

    def watch_cancel() -> None:
        assert follow.cancel is not None
        while not stop_heartbeat.is_set():
            if follow.cancel.wait(0.2) and not stop_heartbeat.is_set():
                follow.interrupted = True
                reporter.note(label, "cancelled: stopping the server and reverting")
                proc.write(b'{"cmd": "abort"}\n')
                return

    follow.secrets = secret_values(spec)
    proc.write((json.dumps(spec) + "\n").encode())
    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    if follow.cancel is not None:
        threading.Thread(target=watch_cancel, name="cancel", daemon=True).start()
    try:
        while True:
            try:
                line = proc.readline()
            except KeyboardInterrupt:
                _interrupt(proc, follow, reporter, label)
                continue
            except TimeoutError:
                proc.kill()
                raise HostUnreachable(spec.get("host_name") or "host",
                                      f"connection lost: no word from the agent for {silence_s:.0f} s (it stops the "
                                      f"server and reverts by itself when the link or heartbeat is gone)") from None
            if not line:
                break
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            try:
                if _on_event(ev, follow, proc, reporter, label, is_local):
                    break
            except KeyboardInterrupt:
                _interrupt(proc, follow, reporter, label)
    finally:
        stop_heartbeat.set()
        proc.close_stdin()
    if follow.final is None:
        rc = proc.wait(timeout=5)
        tail = proc.stderr_tail().strip()[-2000:]
        raise AgentProtocolError(f"the agent on the host ended without a final report (exit {rc})"
                                 + (f":\n{tail}" if tail else ""))


def _interrupt(proc: RemoteProcess, follow: AgentReport, reporter: Reporter, label: str) -> None:
    if follow.interrupted:  # second Ctrl-C: drop the channel; the agent's dead man's switch cleans up
        proc.kill()
        raise Interrupted(f"interrupted twice; the agent on the host stops and reverts {label} by itself")
    follow.interrupted = True
    reporter.note(label, "interrupted: stopping the server and reverting (Ctrl-C again to detach)")
    proc.write(b'{"cmd": "abort"}\n')


def _on_event(ev: dict, follow: AgentReport, proc: RemoteProcess, reporter: Reporter, label: str,
              is_local: bool) -> bool:
    kind = ev.get("event")
    if kind == "hello":
        follow.hello = ev
        if not is_local:  # same clock when local; else measure the offset with one round trip
            follow.ping_sent = time.time()
            proc.write(b'{"cmd": "ping", "echo": 1}\n')
    elif kind == "pong":
        # NTP-style: the host read its clock about halfway through the round trip.
        follow.clock_offset = ev["host_time"] - (follow.ping_sent + time.time()) / 2
    elif kind == "stage":
        reporter.stage(label, ev["stage"])
    elif kind == "crash":
        verdict = triage_text(mask_secrets(ev.get("log_tail") or "", follow.secrets), ev.get("exit_code"))
        follow.live_verdict = verdict.to_dict()
        if ev.get("died_at") is not None:
            follow.detect_latency_s = round(time.time() - (ev["died_at"] - follow.clock_offset), 4)
        reporter.note(label, f"crashed ({verdict.category}): {verdict.key_line or ev.get('fatal_line') or ''}")
    elif kind == "hung":
        follow.hung_reason = ev.get("reason")
        reporter.note(label, f"hung: {ev.get('reason')}")
    elif kind == "bench-result":
        follow.bench_rows.setdefault(ev["case"], []).append(ev["result"])
    elif kind == "recovering":
        reporter.note(label, "found the journal of an interrupted attempt; recovering first")
    elif kind == "final":
        follow.final = ev
        return True
    return False


def _fetch_artifacts(t: Transport, final: dict, directory: Path) -> None:
    wanted: list[tuple[str, str]] = []
    if final.get("server_log"):
        wanted.append((final["server_log"], "server.log"))
    for case, path in (final.get("bench_files") or {}).items():
        wanted.append((path, f"bench-{case}.jsonl"))
        wanted.append((path[: -len(".jsonl")] + ".log", f"bench-{case}.log"))
    if final.get("profile_files"):
        (directory / "profile").mkdir(exist_ok=True)
        for path in final["profile_files"]:
            wanted.append((path, "profile/" + path.rsplit("/", 1)[-1]))
    if final.get("stack_dump"):
        wanted.append((final["stack_dump"], "stack-dump.txt"))
    missing = []
    for remote, local in wanted:
        try:
            t.get(remote, directory / local)
        except OSError:
            missing.append(remote)
            (directory / local).unlink(missing_ok=True)  # never keep half a file
    if missing:
        final.setdefault("fetch_missing", missing)
