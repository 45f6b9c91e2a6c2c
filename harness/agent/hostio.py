"""Small helpers for files and subprocesses on the host (standard library only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

from ..common.filehash import sha256_file
from ..common.hostaddr import connectable_host


def run(argv: Sequence[str], cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
        timeout: float = 120, input_bytes: Optional[bytes] = None) -> subprocess.CompletedProcess[bytes]:
    """Run a program (never a shell) and capture its output as bytes."""
    return subprocess.run(list(argv), cwd=cwd, env=env, input=input_bytes, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout)


def write_json_atomic(path: str, obj: Any) -> None:
    """Write, fsync, rename: a reader (or a recovery after a crash) sees the old or the new file, whole."""
    tmp = path + ".tmp-%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file; unreadable lines and a missing file give nothing."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        continue
    except OSError:
        pass
    return rows


def read_tail(path: str, nbytes: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def fill_slots(argv: Sequence[Union[str, dict[str, str]]], port: Union[int, str],
               seed: Optional[int] = None) -> list[str]:
    """Replace the controller's placeholders: {"slot": "port"} with the port chosen on the host, {"slot": "seed"}
    with the run's prompt seed. A slot left without its value is an error, never a literal dict in an argv."""
    values = {"port": str(port), "seed": None if seed is None else str(seed)}
    out = []
    for a in argv:
        if isinstance(a, dict):
            value = values.get(a.get("slot", ""))
            if value is None:
                raise ValueError("no value for the argv slot %r" % (a,))
            out.append(value)
        else:
            out.append(str(a))
    return out


def http_url(host: str, port: Union[int, str], path: str) -> str:
    host = connectable_host(host)
    return "http://%s:%s%s" % (host if ":" not in host else "[%s]" % host, port, path)


def file_hashes(root: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """{absolute path: sha256} of every regular file under `root` (folders named in `skip` left out)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (dirpath == root and d in skip)]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path) and os.path.isfile(path):
                out[path] = sha256_file(path)
    return out


def deepest_first(dirs: Iterable[str]) -> list[str]:
    """Folders in the order they can be removed: each after every folder inside it."""
    return sorted(dirs, key=lambda d: (-d.count("/"), d))


def copy_raw(src: str, dst: str) -> None:
    """Copy a file or symlink as it is (bytes, mode, link target); a missing source copies nothing."""
    if not os.path.lexists(src):
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.islink(dst) or (os.path.lexists(dst) and not os.path.isdir(dst)):
        os.remove(dst)
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
    else:
        shutil.copy2(src, dst)
