"""The agent as a Slurm batch job: `python agent.pyz --job JOBDIR` (the batch script execs it).

The spec is `JOBDIR/spec.json`; events are appended to `JOBDIR/events.jsonl` on the storage the login node
shares, each on disk before the agent goes on, so the controller's reader — on another machine, maybe
much later — sees what happened. Nothing comes in: signals stop the attempt cleanly (stop the server,
revert, final report) before Slurm's KillWait runs out. A requeued job runs this again from the start;
the leftover journal of the killed run is recovered first, as on any host.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Dict, Optional

from ..common.protocol import PROTOCOL, Final, ProtocolError, Spec, Status
from .link import Link
from .procs import become_subreaper
from .serve import say_hello, serve

SPEC = "spec.json"
EVENTS = "events.jsonl"
# What each signal means in a job: Slurm sends USR1 before the time limit (sbatch --signal=B:USR1@120),
# the controller's scancel sends USR2 to the batch step; TERM is scancel's or Slurm's own end of the job.
REASONS: Dict[int, str] = {int(signal.SIGUSR1): "slurm-time-limit", int(signal.SIGUSR2): "slurm-cancel"}


def run_job(job_dir: str) -> int:
    out = open(os.path.join(job_dir, EVENTS), "a", encoding="utf-8")
    link = Link(out=out, durable=True)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda s, f: link.abort(REASONS.get(s, "signal %d" % s)))
    become_subreaper()
    try:
        with open(os.path.join(job_dir, SPEC), encoding="utf-8") as f:
            spec = Spec.decode(json.load(f))
    except (OSError, ProtocolError, ValueError) as exc:
        link.send(Final(status=Status.INFRA_ERROR, error="agent (protocol %d) cannot read the job's spec: %s"
                        % (PROTOCOL, exc)))
        return 3
    spec.heartbeat_timeout_s = None  # no controller on the line: the job's own limits and signals govern
    say_hello(link, restart=_restart_count())
    try:
        return serve(spec, link)
    finally:
        out.close()


def _restart_count() -> Optional[int]:
    value = os.environ.get("SLURM_RESTART_COUNT")
    return int(value) if value and value.isdigit() else None
