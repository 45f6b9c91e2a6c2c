"""Run the fault-injection suite and write its figures to docs/reliability.md.

    python scripts/fault_report.py            # needs root (network namespaces, tmpfs) and openssh-server
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"

HEADER = """# Reliability: faults the harness survives

Measured by the fault-injection suite (`tests/integration/test_faults.py`, `test_hosts_other_ways.py`:
real sshds — one without SFTP, one behind a bastion, a user whose shell is tcsh —, hosts in network
namespaces, simulated SGLang targets) with `python scripts/fault_report.py`. Every row asserts the end
state: the target tree byte-identical to before, no process of the attempt alive, no record lost or
duplicated, a clear status. *Time to clean* is from the fault to the host being clean again (tree
restored, server gone) — measured from the fault itself, not from some later command; *lost* counts
results lost.

| fault | survived | time to clean | lost | how |
| --- | --- | --- | --- | --- |
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "faults.json"
        env = dict(os.environ, HARNESS_FAULT_REPORT=str(report))
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:warnings",
                            "tests/integration/test_faults.py", "tests/integration/test_hosts_other_ways.py"],
                           cwd=ROOT, env=env)
        figures = json.loads(report.read_text()) if report.exists() else []
    rows = [f"| {f['fault']} | {'yes' if f['survived'] else 'NO'} | "
            f"{'-' if f['time_to_clean_s'] is None else str(f['time_to_clean_s']) + ' s'} | {f['lost']} | "
            f"{f['note']} |" for f in figures]
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(HEADER + "\n".join(rows) + "\n\n" + FOOTER)
    print(DOC.read_text())
    sys.exit(p.returncode)


FOOTER = """How each promise is kept:

- **Dead man's switch.** The agent on the host watches its stdin and a heartbeat from the controller
  (every 2 s, 20 s timeout); it also prints an `alive` line every 2 s, so the controller calls a silent
  link lost after 3 × the host's `keepalive` (6 s at `keepalive: 2`, 15 s by default). Either side losing
  the other leads to the same end: the agent stops the server and reverts, the controller records
  `infra-error`, and a sweep retries the attempt once (on another host if one fits).
- **Journal and watchdog.** The journal is written under `.git/harness/` before the first byte of the
  tree changes. Once it holds the repo's lock the agent starts a watchdog in its own session: when the
  agent dies (SIGKILL, the OOM killer) the watchdog takes the lock, stops the journal's server only if its
  pid still has the recorded start time, waits for its GPU memory and restores exactly the listed files —
  seconds after the death, with no controller involved. A controller that is still connected recovers at
  once and records what the watchdog did; should the watchdog die too, the next attempt (or `harness
  recover HOST`) recovers from the journal. GPU memory a recovered server still holds refuses the next
  attempt (`gpu_dirty`) instead of letting it die of a false out-of-memory.
- **Processes.** The server runs in its own session, in a working directory outside the tree; every
  process of an attempt carries a `HARNESS_ATTEMPT` marker in its environment, and the agent is a child
  subreaper, so what double-forks away (even with `setsid()` and a cleared environment) is re-parented to
  it. Stop = TERM to the group and the marked processes, grace, KILL, then the orphans; then GPU memory
  release is awaited through `nvidia-smi --query-compute-apps` (`gpu_dirty` recorded when it stays held).
  During the benchmark `/health` is polled: a server that stops answering (frozen, deadlocked) is hung
  after `no_progress`, not after the benchmark's own timeout.
- **Any host.** Every SSH command is the host's Python with a one-line bootstrap in single quotes and the
  real argv in base64, so sh, bash, zsh, csh, tcsh and fish all pass it unchanged. Without SFTP, files
  travel as raw bytes; the agent reports the sha256 of every artifact and a file that arrives different
  is dropped and named (`fetch_missing`). A work dir that cannot be written is a clear error naming it.
- **Signals.** SIGTERM and SIGHUP of the controller (a CI timeout, a closed terminal) are handled like
  Ctrl-C: stop, revert, an `aborted` record with every case already measured, exit 143 / 129. One harness
  runs a run at a time (a lock in the run's folder): a second `--resume` is refused naming the first.
- **Host keys.** An unknown SSH host key is refused with instructions unless the host entry says
  `accept_new_host_key: true`; a changed key is refused always — on every hop: a ProxyJump bastion's key
  is checked by the same rules as the final host's, and the refused hop is named.
- **Records.** Written to a temp file, fsynced, hard-linked into place (never overwritten); a sweep's
  `run.json` lists the planned attempt keys, and `--resume` runs only those without a final record.
"""

if __name__ == "__main__":
    main()
