"""Secrets in the server's environment, on its command line (`--api-key`) or in the controller's own
environment never land in what the harness keeps (promise 4).

In-process checks of the masking the runner applies to every text and file it keeps; the end-to-end
check (a secret in a crashing server's fatal line, through the CLI) is in
tests/integration/test_promises_agent.py.
"""

from __future__ import annotations

import gzip

import pytest

from harness.common.protocol import PORT_SLOT, BenchCase, ProfileSpec, ServerSpec, Spec
from harness.masking import (
    attempt_secrets,
    controller_secret_values,
    is_secret_flag,
    mask_files,
    mask_secrets,
    redact_argv,
    secret_arg_values,
    secret_values,
)

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


# ------------------------------------------------------------------ secret flags on a command line


@pytest.mark.parametrize("flag", [
    "--api-key", "--admin-api-key", "--ssl-keyfile-password", "--watermark-key", "--hf-token",  # SGLang's (listed)
    "--watermark-key-b",  # listed: the pattern cannot see it
    "--db-password", "--ldap-passwd", "--client-secret", "--gcs-credentials", "--aws-credential", "--my-token",
    "--API-KEY", "--Hf-Token", "--api_key", "--HF_TOKEN",  # case and `_` for `-` do not matter
])
def test_flags_that_carry_secrets(flag):
    assert is_secret_flag(flag)


@pytest.mark.parametrize("flag", [
    "--max-total-tokens", "--tokenizer-path", "--ssl-keyfile", "--speculative-token-map", "--keyfile",
    "--kv-cache-dtype", "--port", "--model-path", "--tokens", "--passwords-file",
    "--bucket-time-to-first-token",  # SGLang's latency buckets: its last word is "token", its values are not
    "-key", "key", "token",  # not a long flag
])
def test_flags_that_carry_no_secret(flag):
    assert not is_secret_flag(flag)


ARGV = ["python", "-m", "sglang.launch_server", "--model-path", "/models/m", "--max-total-tokens", "8192",
        "--api-key", "sk-abc123", "--hf-token=hf_xyz789", "--port", PORT_SLOT, "--ssl-keyfile", "/etc/k.pem"]


def test_values_of_secret_flags_in_both_forms_are_secrets_others_are_not():
    assert secret_arg_values(ARGV) == ["sk-abc123", "hf_xyz789"]


def test_a_record_keeps_the_command_line_with_secret_values_redacted_in_both_forms():
    assert redact_argv(ARGV) == ["python", "-m", "sglang.launch_server", "--model-path", "/models/m",
                                 "--max-total-tokens", "8192", "--api-key", "<redacted>",
                                 "--hf-token=<redacted>", "--port", PORT_SLOT, "--ssl-keyfile", "/etc/k.pem"]
    assert ARGV[8] == "sk-abc123"  # the spec sent to the host keeps the value: the server needs it


def test_short_values_of_secret_flags_are_redacted_in_the_record_too():
    # The record names no secret however short: unlike masking free text, redacting an argument costs nothing.
    assert redact_argv(["--api-key", "k", "--api-key=k"]) == ["--api-key", "<redacted>", "--api-key=<redacted>"]


def test_a_secret_flag_without_a_value_takes_nothing_from_the_next_flag_or_a_slot():
    argv = ["--api-key", "--port", PORT_SLOT, "--hf-token", PORT_SLOT, "--admin-api-key"]
    assert secret_arg_values(argv) == [] and redact_argv(argv) == argv


def test_a_slot_before_a_secret_flag_does_not_end_the_search():
    # The port slot the agent fills in sits early in a server's argv; the secret flags come after it.
    argv = ["--port", PORT_SLOT, "--api-key", "sk-after-slot", "--hf-token=hf_after_slot"]
    assert secret_arg_values(argv) == ["sk-after-slot", "hf_after_slot"]


def test_a_secret_value_that_looks_like_a_flag_name_is_not_taken_for_one():
    # `--api-key -x…`: a single dash starts no flag SGLang has; argparse takes it as the value.
    assert secret_arg_values(["--api-key", "-xYz1234"]) == ["-xYz1234"]


def test_the_value_of_a_secret_flag_is_masked_where_the_server_echoes_it():
    log = "server_args=ServerArgs(model_path='/models/m', api_key='sk-abc123')\nerror: unrecognized arguments: " \
          "--hf-token=hf_xyz789\n"
    masked = mask_secrets(log, secret_arg_values(ARGV))
    assert "sk-abc123" not in masked and "hf_xyz789" not in masked and "api_key='<redacted>'" in masked


# ------------------------------------------------------------------ the controller's own environment


def test_controller_secrets_are_its_secret_named_values_long_enough_to_be_secrets():
    env = {"HF_TOKEN": TOKEN, "hf_token_lower": "abcdefgh", "SOME_KEY": "true", "KEYTIMEOUT": "1",
           "GH_PASSWORD": "1234567", "HOME": "/home/someone-long", "EMPTY_SECRET": ""}
    # 8 characters count, 7 do not; the name test is the one the server's variables pass (any case).
    assert sorted(controller_secret_values(env)) == sorted([TOKEN, "abcdefgh"])


def test_controller_secrets_come_from_this_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "ctl-s3cr3t-value")
    assert "ctl-s3cr3t-value" in controller_secret_values()


def test_an_attempt_masks_server_env_flags_of_every_command_line_and_the_controller_secrets(monkeypatch):
    monkeypatch.setenv("CONTROLLER_API_TOKEN", "ctl-s3cr3t-value")
    spec = Spec(run_id="r", attempt_id="a", repo="/repo",
                server=ServerSpec(argv=["python", "--api-key", "srv-key-1", "--hf-token", TOKEN, "--port", PORT_SLOT],
                                  env={"HF_TOKEN": TOKEN, "NCCL_DEBUG": "WARN"}),
                bench=[BenchCase(name="b", argv=["python", "--api-key=bench-key-2"])],
                profile=ProfileSpec(steps=1, activities=["CPU"], timeout=1.0, case="b",
                                    argv=["python", "--hf-token", "prof-token-3"]))
    secrets = attempt_secrets(spec)
    assert {TOKEN, "srv-key-1", "bench-key-2", "prof-token-3", "ctl-s3cr3t-value"} <= set(secrets)
    assert "WARN" not in secrets and secrets.count(TOKEN) == 1  # in the environment and on the command line


def test_an_attempt_without_a_profile_or_secrets_masks_only_the_controller_secrets(monkeypatch):
    monkeypatch.setattr("harness.masking.controller_secret_values", lambda: ["ctl-s3cr3t-value"])
    spec = Spec(run_id="r", attempt_id="a", repo="/repo", server=ServerSpec(argv=["python", "--port", "1"]))
    assert attempt_secrets(spec) == ["ctl-s3cr3t-value"]
