"""The agent as the host receives it: one zipapp built from `harness/agent/` and `harness/common/`,
named by its content hash, uploaded once per content, run with the host's Python (>= 3.8)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

from ..errors import HostError, RemoteCommandError
from ..experiments.config import HostConfig
from .transport import Transport

PACKAGE = Path(__file__).resolve().parents[1]  # harness/
MIN_PYTHON = (3, 8)
# A zip's own timestamps would change the hash on every checkout: every entry gets this one.
FIXED_DATE = (2020, 1, 1, 0, 0, 0)
ZIP_MAIN = b"import sys\nfrom harness.agent.__main__ import main\nsys.exit(main())\n"
# Runs on the host before anything else: where the work dir is, whether it is writable, which agent
# version is there, which Python this is. Any failure is reported as data, never as a traceback.
PROBE = (
    "import json,os,sys,tempfile\n"
    "w=os.path.abspath(os.path.expanduser(sys.argv[1]))\n"
    "p=os.path.join(w,sys.argv[2])\n"
    "err=None\n"
    "try:\n"
    "    os.makedirs(w,exist_ok=True)\n"
    "    with tempfile.TemporaryFile(dir=w) as f:\n"
    "        f.write(b'x'*65536);f.flush();os.fsync(f.fileno())\n"
    "except OSError as e:\n"
    "    err=e.strerror or str(e)\n"
    "print(json.dumps({'workdir':w,'agent':p,'present':os.path.exists(p),'error':err,"
    "'python':list(sys.version_info[:3])}))\n"
)


def agent_sources() -> list[tuple[str, bytes]]:
    """(name in the zip, bytes) of everything the agent runs: stdlib-only modules, sorted."""
    files = [("harness/__init__.py", b'"""Only what the agent needs of the harness package."""\n')]
    for package in ("common", "agent"):
        for path in sorted((PACKAGE / package).glob("*.py")):
            files.append((f"harness/{package}/{path.name}", path.read_bytes()))
    files.append(("__main__.py", ZIP_MAIN))
    return files


@lru_cache(maxsize=1)
def agent_zipapp() -> tuple[str, bytes]:
    """(file name carrying the content hash, zip bytes); the same sources always give the same bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in agent_sources():
            info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    data = buf.getvalue()
    return f"agent-{hashlib.sha256(data).hexdigest()[:16]}.pyz", data


def ensure_agent(t: Transport, host: HostConfig) -> str:
    """Upload the agent once per content (its name carries its hash); return its path on the host."""
    name, data = agent_zipapp()
    try:
        r = t.run([host.python, "-c", PROBE, host.workdir, name], timeout=60)
    except RemoteCommandError as exc:
        hint = (f"set `python:` of host {t.name!r} in the host inventory (hosts.yaml) to the path of a Python "
                f"3 executable on that host (now {host.python!r})")
        raise HostError(t.name, f"cannot run the host's Python {host.python!r} (exit {exc.remote_exit_code}): "
                        f"{exc.output_tail.strip()[-500:]}", hint=hint) from None
    try:
        info = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise HostError(t.name, f"unexpected answer from the host's Python {host.python!r}: {r.stdout[-500:]!r}",
                        hint=f"is `python:` of host {t.name!r} in the host inventory (hosts.yaml) a Python 3 "
                             "executable?") from None
    if info.get("error"):
        raise HostError(t.name, f"the work dir {info['workdir']} on the host cannot be written: {info['error']}",
                        hint="set `workdir:` for this host in hosts.yaml to a folder on a disk with room "
                             "(agent, logs and bench output go there)")
    if tuple(info["python"]) < MIN_PYTHON:
        raise HostError(t.name, f"the host's Python is {'.'.join(map(str, info['python']))}; the agent needs "
                        f">= {'.'.join(map(str, MIN_PYTHON))}")
    if not info["present"]:
        with tempfile.TemporaryDirectory(prefix="harness-agent-") as tmp:
            local = Path(tmp) / name
            local.write_bytes(data)
            os.chmod(local, 0o644)
            t.put(local, info["agent"])
    return str(info["agent"])
