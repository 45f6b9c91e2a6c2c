"""What the agent does once it holds a spec and a link, whoever started it (`__main__` over SSH, `job` under
Slurm): say hello, serve the spec's mode, end with the typed final report."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Optional

from ..common.protocol import PROTOCOL, Final, GcRequest, Hello, HistoryRequest, Mode, ProtocolError, Spec, Status
from .attempt import Attempt
from .errors import StageFailed
from .gc import collect_garbage
from .history import read_history
from .hostio import file_hashes
from .link import Link
from .status import host_status


def final_report(result: Final, attempt: Optional[Attempt] = None, link: Optional[Link] = None) -> Final:
    """The result as the final event, checked to cross the link as it is: what does not is a bug here, not data."""
    body = result
    if attempt is not None:
        body.artifacts = file_hashes(attempt.attempt_dir, skip=("patches",))
        body.timings = attempt.timings
        body.attempt_dir = attempt.attempt_dir
        body.server.log = attempt.log_path if os.path.exists(attempt.log_path) else None
    if link is not None:
        body.abort_reason = link.abort_reason
    try:
        return Final.from_dict(json.loads(json.dumps(body.to_dict())))
    except (ProtocolError, TypeError, ValueError) as exc:  # a bug in the agent: still end with a final report
        return Final(status=Status.INFRA_ERROR, error="agent error: the final report does not follow the protocol: "
                     "%s" % exc, timings=body.timings)


def say_hello(link: Link, restart: Optional[int] = None) -> None:
    link.send(Hello(protocol=PROTOCOL, pid=os.getpid(), host_time=time.time(), python=sys.version.split()[0],
                    hostname=socket.gethostname(), restart=restart))


def serve(spec: Spec, link: Link) -> int:
    """What the spec's mode asks for, ending with the final report on the link."""
    attempt = Attempt(spec, link, watchdog=spec.mode in (Mode.ATTEMPT.value, Mode.APPLY_REVERT.value))
    if spec.mode == Mode.STATUS.value:
        try:
            report = Final(status=Status.OK, repo_status=host_status(attempt.repo, attempt.server_env()))
        except Exception as exc:  # a look must always answer, saying what it could not see
            report = Final(status=Status.INFRA_ERROR, error="cannot read the host's state: %s" % exc)
        link.send(final_report(report))
        return 0
    if spec.mode == Mode.HISTORY.value:
        try:
            report = Final(status=Status.OK, history=read_history(attempt.repo, spec.history or HistoryRequest(),
                                                                      spec.allow_dirty))
        except StageFailed as exc:  # the range cannot be bisected: why, as a refusal
            report = Final(status=exc.status, error=exc.message)
        except Exception as exc:  # like a look: always answer, saying what went wrong
            report = Final(status=Status.INFRA_ERROR, error="cannot read the history: %s" % exc)
        link.send(final_report(report))
        return 0
    if spec.mode == Mode.GC.value:
        try:
            report = Final(status=Status.OK, gc=collect_garbage(attempt.workdir, attempt.repo, spec.gc or GcRequest()))
        except Exception as exc:  # like a look: always answer, saying what went wrong
            report = Final(status=Status.INFRA_ERROR, error="cannot clean the work dir: %s" % exc)
        link.send(final_report(report))
        return 0
    result = attempt.recover() if spec.mode == Mode.RECOVER.value else attempt.run()
    if link.abort_reason == "slurm-time-limit":
        result.budget_exceeded = True  # the job's time limit is the attempt's budget (plus the stop's time)
    link.send(final_report(result, attempt, link))
    return 0
