"""Entry point on the host: `python agent-<hash>.pyz` (the zipapp) or `python -m harness.agent`."""

from __future__ import annotations

import signal
import sys

from ..common.protocol import PROTOCOL, Final, ProtocolError, Spec, Status
from .link import Link
from .procs import become_subreaper
from .serve import say_hello, serve


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--watchdog":
        from .watchdog import watch

        return watch(sys.argv[2])
    if len(sys.argv) == 3 and sys.argv[1] == "--job":
        from .job import run_job

        return run_job(sys.argv[2])
    link = Link()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda s, f: link.abort("signal %d" % s))
    become_subreaper()
    try:
        spec: Spec = link.read_spec()
    except (ProtocolError, ValueError) as exc:
        link.send(Final(status=Status.INFRA_ERROR, error="agent (protocol %d) cannot read the spec: %s"
                        % (PROTOCOL, exc)))
        return 3
    say_hello(link)
    link.watch_stdin()
    link.keep_alive(float(spec.alive_interval_s or 2.0))
    return serve(spec, link)


if __name__ == "__main__":
    sys.exit(main())
