"""Time the gather-cast against stock SGLang's full-pool cast, one layer, on a CUDA GPU.

    python patches/flashinfer_mla_gather_cast/bench_gather_cast.py [--pool-rows 495000] [--json OUT]

Not part of the patch set (only *.patch and files/ are applied). It loads files/.../mla_gather_cast.py
directly (needs torch and triton, not SGLang) and times, with triton.testing.do_bench:
  full-cast       k_buffer.to(bfloat16) on the whole [pool_rows, 1, 576] FP8 pool (what stock does)
  gather eager    the Triton gather-cast of exactly n rows (host-known n)
  gather graph    the CUDA-graph form: fixed launch over a pool-sized buffer, live count on the device
  gather torch    the PyTorch fallback (index_select + cast) of n rows
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch
import triton.testing

HERE = Path(__file__).resolve().parent
MODULE = HERE / "files" / "python" / "sglang" / "srt" / "layers" / "attention" / "mla_gather_cast.py"


def load():
    spec = importlib.util.spec_from_file_location("mla_gather_cast_bench", MODULE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    sys.dont_write_bytecode = True
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool-rows", type=int, default=495_000)
    ap.add_argument("--tokens", default="1024,8192,32768,131072,495000")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    gc = load()
    dev = "cuda"
    pool = (torch.randn(args.pool_rows, 1, 576, device=dev) * 3).to(torch.float8_e4m3fn)
    compact = torch.empty((args.pool_rows, 1, 576), dtype=torch.bfloat16, device=dev)
    index_buf = torch.zeros(args.pool_rows, dtype=torch.int32, device=dev)
    num_valid = torch.zeros(1, dtype=torch.int32, device=dev)
    rows = {"gpu": torch.cuda.get_device_name(), "pool_rows": args.pool_rows, "results": []}
    full_us = triton.testing.do_bench(lambda: pool.to(torch.bfloat16)) * 1e3
    rows["full_cast_us"] = round(full_us, 1)
    print(f"{torch.cuda.get_device_name()}: full-pool cast of {args.pool_rows} rows: {full_us:8.1f} us")
    print(f"{'tokens':>8} {'eager us':>9} {'graph us':>9} {'torch us':>9} {'x vs full (eager)':>18}")
    for n in [int(x) for x in args.tokens.split(",") if int(x) <= args.pool_rows]:
        idx = torch.randperm(args.pool_rows, device=dev)[:n].to(torch.int32)
        index_buf[:n] = idx
        num_valid.fill_(n)
        runs = (lambda: gc.gather_cast_kv(pool, idx, out=compact),
                lambda: gc.gather_cast_kv(pool, index_buf, out=compact, num_valid=num_valid),
                lambda: gc.gather_cast_kv(pool, idx, out=compact, impl="torch"))
        for run in runs:  # compile the kernels first: do_bench's estimate must not include that
            run()
        torch.cuda.synchronize()
        eager, graph, tpath = (triton.testing.do_bench(run) * 1e3 for run in runs)
        assert torch.equal(compact[:n], pool.to(torch.bfloat16)[idx.long()])
        rows["results"].append({"tokens": n, "eager_us": round(eager, 1), "graph_us": round(graph, 1),
                                "torch_us": round(tpath, 1)})
        print(f"{n:>8} {eager:9.1f} {graph:9.1f} {tpath:9.1f} {full_us / eager:17.1f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
