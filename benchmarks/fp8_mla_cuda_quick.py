"""Quick GPU check of the CUDA FP8 MLA path: correctness on a few shapes, timing vs the Triton path and
(``--baseline DIR``) vs an earlier copy of ``kernels/`` in the same run, host time of an eager call, and
(``--pools``) whether a call's time depends on the size of the pool its rows sit in.

Usage: python benchmarks/fp8_mla_cuda_quick.py [--shapes HxBxC,...] [--baseline DIR] [--no-triton]
``DIR`` holds a package ``kernels_old/`` (an earlier ``kernels/``, e.g. ``git archive REV kernels``
renamed); its dispatch imports its own ``_cuda`` sibling, so old and new run side by side."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8_mla_decode import SM_SCALE, make_case, time_graph  # noqa: E402

from kernels import fp8_mla_decode as dispatch  # noqa: E402
from kernels import fp8_mla_decode_cuda as cu  # noqa: E402
from kernels.fp8_mla_decode import D_KV, D_NOPE, mla_decode, reference_mla_decode  # noqa: E402

OLD: dict[str, object] = {}  # "dispatch", "cuda": the baseline's modules (--baseline)


def load_baseline(folder: Path) -> None:
    sys.path.insert(0, str(folder))
    import importlib

    OLD["dispatch"] = importlib.import_module("kernels_old.fp8_mla_decode")
    OLD["cuda"] = importlib.import_module("kernels_old.fp8_mla_decode_cuda")


def check(lens, heads, seed, k_scale=1.0, v_scale=1.0, ts=False, splits=None, cfg=None):
    g = torch.Generator(device="cpu").manual_seed(seed)
    total = sum(lens)
    pool_n = total + 100
    pool = (torch.randn(pool_n, 1, D_KV, generator=g) * 0.6).to(torch.float8_e4m3fn)
    used = torch.randperm(pool_n, generator=g)[:total]
    poison = torch.ones(pool_n, dtype=torch.bool)
    poison[used] = False
    pool.view(torch.uint8)[poison] = 0x7F
    indptr = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(len(lens), heads, D_KV, generator=g).to(torch.bfloat16)
    tsc = (torch.rand(pool_n, generator=g) + 0.5) if ts else None
    pool, indptr, idx, q = pool.cuda(), indptr.cuda(), used.int().cuda(), q.cuda()
    tsc = tsc.cuda() if ts else None
    ref = reference_mla_decode(q, pool, indptr, idx, SM_SCALE, k_scale, v_scale, tsc)
    out = torch.full((len(lens), heads, D_NOPE), float("nan"), dtype=torch.bfloat16, device="cuda")
    cu.mla_decode_cuda(q[..., :D_NOPE], q[..., D_NOPE:], pool.view(pool_n, D_KV), indptr, idx, SM_SCALE,
                       k_scale, v_scale, tsc, out, cfg, splits)
    torch.cuda.synchronize()
    nan = torch.isnan(out).any().item()
    rel = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return rel, nan


def host_us(case, n=200, mod=None):
    """Host microseconds per eager call of the dispatch (``mla_decode``) of ``mod`` (default: ours)."""
    decode = (mod or dispatch).mla_decode
    out = torch.empty(case.batch, case.heads, D_NOPE, dtype=torch.bfloat16, device="cuda")
    qn, qr = case.q[..., :D_NOPE], case.q[..., D_NOPE:]
    idx = case.indices[0]
    for _ in range(5):
        decode(qn, qr, case.pool, case.indptr, idx, SM_SCALE, out=out)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):  # the least of three rounds: other work on the host only adds
        t0 = time.perf_counter()
        for _ in range(n):
            decode(qn, qr, case.pool, case.indptr, idx, SM_SCALE, out=out)
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return best


def time_shape(h, b, c, page, args):
    case = make_case(h, b, c, torch.device("cuda"), page=page)
    row = dict(heads=h, batch=b, context=c, page=page)
    out = torch.empty(b, h, D_NOPE, dtype=torch.bfloat16, device="cuda")
    qn, qr = case.q[..., :D_NOPE], case.q[..., D_NOPE:]
    runs = [] if args.no_triton else [("triton", "triton", 2, ())]
    runs += [(f"cuda-{c}", "cuda", c, ()) for c in args.configs.split(",")]
    if OLD:
        runs.append(("cuda-old", "old", "2:64:2", ()))
    runs += [(f"cuda-{v}", "cuda", "2:64:2", tuple(v.split("+"))) for v in args.variants.split(",") if v]
    runs += [(f"cuda-splits{n}", "cuda", "2:64:2", ("SPLITS", n)) for n in args.splits.split(",") if n]
    for name, impl, stages, defs in runs:
        nsplit = None
        if defs and defs[0] == "SPLITS":
            nsplit, defs = int(defs[1]), ()
        if impl in ("cuda", "old"):
            mod = cu if impl == "cuda" else OLD["cuda"]
            st, bn, ctas = (int(x) for x in stages.split(":"))
            cfg = mod.CudaConfig(stages=st, block_n=bn, ctas_per_sm=ctas, defines=defs)

            def step(cfg=cfg, nsplit=nsplit, mod=mod):
                for idx in case.indices:
                    mod.mla_decode_cuda(qn, qr, case.pool, case.indptr, idx, SM_SCALE, 1.0, 1.0, None, out, cfg, nsplit)
                return out
        else:
            def step():
                for idx in case.indices:
                    mla_decode(qn, qr, case.pool, case.indptr, idx, SM_SCALE, out=out, impl="triton")
                return out
        us = time_graph(step) / case.layers
        row[name] = round(us, 2)
        row[name + "_tbps"] = round(case.kv_bytes / us / 1e6, 3)
    row["host_us_eager"] = round(host_us(case), 1)
    if OLD:
        row["host_us_eager_old"] = round(host_us(case, mod=OLD["dispatch"]), 1)
    print(json.dumps(row), flush=True)
    return row


def pool_size_rows(heads, batch, context, pools):
    """The same rows (random slots) in pools of different sizes, CUDA-graph us per call: the kernel
    reads only the rows it is given, so the time should not move with the pool (a live server's
    FP8 pool at --mem-fraction-static 0.1 / 0.3 held 6.3M / 19.3M tokens)."""
    res = []
    for n in pools:
        pool = torch.empty(n, 1, D_KV, dtype=torch.uint8, device="cuda").random_(0, 0x58).view(torch.float8_e4m3fn)
        idx = torch.randperm(n, device="cuda")[: batch * context].to(torch.int32)
        indptr = torch.arange(0, batch + 1, dtype=torch.int32, device="cuda") * context
        q = torch.randn(batch, heads, D_KV, dtype=torch.bfloat16, device="cuda")
        out = torch.empty(batch, heads, D_NOPE, dtype=torch.bfloat16, device="cuda")
        qn, qr = q[..., :D_NOPE], q[..., D_NOPE:]
        def step(qn=qn, qr=qr, pool=pool, indptr=indptr, idx=idx, out=out):
            return mla_decode(qn, qr, pool, indptr, idx, SM_SCALE, out=out)

        us = time_graph(step)
        row = dict(pool_tokens=n, heads=heads, batch=batch, context=context, us=round(us, 2))
        print("pool", json.dumps(row), flush=True)
        res.append(row)
        del pool, idx
        torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="16x64x8192,8x64x32768,16x64x32768,8x8x2048,16x8x8192,16x1x131072,8x128x8192,64x8x8192,128x64x8192")
    ap.add_argument("--configs", default="2:64:2", help="comma list of stages:block_n:ctas_per_sm")
    ap.add_argument("--pages", default="1")
    ap.add_argument("--splits", default="")
    ap.add_argument("--variants", default="", help="comma list of define sets joined by +, e.g. SKIP_QK,SKIP_PV")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--profile", default="", help="HxBxC: only run the CUDA kernel 3 times eagerly (for ncu)")
    ap.add_argument("--profile-config", default="", help="with --profile: stages:block_n:ctas_per_sm[:DEFINE+...]")
    ap.add_argument("--cubin", type=Path, default=None, help="write the compiled cubin here")
    ap.add_argument("--baseline", type=Path, default=None, help="folder holding kernels_old/ to time beside ours")
    ap.add_argument("--no-triton", action="store_true", help="skip the Triton path (its JIT takes a while)")
    ap.add_argument("--pools", default="", help="HxBxC:N1,N2,..: one shape's time in pools of N1, N2 tokens")
    ap.add_argument("--skip-checks", action="store_true", help="timing only")
    args = ap.parse_args()
    if args.baseline:
        load_baseline(args.baseline)
    if args.profile:
        h, b, c = map(int, args.profile.split("x"))
        case = make_case(h, b, c, torch.device("cuda"), layers=1)
        out = torch.empty(b, h, D_NOPE, dtype=torch.bfloat16, device="cuda")
        cfg = None
        if args.profile_config:
            parts = args.profile_config.split(":")
            st, bn, ctas = (int(x) for x in parts[:3])
            cfg = cu.CudaConfig(stages=st, block_n=bn, ctas_per_sm=ctas,
                                defines=tuple(parts[3].split("+")) if len(parts) > 3 else ())
        for _ in range(3):
            cu.mla_decode_cuda(case.q[..., :D_NOPE], case.q[..., D_NOPE:], case.pool, case.indptr, case.indices[0],
                               SM_SCALE, 1.0, 1.0, None, out, cfg)
        torch.cuda.synchronize()
        if args.cubin:
            args.cubin.write_bytes(next(iter(cu._KERNELS.values())).cubin)
        return
    res = {"correct": [], "timing": [], "pools": []}

    def save():  # after every section: a run cut short still leaves what it measured
        if args.out:
            args.out.write_text(json.dumps(res, indent=1))

    if args.pools:
        shape, sizes = args.pools.split(":")
        h, b, c = map(int, shape.split("x"))
        res["pools"] = pool_size_rows(h, b, c, [int(n) for n in sizes.split(",")])
        save()
    cases = [] if args.skip_checks else [([1, 0, 37, 64, 65, 1000], 16, 1), ([3000, 5, 129], 8, 2), ([70000], 16, 3), ([200] * 9, 64, 4),
             ([513, 1024], 128, 5)]
    for lens, heads, seed in cases:
        for splits in (None, 1, 7, 40):
            rel, nan = check(lens, heads, seed, splits=splits)
            res["correct"].append(dict(lens=lens[:4], heads=heads, splits=splits, rel=rel, nan=nan))
            print("check", heads, lens[:4], splits, f"{rel:.2e}", "NaN!" if nan else "", flush=True)
    if not args.skip_checks:
        rel, nan = check([700, 3], 16, 9, k_scale=torch.tensor([0.5], device="cuda"), v_scale=2.0, ts=True)
        print("check scales", f"{rel:.2e}", nan, flush=True)
        res["correct"].append(dict(scales=True, rel=rel, nan=nan))
    for c in ([] if args.skip_checks else args.configs.split(",")):
        st, bn, ctas = (int(x) for x in c.split(":"))
        for lens, heads, splits in (([5000, 77, 0, 31], 16, None), ([999, 64, 33], 8, 5), ([40000], 128, None)):
            rel, nan = check(lens, heads, 11, splits=splits, cfg=cu.CudaConfig(stages=st, block_n=bn, ctas_per_sm=ctas))
            print("check config", c, heads, splits, f"{rel:.2e}", "NaN!" if nan else "", flush=True)
            res["correct"].append(dict(config=c, heads=heads, splits=splits, rel=rel, nan=nan))
    save()
    for shape in [x for x in args.shapes.split(",") if x]:
        h, b, c = map(int, shape.split("x"))
        for page in [int(p) for p in args.pages.split(",")]:
            res["timing"].append(time_shape(h, b, c, page, args))
            save()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
