"""What the controller keeps of an attempt's files is byte for byte what the host has, or nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.common.protocol import BenchFacts, Final, ServerFacts
from harness.run.runner import _fetch_artifacts


class Host:
    """A transport whose `get` copies files, optionally changing their bytes on the way (a text-mode
    transfer decoding and re-encoding them, as the exec fallback once did)."""

    def __init__(self, corrupt: bool) -> None:
        self.corrupt = corrupt

    def get(self, remote: str, local: Path) -> None:
        data = Path(remote).read_bytes()
        if self.corrupt:
            data = data.decode(errors="replace").encode()
        local.write_bytes(data)


def host_files(tmp_path: Path) -> tuple[Final, dict]:
    d = tmp_path / "host"
    d.mkdir()
    (d / "server.log").write_bytes(b"model at /mnt/caf\xe9\n")
    (d / "bench-a.jsonl").write_bytes(b'{"output_throughput": 1.0}\n')
    (d / "bench-a.log").write_bytes(b"client log\n")
    final = Final(server=ServerFacts(log=str(d / "server.log")), bench=BenchFacts(files={"a": str(d / "bench-a.jsonl")}),
                  artifacts={str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()})
    return final, {"server.log": (d / "server.log").read_bytes()}


def test_files_that_arrive_unchanged_are_kept(tmp_path):
    final, originals = host_files(tmp_path)
    out = tmp_path / "record"
    out.mkdir()
    missing = _fetch_artifacts(Host(corrupt=False), final, out)
    assert (out / "server.log").read_bytes() == originals["server.log"]
    assert missing == []


def test_a_file_that_arrives_with_other_bytes_is_dropped_and_named(tmp_path):
    final, _ = host_files(tmp_path)
    out = tmp_path / "record"
    out.mkdir()
    missing = _fetch_artifacts(Host(corrupt=True), final, out)
    assert not (out / "server.log").exists(), "a changed copy is no copy"
    assert (out / "bench-a.jsonl").exists()  # pure ASCII: unchanged, kept
    assert missing == [f"{final.server.log} (arrived with another sha256 than the host's)"]
