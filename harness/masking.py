"""Secret values never land in what the harness keeps: those of environment variables whose names look
secret (the server's, and the controller's own) and those given to secret-bearing server flags (`--api-key`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from .common.protocol import ArgvItem, Spec

REDACTED = "<redacted>"
# Environment variables whose values are secrets, by name (HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, …).
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MIN_SECRET_LEN = 4  # shorter values ("1", "on") are not worth shredding every log for
# The controller's environment was not written for the server: only values long enough to be real secrets
# (tokens, keys, passwords) count, so a stray `SOME_KEY=true` or `KEYTIMEOUT=1` does not shred every file.
CONTROLLER_MIN_SECRET_LEN = 8

# SGLang's flags whose value is a secret (python/sglang/srt/arg_groups/fields/serving.py and exec_.py, 0.5.23),
# and `--hf-token`, the name a token flag gets elsewhere. The pattern below finds most of them; this list
# names the ones it cannot (`--watermark-key-b`).
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--ssl-keyfile-password", "--watermark-key",
                          "--watermark-key-b", "--hf-token"})
# Any other flag whose last word names a secret: --api-key, --hf-token, --db-password, --client-secret. The last
# word only, so --max-total-tokens 8192, --ssl-keyfile PATH and --tokenizer-path PATH are not secrets.
SECRET_FLAG_NAME = re.compile(r"--(?:[a-z0-9]+-)*(?:key|token|secret|password|passwd|credentials?)")  # lower case
# Flags the pattern takes for secrets that are not: SGLang's latency buckets.
NOT_SECRET_FLAGS = frozenset({"--bucket-time-to-first-token"})


def mask_secrets(text: str, secrets: list[str]) -> str:
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= MIN_SECRET_LEN:
            text = text.replace(value, REDACTED)
    return text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """An environment as a record keeps it: the values of secret-named variables redacted."""
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in env.items()}


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of the server's environment variables whose names look secret (HF_TOKEN, *_KEY, …)."""
    return [v for k, v in env.items() if SECRET_NAME.search(k) and v]


def controller_secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """The values of this controller's own secret-named variables (an exported HF_TOKEN): a local agent and its
    server inherit them, and a server may print them."""
    return [v for v in secret_values(os.environ if env is None else env) if len(v) >= CONTROLLER_MIN_SECRET_LEN]


def is_secret_flag(flag: str) -> bool:
    """`--api-key`, `--HF_TOKEN`: case and `_` for `-` do not matter (argparse-style spellings vary)."""
    name = flag.lower().replace("_", "-")
    return name in SECRET_FLAGS or (SECRET_FLAG_NAME.fullmatch(name) is not None and name not in NOT_SECRET_FLAGS)


def _secret_args(argv: Sequence[ArgvItem]) -> Iterator[tuple[int, str, str]]:
    """(index, prefix, value) of each value given to a secret flag: `--api-key V` is (i + 1, "", "V"),
    `--api-key=V` is (i, "--api-key=", "V"). A flag followed by another flag has no value."""
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):  # a slot the agent fills in ({"slot": "port"})
            continue
        flag, eq, inline = arg.partition("=")
        following = argv[i + 1] if i + 1 < len(argv) else None
        if not is_secret_flag(flag):
            continue
        if eq:
            yield i, flag + "=", inline
        elif isinstance(following, str) and not following.startswith("--"):
            yield i + 1, "", following


def secret_arg_values(argv: Sequence[ArgvItem]) -> list[str]:
    """The values given to secret flags in a command line (`--api-key sk-…`, `--hf-token=hf_…`)."""
    return [value for _, _, value in _secret_args(argv)]


def redact_argv(argv: Sequence[ArgvItem]) -> list[ArgvItem]:
    """The command line as a record keeps it: each secret flag's value replaced, whatever its length."""
    out = list(argv)
    for i, prefix, _ in _secret_args(argv):
        out[i] = prefix + REDACTED
    return out


def attempt_secrets(spec: Spec) -> list[str]:
    """Every value masked in what an attempt keeps: the server's secret-named variables, the values of secret
    flags on the server's, benchmark's and profile's command lines, and the controller's own secrets."""
    argvs = [spec.server.argv, *(c.argv for c in spec.bench), *([spec.profile.argv] if spec.profile else [])]
    values = secret_values(spec.server.env) + controller_secret_values()
    for argv in argvs:
        values += secret_arg_values(argv)
    return sorted(set(values))


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
