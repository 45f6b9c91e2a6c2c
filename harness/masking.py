"""Secret values (environment variables whose names look secret) never land in what the harness keeps."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .results import SECRET_NAME

REDACTED = "<redacted>"
MIN_SECRET_LEN = 4  # shorter values ("1", "on") are not worth shredding every log for


def mask_secrets(text: str, secrets: list[str]) -> str:
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= MIN_SECRET_LEN:
            text = text.replace(value, REDACTED)
    return text


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of the server's environment variables whose names look secret (HF_TOKEN, *_KEY, …)."""
    return [v for k, v in env.items() if SECRET_NAME.search(k) and v]


def mask_files(directory: Path, secrets: list[str]) -> None:
    """A server may echo its environment: secret values never stay in any file we keep — logs, bench
    output, stack dumps, profile traces — whatever its name. Bytes are replaced as bytes, so a file that
    is not UTF-8 is not mangled."""
    values = [v.encode() for v in sorted(secrets, key=len, reverse=True) if len(v) >= MIN_SECRET_LEN]
    if not values:
        return
    for f in directory.rglob("*"):
        if f.is_symlink() or not f.is_file():
            continue
        data = f.read_bytes()
        masked = data
        for value in values:
            masked = masked.replace(value, REDACTED.encode())
        if masked != data:
            f.write_bytes(masked)
