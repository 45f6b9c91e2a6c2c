"""The CUDA FP8 MLA kernel in a live server at two KV pool sizes (experiments/real-h200/cuda-pool-ratio.yaml).

    python benchmarks/live_pool.py RESULTS_DIR [--run RUN_ID] [--out benchmarks/results/fp8_mla_live_pool]

Per backend and pool size: status, the KV pool in tokens (the server log's `max_total_num_tokens`), time to
ready, batch-1 median ITL of every repeat and their median, TTFT, how many greedy texts equal
gather-then-cast's at pool 0.1 (prompt by prompt, every repeat), and from the profile's trace the decode
attention kernels' own GPU time: per launch and per decode step. Then, per backend, pool 0.3 over pool 0.1
for ITL and for the kernels' time, against the issue's bar of 1.15.

The trace numbers are also written beside each trace (`profile/decode-kernels.json`), so the page can be
made again where the traces were not kept.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from real_h200 import ITL_BAR, attempts, fmt, greedy_repeats, ratio, run_to_read  # noqa: E402

from harness.results.metrics import CaseSummary  # noqa: E402
from harness.results.schemas import Record  # noqa: E402
from harness.results.store import ResultsStore  # noqa: E402

SWEEP = ROOT / "experiments" / "real-h200" / "cuda-pool-ratio.yaml"
PREFIX = "real-cuda-pool"
BACKENDS = ("custom-fp8-mla", "flashinfer-mla-gather-cast")
POOLS = ("0.1", "0.3")
REFERENCE = f"{PREFIX}-flashinfer-mla-gather-cast-0.1"
# The decode attention kernels of each backend, by kernel name in the trace (graph replays included).
DECODE_KERNELS = {"custom-fp8-mla": re.compile(r"^mla_fp8_(split|merge)"),
                  "flashinfer-mla-gather-cast": re.compile(r"BatchMLAPageAttention")}
DECODE_STEP = re.compile(r"^step\[DECODE")
SIDECAR = "decode-kernels.json"


def pool_tokens(folder: Path) -> int | None:
    log = folder / "server.log"
    if not log.exists():
        return None
    m = re.search(r"max_total_num_tokens=(\d+)", log.read_text(errors="replace"))
    return int(m.group(1)) if m else None


def decode_kernels(rec: Record, folder: Path) -> dict[str, Any] | None:
    """The decode kernels' launches and GPU µs in the profile's trace, and the decode steps it recorded."""
    sidecar = folder / "profile" / SIDECAR
    if sidecar.exists():
        return dict(json.loads(sidecar.read_text()))
    if not (rec.profile and rec.profile.trace and (folder / rec.profile.trace).exists()):
        return None
    from harness.triage.profile import iter_events

    pattern = DECODE_KERNELS[str(rec.backend)]
    out: dict[str, Any] = {"launches": 0, "gpu_us": 0.0, "decode_steps": 0, "steps": 0, "decode_step_span_us": 0.0,
                           "by_kernel": {}}
    for ev in iter_events(folder / rec.profile.trace):
        if ev.get("ph") != "X":
            continue
        name = str(ev.get("name") or "")
        if ev.get("cat") == "kernel" and pattern.search(name):
            us = float(ev.get("dur") or 0.0)
            out["launches"] += 1
            out["gpu_us"] += us
            k = out["by_kernel"].setdefault(name, {"launches": 0, "gpu_us": 0.0})
            k["launches"] += 1
            k["gpu_us"] += us
        elif ev.get("cat") == "user_annotation" and name.startswith("step["):
            out["steps"] += 1
            if DECODE_STEP.match(name):  # the host's span of one decode forward (its launches, graph replay)
                out["decode_steps"] += 1
                out["decode_step_span_us"] += float(ev.get("dur") or 0.0)
    sidecar.write_text(json.dumps(out, indent=1) + "\n")
    return out


def side(rec: Record | None, folder: Path | None, reference: list[str] | None) -> dict[str, Any]:
    if rec is None or folder is None:
        return {"status": None}
    m = rec.metrics.get("decode-bs1") or CaseSummary()
    texts = greedy_repeats(folder)
    kernels = decode_kernels(rec, folder)
    per_step = (kernels["gpu_us"] / kernels["decode_steps"]) if kernels and kernels["decode_steps"] else None
    per_launch = (kernels["gpu_us"] / kernels["launches"]) if kernels and kernels["launches"] else None
    return {
        "status": str(rec.status.value), "host": rec.host, "abort_reason": rec.abort_reason, "error": rec.error,
        "pool_tokens": pool_tokens(folder), "ready_s": rec.timings.get("ready_s"),
        "itl_ms": [round(x, 3) for x in m.values("median_itl_ms")],
        "median_itl_ms": m.median("median_itl_ms"), "ttft_ms": m.median("median_ttft_ms"),
        "greedy_equal": [sum(a == b for a, b in zip(t, reference)) for t in texts] if reference else None,
        "greedy_prompts": len(reference) if reference else None,
        "decode_kernels": kernels, "kernel_us_per_decode_step": round(per_step, 2) if per_step else None,
        "kernel_us_per_launch": round(per_launch, 2) if per_launch else None,
        "decode_step_span_us": round(kernels["decode_step_span_us"] / kernels["decode_steps"], 1)
        if kernels and kernels.get("decode_steps") else None,
        "gpu_us_per_step": round(rec.profile.per_step_us, 1) if rec.profile and rec.profile.per_step_us else None,
        "profile_error": rec.profile_error, "revert_verified": rec.revert.verified if rec.revert else None,
        "base_commit": rec.provenance.base_commit, "variant": rec.provenance.patch_variants,
        "server_version": rec.provenance.server_version, "flashinfer": rec.provenance.flashinfer_version,
    }


def rows_of(store: ResultsStore, run_id: str) -> list[dict[str, Any]]:
    found = attempts(store, run_id)
    ref = found.get(REFERENCE)
    reference = (greedy_repeats(ref[1]) or [None])[0] if ref else None
    rows = []
    for backend in BACKENDS:
        sides = {pool: side(*found.get(f"{PREFIX}-{backend}-{pool}", (None, None)), reference) for pool in POOLS}
        small, big = sides["0.1"], sides["0.3"]
        rows.append({"backend": backend, "pools": sides,
                     "itl_ratio": ratio(big.get("median_itl_ms"), small.get("median_itl_ms")),
                     "kernel_ratio": ratio(big.get("kernel_us_per_launch"), small.get("kernel_us_per_launch")),
                     "ttft_ratio": ratio(big.get("ttft_ms"), small.get("ttft_ms"))})
    return rows


def verdict(r: float | None) -> str:
    return "—" if r is None else ("yes" if r <= ITL_BAR else "no")


def render(rows: list[dict[str, Any]], run_id: str) -> str:
    first = next((s for r in rows for s in r["pools"].values() if s.get("server_version")), {})
    lines = [
        "# The CUDA FP8 MLA kernel in a live SGLang server, at two KV pool sizes (one H200)",
        "",
        f"Sweep `experiments/real-h200/cuda-pool-ratio.yaml`, run `{run_id}`: SGLang {first.get('server_version')}, "
        f"FlashInfer {first.get('flashinfer')}, the tiny 4-layer DeepSeek-V2-style model with dummy weights, FP8 e4m3 "
        "KV cache, CUDA graphs up to batch 8. Batch-1 ITL: 4 prompts × 128 output tokens, run 4 times in one "
        "server (the value is the median of the repeats' medians); greedy texts: 32 prompts × 16 tokens, "
        "compared prompt by prompt with gather-then-cast's at pool 0.1 (stock FlashInfer's numerics); kernel "
        "time: the decode attention kernels in the 5-step profile's trace. Made by "
        "`python benchmarks/live_pool.py RESULTS_DIR`; raw rows in the `.json` beside this page.",
        "",
        "| backend | pool | KV pool tokens | status | ready s | ITL ms per repeat | median ITL ms | TTFT ms "
        "| greedy = gather-cast | decode kernels µs per launch | per decode step | decode step span µs | reverted |",
        "| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        for pool, s in r["pools"].items():
            eq = s.get("greedy_equal")
            greedy = ", ".join(f"{n}/{s['greedy_prompts']}" for n in eq) if eq else "—"
            status = s.get("status") or "not run"
            if s.get("abort_reason"):
                status += f" ({s['abort_reason']})"
            lines.append(
                f"| {r['backend']} | {pool} | {fmt(s.get('pool_tokens'), ',')} | {status} | {fmt(s.get('ready_s'), '.0f')} "
                f"| {', '.join(f'{x:.3f}' for x in s.get('itl_ms') or []) or '—'} | {fmt(s.get('median_itl_ms'), '.3f')} "
                f"| {fmt(s.get('ttft_ms'), '.1f')} | {greedy} | {fmt(s.get('kernel_us_per_launch'), '.2f')} "
                f"| {fmt(s.get('kernel_us_per_decode_step'), '.1f')} | {fmt(s.get('decode_step_span_us'), '.0f')} "
                f"| {fmt(s.get('revert_verified'))} |")
    lines += ["", "## Pool 0.3 over pool 0.1", "",
              f"The bar: at most {ITL_BAR:.2f}. ITL is wall clock per token (host scheduling included); the kernel "
              "ratio is the decode kernels' GPU time per launch from the traces; the decode step span is the "
              "host's profiler span around one decode forward.", "",
              "| backend | ITL ratio | within the bar | kernel time ratio | within the bar | TTFT ratio |",
              "| --- | ---: | --- | ---: | --- | ---: |"]
    for r in rows:
        lines.append(f"| {r['backend']} | {fmt(r['itl_ratio'], '.3f')} | {verdict(r['itl_ratio'])} "
                     f"| {fmt(r['kernel_ratio'], '.3f')} | {verdict(r['kernel_ratio'])} | {fmt(r['ttft_ratio'], '.2f')} |")
    spread = [s for r in rows for s in r["pools"].values() if len(s.get("itl_ms") or []) > 1]
    if spread:
        cv = [statistics.stdev(s["itl_ms"]) / statistics.mean(s["itl_ms"]) for s in spread]
        lines += ["", f"Spread of the repeats within one server: coefficient of variation {min(cv):.1%} to {max(cv):.1%}."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--run", default=None, help="run id (default: the newest run of the sweep)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fp8_mla_live_pool")
    args = ap.parse_args()
    store = ResultsStore(args.results)
    run_id = run_to_read(store, SWEEP, args.run)
    rows = rows_of(store, run_id)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"run_id": run_id, "rows": rows}, indent=1) + "\n")
    page = render(rows, run_id)
    args.out.with_suffix(".md").write_text(page)
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
