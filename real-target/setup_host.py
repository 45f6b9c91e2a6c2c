"""Prepare a GPU host (with the wheelhouse installed) for the harness's live-server runs and GPU tests.

    python real-target/setup_host.py --site /tmp/site --sglang-wheel WHEEL [--root /tmp/harness-real]

Makes, under ROOT: the MLA models (configs and tokenizer; `tiny-mla/`, and the real-size shapes `v2-lite/`,
`v3-16h/`, `v3-128h/` — the paths experiments/real-h200/ name; see make_tiny_mla_model.py), one
SGLang target repo per GPU (`sglang-gpu<i>/`, laid out from the wheel: the harness patches and reverts
them), `hosts.yaml` with one local host per GPU (`gpu<i>`, CUDA_VISIBLE_DEVICES=i) plus, with two or more
GPUs, `gpu01` (GPUs 0 and 1, for TP 2), and `target.json` for the GPU tests (HARNESS_REAL_TARGET).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

KIT = Path(__file__).resolve().parent
# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast on a shared box: a program that does can take
# the host's GPUs out of service (kept also in the servers' own environment).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def gpu_count() -> int:
    p = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                       text=True, check=True)
    return len(p.stdout.split())


def host_entry(repo: Path, site: Path, python: str, root: Path, gpus: str) -> dict:
    path = os.pathsep.join([str(site / "bin"), os.environ.get("PATH", "/usr/bin:/bin")])
    return {"address": "local", "repo": str(repo), "python": python, "gpus": len(gpus.split(",")),
            "arch": "sm90", "workdir": str(root / "work"),
            "env": {"PYTHONPATH": f"{repo / 'python'}{os.pathsep}{site}", "CUDA_VISIBLE_DEVICES": gpus,
                    "PATH": path, **NO_MULTICAST, **OFFLINE}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", type=Path, required=True, help="where the wheelhouse was installed (--target)")
    ap.add_argument("--sglang-wheel", type=Path, required=True)
    ap.add_argument("--root", type=Path, default=Path("/tmp/harness-real"))
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the servers")
    ap.add_argument("--gpus", type=int, default=None, help="default: what nvidia-smi shows")
    args = ap.parse_args()
    root: Path = args.root
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(args.site))
    model = root / "tiny-mla"
    for folder, shape in ((model, "tiny"), (root / "v2-lite", "v2-lite"), (root / "v3-16h", "v3-16h"),
                          (root / "v3-128h", "v3-128h")):
        if not (folder / "config.json").exists():
            subprocess.run([args.python, str(KIT / "make_tiny_mla_model.py"), str(folder), "--shape", shape],
                           check=True, env=env)
    n = args.gpus if args.gpus is not None else gpu_count()
    hosts = {}
    for i in range(n):
        repo = root / f"sglang-gpu{i}"
        if not (repo / ".git").exists():
            subprocess.run([sys.executable, str(KIT / "make_target_repo.py"), str(args.sglang_wheel), str(repo)],
                           check=True)
        hosts[f"gpu{i}"] = host_entry(repo, args.site, args.python, root, str(i))
    if n >= 2:
        hosts["gpu01"] = host_entry(root / "sglang-gpu0", args.site, args.python, root, "0,1")
        hosts["gpu01"]["gpus"] = 2
    (root / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}, sort_keys=False))
    target = {"hosts_file": str(root / "hosts.yaml"), "sweep_hosts": [f"gpu{i}" for i in range(n)],
              "run_host": "gpu0", "tp2_host": "gpu01" if n >= 2 else None, "results_dir": str(root / "results"),
              "model": str(model)}
    (root / "target.json").write_text(json.dumps(target, indent=1))
    shutil.rmtree(root / "work", ignore_errors=True)
    print(json.dumps(target, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
