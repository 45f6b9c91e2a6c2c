#!/usr/bin/env python3
"""What the agent reads from a real GPU host, read there: the stack fingerprint (`agent/stack.read_stack`, the
record's `provenance.stack`), the per-case GPU state (`agent/gpu.gpu_state`, `bench_cases[*].gpu_start/end`),
and nvidia-smi's answer to each field the two ask for, one at a time, so that a field this driver does not know
is named rather than folded into the fallback. Standard library only (the agent's rule); no SGLang needed.

    PYTHONPATH=. python3 scripts/gpu/probe_facts.py "$OUT/probe-facts.json"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from harness.agent.gpu import STATE_FIELDS, gpu_state, smi_text
from harness.agent.stack import SMI_FIELDS, read_stack


def main(out: str) -> int:
    env = dict(os.environ)
    facts, gpus = read_stack(sys.executable, env)
    per_field = {f: (smi_text(env, ["--query-gpu=" + f, "--format=csv,noheader,nounits"]) or "<refused>").strip()
                 for f in dict.fromkeys(SMI_FIELDS + STATE_FIELDS)}
    report = {"stack": dataclasses.asdict(facts), "gpus": [dataclasses.asdict(g) for g in gpus or []],
              "gpu_state": [dataclasses.asdict(s) for s in gpu_state(env) or []], "smi_per_field": per_field}
    text = json.dumps(report, indent=1, default=str)
    with open(out, "w") as f:
        f.write(text + "\n")
    print(text)
    refused = [f for f, v in per_field.items() if v == "<refused>"]
    print("fields refused by this driver:", refused or "none")
    return 1 if refused or not facts.gpus else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
