"""The sha256 of a file, read in blocks: the agent hashes what it leaves, the controller checks what it fetched."""

from __future__ import annotations

import hashlib


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
