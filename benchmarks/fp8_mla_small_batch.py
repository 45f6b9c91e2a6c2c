"""Issue #47 on one H200: the FP8 MLA decode where the seed runs it (8-16 heads, batch 1-8), in one call.

    python3 benchmarks/fp8_mla_small_batch.py --out DIR [--tag _checks] [--sections env,checks,graph,timing,host]
                                              [--impls new,cl4,...] [--shapes HxBxC,...] [--baseline DIR]
    python3 benchmarks/fp8_mla_small_batch.py --report DIR/small_batch_a.json DIR/small_batch_b.json [--md FILE]
                                              # one markdown from several runs' JSON (no GPU needed)

Implementations, side by side in one process on the same pages (rows are random whole pages of 64 slots,
FlashMLA's page, as in benchmarks/fp8_mla_decode.py, whose case builder, graph timer and FlashMLA call this
reuses):

  new       the CUDA path's default CudaConfig: the small-batch plan (clusters of 8 split CTAs, one launch)
  cl4       CudaConfig(cluster=4): the same plan with clusters of 4
  new16     CudaConfig(row_clusters_max=16): clusters of 8, at most 16 a row (batch 1 with rows >= 16K: half
            the CTAs, each twice the tokens, half the partials in the last cluster's merge)
  mh3       64/128 heads only: CudaConfig(stages=2, block_n=32, ctas_per_sm=3, Q_REG_KSTEPS=8): three CTAs
            per SM (168 registers, 57 KB), 12 warps instead of 8 for an issue-bound kernel
  legacy    CudaConfig(cluster=0): the plan of 2026-12-01 (split kernel; fused merge up to 16 splits, the
            merge kernel beyond), same source
  old       an earlier copy of kernels/ (``--baseline DIR`` holding ``kernels_old/``), when given
  flashmla  FlashMLA's dense FP8 decode (``sgl_kernel.flash_mla``; scripts/gpu/fetch_flashmla.sh brings it)

Sections (each writes DIR/small_batch{tag}.json as it ends, so a run cut short keeps what it measured; a
device fault ends the process, so scripts/gpu/kernel_small_batch.sh runs the checks and the timing apart):

  env       device, the driver's resident clusters per cluster size, the plan each shape gets
  checks    error vs the fp32 reference (NaN-poisoned unused pool rows, ragged batches 1-8 with empty and
            one-token rows, 8/16/64/128 heads, scales), every implementation of ours; bar 2e-3
  graph     one CUDA graph per (plan, batch), replayed with new lengths: checked each time, counters zero
  timing    CUDA-graph us per layer (median of replays over enough layers to leave L2) and error, per shape
  host      eager host us of one call (the small-batch plan)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

ERR_BAR = 2e-3
DEVICE = "cuda"  # (a dry run of the sections' logic on the CPU sets "cpu" with a stand-in kernel)
TABLE = [(8, 1, 2048), (8, 1, 8192), (8, 1, 32768), (8, 8, 8192), (16, 1, 8192), (16, 8, 8192), (16, 8, 32768),
         (64, 64, 8192), (128, 64, 8192)]  # the table
GRID = [(h, b, c) for h in (8, 16) for b in (1, 2, 4, 8) for c in (2048, 8192, 32768, 131072)]
SHAPES = sorted(set(TABLE + GRID))
OURS = ("new", "cl4", "new16", "mh3", "legacy", "old")


def configs(cu) -> dict:
    return {"new": cu.CudaConfig(), "cl4": cu.CudaConfig(cluster=4), "new16": cu.CudaConfig(row_clusters_max=16),
            "mh3": cu.CudaConfig(stages=2, block_n=32, ctas_per_sm=3, defines=("Q_REG_KSTEPS=8",)),
            "legacy": cu.CudaConfig(cluster=0)}


def decoder(name: str, cu, old):
    """(q_nope, q_rope, pool, indptr, indices, sm_scale, k_scale, v_scale, token_scale, out) -> out."""
    if name == "old":
        def run_old(qn, qr, pool, indptr, idx, sm, ks, vs, ts, out):
            return old.mla_decode_cuda(qn, qr, pool, indptr, idx, sm, ks, vs, ts, out)
        return run_old
    cfg = configs(cu)[name]

    def run(qn, qr, pool, indptr, idx, sm, ks, vs, ts, out):
        return cu.mla_decode_cuda(qn, qr, pool, indptr, idx, sm, ks, vs, ts, out, cfg)
    return run


def plan_of(cu, name: str, batch: int, heads: int) -> dict:
    import torch

    cfg = configs(cu)[name]
    k = cu._kernels(0, False, cfg)
    plan = cu._plan(k, cfg, batch, heads, None, torch.device(DEVICE))
    return {"cluster": plan.cluster, "splits": plan.n_split, "fused": plan.fused,
            "ctas": plan.grid[0] * plan.grid[1] * plan.grid[2]}


# ---------------------------------------------------------------------------------------------- sections


def section_env(res, cu, names) -> None:
    import torch
    import triton

    res["env"] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
                  "sms": torch.cuda.get_device_properties(0).multi_processor_count,
                  "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    for name in ("new", "cl4"):
        res["env"][f"cluster_slots_{name}"] = cu._kernels(0, False, configs(cu)[name]).cluster_slots
    try:
        import sgl_kernel

        res["env"]["sgl_kernel"] = getattr(sgl_kernel, "__version__", "?")
    except Exception as exc:  # noqa: BLE001 -- FlashMLA is optional: its rows say why they are missing
        res["env"]["sgl_kernel"] = f"missing: {exc}"
    res["plans"] = [dict(heads=h, batch=b, impl=n, **plan_of(cu, n, b, h))
                    for h, b in sorted({(h, b) for h, b, _ in SHAPES}) for n in ("new", "cl4", "legacy")]
    print("env", json.dumps(res["env"]), flush=True)


CHECK_CASES = [  # (lens, heads, scales)
    ([2048], 8, False), ([8192], 8, False), ([32768], 16, False), ([131072], 8, False), ([1], 16, False),
    ([65], 8, False), ([0, 5000], 16, False), ([7000, 2048], 8, True), ([1, 64, 65, 30000], 16, False),
    ([8192, 0, 333, 2048], 8, False), ([0, 1, 63, 64, 65, 2047, 8192, 20000], 16, False),
    ([2048] * 8, 8, True), ([32768] * 8, 16, False), ([4096, 9000, 0, 17], 64, False), ([12000], 128, False),
    ([0, 0, 0], 16, False),
]


def make_inputs(lens, heads, seed, device):
    import torch

    from kernels.fp8_mla_decode import D_KV

    g = torch.Generator(device="cpu").manual_seed(seed)
    total = sum(lens)
    pool_n = total + 100
    pool = (torch.randn(pool_n, 1, D_KV, generator=g) * 0.6).to(torch.float8_e4m3fn)
    used = torch.randperm(pool_n, generator=g)[:total]
    poison = torch.ones(pool_n, dtype=torch.bool)
    poison[used] = False
    pool.view(torch.uint8)[poison] = 0x7F  # NaN: a read outside the rows shows
    indptr = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(len(lens), heads, D_KV, generator=g).to(torch.bfloat16)
    return pool.to(device), indptr.to(device), used.int().to(device), q.to(device)


def rel_error(out, ref, lens) -> tuple[float, bool]:
    import torch

    bad = bool(torch.isnan(out).any().item())
    for b, n in enumerate(lens):
        if n == 0 and bool(out[b].float().abs().sum().item() != 0):
            bad = True  # an empty row must give zeros
    rel = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return rel, bad


def section_checks(res, cu, old, names) -> None:
    import torch

    from kernels.fp8_mla_decode import D_NOPE, reference_mla_decode

    dev = torch.device(DEVICE)
    res["checks"] = []
    for i, (lens, heads, scales) in enumerate(CHECK_CASES):
        pool, indptr, idx, q = make_inputs(lens, heads, 100 + i, dev)
        ks = torch.tensor([0.75], device=dev) if scales else 1.0
        vs = 1.5 if scales else 1.0
        ts = (torch.rand(pool.shape[0], device=dev) + 0.25) if scales else None
        ref = reference_mla_decode(q, pool, indptr, idx, 0.0625, 0.75 if scales else 1.0, vs, ts)
        for name in [n for n in names if n != "mh3" or heads >= 64]:
            out = torch.full((len(lens), heads, D_NOPE), float("nan"), dtype=torch.bfloat16, device=dev)
            row = dict(lens=lens[:8], heads=heads, scales=scales, impl=name)
            try:
                decoder(name, cu, old)(q[..., :D_NOPE], q[..., D_NOPE:], pool, indptr, idx, 0.0625, ks, vs, ts, out)
                torch.cuda.synchronize()
                rel, bad = rel_error(out, ref, lens)
                row.update(rel=rel, bad=bad, ok=rel <= ERR_BAR and not bad)
            except Exception as exc:  # noqa: BLE001 -- one failure must not hide the other rows
                row.update(error=f"{type(exc).__name__}: {exc}"[:300], ok=False)
            res["checks"].append(row)
            print("check", json.dumps(row), flush=True)


def section_graph(res, cu, names) -> None:
    """Capture once per (plan, batch, heads), replay with new lengths; counters must be back at zero."""
    import torch

    from kernels.fp8_mla_decode import D_NOPE, reference_mla_decode

    dev = torch.device(DEVICE)
    res["graph"] = []
    for name in [n for n in names if n in ("new", "cl4", "legacy")]:  # new16: the same kernel as new
        cfg = configs(cu)[name]
        for batch, heads in ((1, 8), (2, 16), (4, 8), (8, 16)):
            max_tokens = 40000
            pool, _, used, q = make_inputs([max_tokens], heads, 200 + batch, dev)
            q = q.expand(batch, -1, -1).contiguous()
            indptr = torch.zeros(batch + 1, dtype=torch.int32, device=dev)
            indices = torch.zeros(max_tokens, dtype=torch.int32, device=dev)
            out = torch.empty(batch, heads, D_NOPE, dtype=torch.bfloat16, device=dev)

            def step(q=q, pool=pool, indptr=indptr, indices=indices, out=out, cfg=cfg):
                cu.mla_decode_cuda(q[..., :D_NOPE], q[..., D_NOPE:], pool, indptr, indices, 0.0625, 1.0, 1.0, None,
                                   out, cfg)

            row = dict(impl=name, batch=batch, heads=heads, replays=[])
            try:
                step()
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    step()
                k = cu._kernels(0, False, cfg)
                gen = torch.Generator().manual_seed(batch)
                for total in (batch, 2048 * batch, 8192 * batch if batch <= 4 else 30000, 39000, 1):
                    total = min(total, max_tokens)
                    cuts = sorted(torch.randint(0, total + 1, (batch - 1,), generator=gen).tolist())
                    lens = [b - a for a, b in zip([0] + cuts, cuts + [total])]
                    indptr.copy_(torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32))
                    indices[:total] = used[torch.randperm(used.numel(), device=dev)][:total]
                    out.fill_(float("nan"))
                    graph.replay()
                    torch.cuda.synchronize()
                    ref = reference_mla_decode(q, pool, indptr, indices[:total], 0.0625)
                    rel, bad = rel_error(out, ref, lens)
                    zero = k.arrivals is None or not bool(k.arrivals.any().item())
                    row["replays"].append(dict(lens=lens, rel=rel, bad=bad, counters_zero=zero))
                row["ok"] = all(r["rel"] <= ERR_BAR and not r["bad"] and r["counters_zero"] for r in row["replays"])
                del graph
            except Exception as exc:  # noqa: BLE001
                row.update(error=f"{type(exc).__name__}: {exc}"[:300], ok=False)
            res["graph"].append(row)
            print("graph", json.dumps(row), flush=True)


def section_timing(res, cu, old, names, shapes, flashmla: bool, save=lambda: None) -> None:
    import torch
    from fp8_mla_decode import SM_SCALE, impl_flashmla, make_case, max_rel_error, time_graph

    from kernels.fp8_mla_decode import D_NOPE

    res["timing"] = []
    for h, b, c in shapes:
        case = make_case(h, b, c, torch.device(DEVICE))
        row = dict(heads=h, batch=b, context=c, layers=case.layers, kv_mb=round(case.kv_bytes / 1e6, 2))
        qn, qr = case.q[..., :D_NOPE], case.q[..., D_NOPE:]
        same = "new16" in names and plan_of(cu, "new16", b, h) == plan_of(cu, "new", b, h)
        runs = [(n, decoder(n, cu, old)) for n in names if not (n == "new16" and same) and (n != "mh3" or h >= 64)]
        runs += [("flashmla", None)] if flashmla else []
        for name, fn in runs:
            try:
                if fn is None:
                    step = impl_flashmla(case)
                else:
                    out = torch.empty(b, h, D_NOPE, dtype=torch.bfloat16, device=DEVICE)

                    def step(fn=fn, out=out, case=case, qn=qn, qr=qr):
                        for idx in case.indices:
                            fn(qn, qr, case.pool, case.indptr, idx, SM_SCALE, 1.0, 1.0, None, out)
                        return out
                us = time_graph(step) / case.layers
                result = step()
                torch.cuda.synchronize()
                row[f"{name}_us"] = round(us, 2)
                row[f"{name}_err"] = round(max_rel_error(result, case, sorted({0, b - 1})), 5)
            except Exception as exc:  # noqa: BLE001 -- a failing implementation must not lose the others
                row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            torch.cuda.empty_cache()
        res["timing"].append(row)
        save()  # a fault later in the process keeps the rows measured so far
        print("time", json.dumps(row), flush=True)
        del case
        torch.cuda.empty_cache()


def section_host(res, cu) -> None:
    import torch

    from kernels.fp8_mla_decode import D_KV, D_NOPE, mla_decode

    res["host"] = []
    for h, b, c in ((8, 1, 2048), (16, 8, 2048)):
        q = torch.randn(b, h, D_KV, dtype=torch.bfloat16, device=DEVICE)
        pool = torch.randint(0, 0x58, (b * c + 64, D_KV), dtype=torch.uint8, device=DEVICE).view(torch.float8_e4m3fn)
        indptr = torch.arange(b + 1, dtype=torch.int32, device=DEVICE) * c
        idx = torch.arange(b * c, dtype=torch.int32, device=DEVICE)
        out = torch.empty(b, h, D_NOPE, dtype=torch.bfloat16, device=DEVICE)
        for _ in range(10):
            mla_decode(q[..., :D_NOPE], q[..., D_NOPE:], pool, indptr, idx, 0.0625, out=out)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(200):
                mla_decode(q[..., :D_NOPE], q[..., D_NOPE:], pool, indptr, idx, 0.0625, out=out)
            best = min(best, (time.perf_counter() - t0) / 200 * 1e6)
            torch.cuda.synchronize()
        res["host"].append(dict(heads=h, batch=b, context=c, host_us=round(best, 1),
                                plan=plan_of(cu, "new", b, h)))
        print("host", json.dumps(res["host"][-1]), flush=True)


# ---------------------------------------------------------------------------------------------- report


def _ratio(row: dict, impl: str) -> float | None:
    f, o = row.get("flashmla_us"), row.get(f"{impl}_us")
    return f / o if f and o else None


def report(res: dict) -> str:
    """Markdown: the timing table (FlashMLA / ours: > 1 = ours faster), the issue's bar, checks, graph."""
    env = res.get("env", {})
    impls = [n for n in OURS if any(f"{n}_us" in r for r in res.get("timing", []))]
    lines = ["# FP8 MLA decode at small batch on one H200 (issue #47)", "",
             f"Run: {env.get('date', '?')}, {env.get('device', '?')}, torch {env.get('torch', '?')}, triton "
             f"{env.get('triton', '?')}, sgl_kernel {env.get('sgl_kernel', '?')}; resident clusters x size: "
             f"new {env.get('cluster_slots_new', '?')}, cl4 {env.get('cluster_slots_cl4', '?')} CTAs. CUDA-graph us "
             "per layer (median of replays); ratio = FlashMLA us / ours (> 1: ours faster); err vs the fp32 reference.",
             "", "| heads | batch | context | FlashMLA us | " + " | ".join(f"{n} us" for n in impls)
             + " | " + " | ".join(f"{n} ratio" for n in impls) + " | err new | err FlashMLA |",
             "|" + "---|" * (4 + 2 * len(impls) + 2)]
    for r in res.get("timing", []):
        cells = [str(r["heads"]), str(r["batch"]), str(r["context"]), _fmt(r.get("flashmla_us"))]
        cells += [_fmt(r.get(f"{n}_us")) if f"{n}_error" not in r else "err" for n in impls]
        cells += [_fmt(_ratio(r, n), "{:.2f}x") for n in impls]
        cells += [_fmt(r.get("new_err"), "{:.1e}"), _fmt(r.get("flashmla_err"), "{:.1e}")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## The issue's bar", ""] + verdicts(res)
    errors = sorted({f"{k}: {v}" for r in res.get("timing", []) for k, v in r.items() if k.endswith("_error")})
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    return "\n".join(lines) + "\n"


def verdicts(res: dict) -> list[str]:
    out = []
    rows = [r for r in res.get("timing", []) if r["heads"] in (8, 16) and r["batch"] <= 8 and r["context"] <= 32768]
    ratios = [(r, _ratio(r, "new")) for r in rows]
    have = [(r, x) for r, x in ratios if x is not None]
    if have:
        lost = [f"{r['heads']}h b{r['batch']} {r['context'] // 1024}K {x:.2f}x" for r, x in have if x < 1.0]
        out.append(f"- >= 1.0x FlashMLA FP8 on every 8/16-head shape, batch 1-8, 2K-32K: {len(have) - len(lost)}/"
                   f"{len(have)} -> {'MET' if not lost else 'MISSED'}" + (f" (below: {', '.join(lost)})" if lost else ""))
    for h, b, c in ((64, 64, 8192), (128, 64, 8192)):
        r = next((r for r in res.get("timing", []) if (r["heads"], r["batch"], r["context"]) == (h, b, c)), None)
        ratios = {n: _ratio(r, n) for n in OURS} if r else {}
        ratios = {n: x for n, x in ratios.items() if x}
        if ratios:
            bar = 0.39 if h == 64 else 0.34
            best = max(ratios, key=ratios.__getitem__)
            gain = f"; {best} / legacy in this run: {ratios[best] / ratios['legacy']:.2f}x" if "legacy" in ratios else ""
            out.append(f"- {h}h b{b} {c // 1024}K: " + ", ".join(f"{n} {x:.2f}x" for n, x in ratios.items())
                       + f" FlashMLA (the issue's table: {bar}x){gain} -> "
                       + ("higher" if ratios[best] > bar * 1.05 else "NOT clearly higher (within 5 %)"))
    errs = [r["new_err"] for r in res.get("timing", []) if "new_err" in r]
    errs += [c["rel"] for c in res.get("checks", []) if "rel" in c]
    if errs:
        out.append(f"- error vs the fp32 reference: at most {max(errs):.1e} -> {'MET' if max(errs) <= ERR_BAR else 'MISSED'}"
                   f" (<= {ERR_BAR:.0e}; checks failing: {sum(1 for c in res.get('checks', []) if not c.get('ok'))})")
    graph = res.get("graph", [])
    if graph:
        bad = [f"{g['impl']} b{g['batch']}" for g in graph if not g.get("ok")]
        out.append(f"- CUDA-graph replay with changing lengths: {len(graph) - len(bad)}/{len(graph)} correct, counters "
                   f"zero -> {'MET' if not bad else 'MISSED'}" + (f" ({', '.join(bad)})" if bad else ""))
    return out


def merge(runs: list[dict]) -> dict:
    """Several runs' results as one: timing rows of the same shape united, checks and graph rows appended,
    env and seconds united, anything else from the last run that has it."""
    out: dict = {"timing": [], "checks": [], "graph": [], "host": []}
    shapes: dict[tuple, dict] = {}
    for res in runs:
        for key, value in res.items():
            if key == "timing":
                for row in value:
                    shape = (row["heads"], row["batch"], row["context"])
                    if shape not in shapes:
                        shapes[shape] = {}
                        out["timing"].append(shapes[shape])
                    shapes[shape].update(row)
            elif key in ("checks", "graph", "host"):
                out[key] += value
            elif isinstance(value, dict):
                out[key] = {**out.get(key, {}), **value}
            else:
                out[key] = value
    return out


def _fmt(v, spec: str = "{:.1f}") -> str:
    return "-" if v is None else spec.format(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/small-batch"))
    ap.add_argument("--sections", default="env,checks,graph,timing,host")
    ap.add_argument("--shapes", default=None, help="comma list of HxBxC (default: the issue's table and grid)")
    ap.add_argument("--impls", default="new,cl4,new16,mh3,legacy,old,flashmla")
    ap.add_argument("--baseline", type=Path, default=None, help="folder holding kernels_old/ (an earlier kernels/)")
    ap.add_argument("--tag", default="", help="suffix of the JSON file: small_batch{tag}.json")
    ap.add_argument("--report", type=Path, nargs="+", default=None,
                    help="only write the markdown of these JSON files, merged (no GPU)")
    ap.add_argument("--md", type=Path, default=None, help="where --report writes (default: beside the first JSON)")
    args = ap.parse_args()
    if args.report:
        md = report(merge([json.loads(f.read_text()) for f in args.report]))
        (args.md or args.report[0].with_name("small_batch.md")).write_text(md)
        print(md)
        return
    from kernels import fp8_mla_decode_cuda as cu

    old = None
    if args.baseline and (args.baseline / "kernels_old").is_dir():
        import importlib

        sys.path.insert(0, str(args.baseline))
        old = importlib.import_module("kernels_old.fp8_mla_decode_cuda")
    wanted = args.impls.split(",")
    names = [n for n in OURS if n in wanted and (n != "old" or old is not None)]
    flashmla = "flashmla" in wanted
    if flashmla:
        try:
            from sgl_kernel.flash_mla import flash_mla_with_kvcache  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            print(f"FlashMLA unavailable ({exc}): timing without it", flush=True)
            flashmla = False
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")] if args.shapes else SHAPES
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict = {"impls": names + (["flashmla"] if flashmla else [])}
    out_json = args.out / f"small_batch{args.tag}.json"
    t0 = time.time()
    for section in args.sections.split(","):
        s0 = time.time()
        if section == "env":
            section_env(res, cu, names)
        elif section == "checks":
            section_checks(res, cu, old, names)
        elif section == "graph":
            section_graph(res, cu, names)
        elif section == "timing":
            section_timing(res, cu, old, names, shapes, flashmla,
                           save=lambda: out_json.write_text(json.dumps(res, indent=1) + "\n"))
        elif section == "host":
            section_host(res, cu)
        res.setdefault("seconds", {})[section] = round(time.time() - s0, 1)
        out_json.write_text(json.dumps(res, indent=1) + "\n")
    res["seconds"]["all"] = round(time.time() - t0, 1)
    out_json.write_text(json.dumps(res, indent=1) + "\n")
    print(report(res))
    failed = sorted({c["impl"] for c in res.get("checks", []) + res.get("graph", []) if not c.get("ok")})
    if failed:
        print("CHECKS FAILED for: " + ",".join(failed), flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
