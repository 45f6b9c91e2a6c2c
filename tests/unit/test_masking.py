"""Secrets in the server's environment never land in what the harness keeps (promise 4).

In-process checks of the masking the runner applies to every text and file it keeps; the end-to-end
check (a secret in a crashing server's fatal line, through the CLI) is in
tests/integration/test_promises_agent.py.
"""

from __future__ import annotations

import gzip

from harness.masking import mask_files, mask_secrets, secret_values

TOKEN = "hf_s3cr3tV4lue9"


def test_values_of_secret_looking_variables_are_secrets_others_are_not():
    env = {"HF_TOKEN": TOKEN, "OPENAI_API_KEY": "sk-abcdef", "my_password": "hunter22",
           "AWS_SECRET_ACCESS_KEY": "wJalrXUtn", "DB_CREDENTIALS": "u:p@db", "NCCL_DEBUG": "WARN",
           "CUDA_VISIBLE_DEVICES": "0,1", "EMPTY_TOKEN": ""}
    assert sorted(secret_values(env)) == sorted(
        [TOKEN, "sk-abcdef", "hunter22", "wJalrXUtn", "u:p@db"])


def test_no_environment_means_no_secrets():
    assert secret_values({}) == []


def test_every_occurrence_is_masked_and_the_rest_of_the_text_kept():
    text = f"token={TOKEN} again {TOKEN}\nnext line"
    assert mask_secrets(text, [TOKEN]) == "token=<redacted> again <redacted>\nnext line"


def test_a_secret_containing_another_is_masked_whole():
    short, long = "abcd1234", "abcd1234-extended"
    assert mask_secrets(f"{long} {short}", [short, long]) == "<redacted> <redacted>"


# A password, and credentials (a connection URL) that contain it: masking the password first would leave the rest
# of the URL in the clear. The URL sorts before the password alphabetically.
PASSWORD = "s3cr3tpw"
CREDENTIALS = f"postgres://app:{PASSWORD}@db.internal:5432/prod"


def test_a_secret_containing_another_is_masked_whole_whatever_their_order():
    text = f"DB_CREDENTIALS={CREDENTIALS} DB_PASSWORD={PASSWORD}"
    for secrets in ([PASSWORD, CREDENTIALS], [CREDENTIALS, PASSWORD]):
        assert mask_secrets(text, secrets) == "DB_CREDENTIALS=<redacted> DB_PASSWORD=<redacted>"


def test_values_too_short_to_be_secrets_are_left_alone():
    # Masking "1" or "on" would shred every log; such values are not secrets worth the damage.
    assert mask_secrets("tp=1 on", ["1", "on", "abc"]) == "tp=1 on"
    assert mask_secrets("key=abcd", ["abcd"]) == "key=<redacted>"


def test_every_file_kept_is_masked_whatever_its_name_and_depth(tmp_path):
    files = {
        "server.log": f"HF_TOKEN={TOKEN}\n",
        "bench-decode.jsonl": f'{{"note": "{TOKEN}"}}\n',
        "stack-dump.txt": f"env: {TOKEN}\n",
        "record.json": f'{{"error": "{TOKEN}"}}',
        "profile/rank0/trace.json": f'{{"args": "{TOKEN}"}}',
        "no_suffix": TOKEN,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe\x00" + TOKEN.encode() + b"\x80")
    mask_files(tmp_path, [TOKEN])
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert (tmp_path / "server.log").read_text() == "HF_TOKEN=<redacted>\n"
    # Bytes that are not UTF-8 survive: masking must not re-encode a file.
    assert (tmp_path / "binary.bin").read_bytes() == b"\xff\xfe\x00<redacted>\x80"


def test_files_without_secrets_are_not_rewritten(tmp_path):
    f = tmp_path / "trace.json.gz"
    data = gzip.compress(b'{"traceEvents": []}')
    f.write_bytes(data)
    mtime = f.stat().st_mtime_ns
    mask_files(tmp_path, [TOKEN])
    assert f.read_bytes() == data and f.stat().st_mtime_ns == mtime


def test_masking_files_with_no_secrets_changes_nothing(tmp_path):
    (tmp_path / "server.log").write_text("tp=1\n")
    mask_files(tmp_path, [])
    mask_files(tmp_path, ["1"])
    assert (tmp_path / "server.log").read_text() == "tp=1\n"


def test_a_secret_containing_another_is_masked_whole_in_files_whatever_their_order(tmp_path):
    for secrets in ([PASSWORD, CREDENTIALS], [CREDENTIALS, PASSWORD]):
        log = tmp_path / "server.log"
        log.write_text(f"DB_CREDENTIALS={CREDENTIALS}\nDB_PASSWORD={PASSWORD}\n")
        mask_files(tmp_path, secrets)
        assert log.read_text() == "DB_CREDENTIALS=<redacted>\nDB_PASSWORD=<redacted>\n"


def test_files_mask_the_same_short_values_texts_do(tmp_path):
    # The shortest values that count as secrets in a text count in a file too.
    log = tmp_path / "server.log"
    log.write_text("tp=1 on abc key=abcd\n")
    mask_files(tmp_path, ["1", "on", "abc", "abcd"])
    assert log.read_text() == "tp=1 on abc key=<redacted>\n"
