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

Measured by the fault-injection suite (`tests/integration/test_faults.py`, real sshd, hosts in network
namespaces, simulated SGLang targets) with `python scripts/fault_report.py`. Every row asserts the end
state: the target tree byte-identical to before, no process of the attempt alive, no record lost or
duplicated, a clear status. *Time to clean* is from the fault to the host being clean again (tree
restored, server gone); *lost* counts results lost.

| fault | survived | time to clean | lost | how |
| --- | --- | --- | --- | --- |
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "faults.json"
        env = dict(os.environ, HARNESS_FAULT_REPORT=str(report))
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:warnings",
                            "tests/integration/test_faults.py"], cwd=ROOT, env=env)
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
- **Journal.** Written under `.git/harness/` before the first byte of the tree changes; a killed agent
  leaves it behind, and the next attempt (or `harness recover HOST`) stops the recorded server only if
  its pid still has the recorded start time, then restores exactly the listed files.
- **Processes.** The server runs in its own session; every process of an attempt carries a
  `HARNESS_ATTEMPT` marker in its environment. Stop = TERM to the group, grace, KILL, then any marked
  straggler by pid; then GPU memory release is awaited through `nvidia-smi --query-compute-apps`
  (`gpu_dirty` recorded when it stays held).
- **Host keys.** An unknown SSH host key is refused with instructions unless the host entry says
  `accept_new_host_key: true`; a changed key is refused always (`tests/integration/test_cli.py`).
- **Records.** Written to a temp file, fsynced, hard-linked into place (never overwritten); a sweep's
  `run.json` lists the planned attempt keys, and `--resume` runs only those without a final record.
"""

if __name__ == "__main__":
    main()
