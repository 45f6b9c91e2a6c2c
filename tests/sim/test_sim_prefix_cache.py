"""The simulated server's prefix cache and first-use kernel builds, as a real SGLang server shows them: a prompt
sent again finds all but its last token cached (`#cached-token` in the `Prefill batch` line, a shorter prefill),
`/flush_cache` empties the cache, and a prompt of a new length at a batch size already served builds nothing
(FlashInfer keys a JIT module on dtypes and head sizes, not on prompt lengths)."""

from __future__ import annotations

import re

from tests.sim.simproc import FAST_ENV, READY_LINE, free_port, http, server_args

PREFILL = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)")


def generate(port: int, ids: list[int]) -> None:
    status, text = http(port, "POST", "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}})
    assert status == 200, text


def last_prefill(proc) -> tuple[int, int]:
    """(#new-token, #cached-token) of the newest prefill line, waited for."""
    proc.wait_for_line(r"Prefill batch, ", timeout=10)
    found = PREFILL.findall(proc.output)
    return int(found[-1][1]), int(found[-1][2])


def test_a_prompt_sent_again_is_a_prefix_hit_until_the_cache_is_flushed(shared_target, launch):
    port = free_port()
    proc = launch(shared_target, *server_args(port), env={**FAST_ENV, "SGLANG_SIM_JIT_BUILD_S": "0"})
    proc.wait_for_line(READY_LINE, timeout=30)
    prompt = list(range(100, 164))
    generate(port, prompt)
    assert last_prefill(proc) == (64, 0)
    generate(port, prompt)
    assert last_prefill(proc) == (1, 63)  # SGLang computes the last token again
    generate(port, prompt[:32] + list(range(500, 532)))  # a shared first half
    assert last_prefill(proc) == (32, 32)
    assert http(port, "POST", "/flush_cache")[0] == 200
    generate(port, prompt)
    assert last_prefill(proc) == (64, 0)


def test_a_new_prompt_length_at_a_batch_size_already_served_builds_no_kernel(shared_target, launch):
    """The cause of a suite red on one machine and green on another: the sim built a kernel per (batch tile,
    longest prompt rounded up to a power of two), so a one-wave warm-up left the lengths of later waves to build
    inside a measured repeat, and which new lengths a repeat met depended on how the machine's timing grouped
    requests into prefill batches."""
    port = free_port()
    proc = launch(shared_target, *server_args(port), env={**FAST_ENV, "SGLANG_SIM_JIT_BUILD_S": "0.5"})
    proc.wait_for_line(READY_LINE, timeout=30)
    # one request at a time: the batch-of-one kernel, which the server's own startup request built already
    for n in (10, 3, 40, 300):
        generate(port, list(range(1000 * n, 1000 * n + n)))
    assert last_prefill(proc)[0] == 300
    builds = [line for line in proc.output.splitlines() if "Loading JIT ops" in line]
    assert builds == [], builds
