"""The Slurm path against a live server: on a GPU host without network (after `scripts/gpu/live_h200.sh
install … && setup`), a one-node Slurm from Debian's packages unpacked off / (`.slurmdebs/*.deb`, fetched
with `apt-get download`), the host's real GPUs as its gres, and a sweep of real SGLang through it.

    python3 scripts/gpu/slurm_live.py --prefix /tmp/slurm-prefix [--sweep experiments/real-h200/slurm.yaml]

Writes to $OUT: the sweep's log, the comparison table, each record's status / slurm facts / timings, and
nvidia-smi before and after (every GPU's memory back to where it was).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.support.slurm import Cluster  # noqa: E402

ARCH_LIBS = "usr/lib/x86_64-linux-gnu"
TOOLS = {"usr/bin": ["sbatch", "squeue", "scancel", "scontrol", "sinfo", "sacct"],
         "usr/sbin": ["slurmctld-wlm", "slurmd-wlm", "munged"]}


def wrap(prefix: Path) -> Path:
    """Wrappers named like the tools (slurmd, not slurmd-wlm) that find the unpacked libraries; only the
    libraries this host lacks are added, so nothing of the host's own is shadowed."""
    have = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    extra = prefix / "extra-libs"
    extra.mkdir(exist_ok=True)
    libs = [p for d in (prefix / ARCH_LIBS, prefix / "lib/x86_64-linux-gnu") if d.is_dir() for p in d.iterdir()]
    for lib in libs:  # (Debian 12 still ships some libraries under /lib)
        if lib.name.startswith("lib") and ".so" in lib.name and f"{lib.name} " not in have:
            (extra / lib.name).unlink(missing_ok=True)
            (extra / lib.name).symlink_to(lib)
    ld = f"{prefix / ARCH_LIBS / 'slurm-wlm'}:{extra}"
    wbin = prefix / "wbin"
    wbin.mkdir(exist_ok=True)
    for folder, names in TOOLS.items():
        for name in names:
            short = name.removesuffix("-wlm")
            if short != name:  # Slurm knows which daemon it is by its own name: run it as `slurmd`, as Debian does
                link = prefix / folder / short
                link.unlink(missing_ok=True)
                link.symlink_to(name)
            w = wbin / short
            w.write_text(f'#!/bin/sh\nexport LD_LIBRARY_PATH="{ld}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n'
                         f'exec "{prefix / folder / short}" "$@"\n')
            w.chmod(0o755)
    stepd = prefix / "usr/sbin/slurmstepd"
    stepd.unlink(missing_ok=True)
    stepd.symlink_to("slurmstepd-wlm")
    return wbin


def smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.used", "--format=csv"],
                              capture_output=True, text=True).stdout
    except FileNotFoundError:
        return "no nvidia-smi\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=Path, required=True, help="where .slurmdebs/*.deb were unpacked (dpkg -x)")
    ap.add_argument("--root", type=Path, default=Path("/tmp/harness-real"), help="live_h200.sh setup's root")
    ap.add_argument("--sweep", type=Path, default=ROOT / "experiments/real-h200/slurm.yaml")
    ap.add_argument("--timeout", type=float, default=420)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", args.root / "out"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PATH"] = f"{wrap(args.prefix)}:{os.environ['PATH']}"
    devices = sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))
    cluster = Cluster(args.root / "slurm", gres_files=devices or None,
                      plugin_dir=str(args.prefix / ARCH_LIBS / "slurm-wlm"),
                      stepd=str(args.prefix / "usr/sbin/slurmstepd"),
                      # In a container: no systemd to ask for a cgroup scope; slurmd makes its own hierarchy.
                      cgroup_conf="CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n")
    (out / "nvidia-smi-before.txt").write_text(smi())
    try:
        cluster.start()
        os.environ.update(cluster.env)
        gpu0 = yaml.safe_load((args.root / "hosts.yaml").read_text())["hosts"]["gpu0"]
        env = {k: v for k, v in gpu0["env"].items() if k != "CUDA_VISIBLE_DEVICES"}  # Slurm's gres set it
        hosts = args.root / "slurm-hosts.yaml"
        hosts.write_text(yaml.safe_dump({"cluster": {"h200-slurm": {
            "kind": "slurm", "workdir": str(args.root / "shared"), "repo": gpu0["repo"], "python": gpu0["python"],
            "gpus_per_node": len(cluster.devices), "arch": "sm90", "env": env, "partition": "gpu", "max_jobs": 2}}}))
        results = args.root / "slurm-results"
        earlier = sorted(d.name for d in results.iterdir() if (d / "run.json").exists()) if results.is_dir() else []
        resume = ["--resume", earlier[-1]] if earlier else []  # a run cut short by the last call: finish it
        with open(out / "slurm-sweep.log", "w") as log:
            p = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(args.sweep), "--hosts", "h200-slurm",
                                  "--hosts-file", str(hosts), "--results-dir", str(results), *resume],
                                 stdout=log, stderr=subprocess.STDOUT)
            try:
                p.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:  # out of time: Ctrl-C, as a user would (scancel, stop, revert)
                p.send_signal(signal.SIGINT)
                p.wait(timeout=150)
        run_id = next(d.name for d in results.iterdir() if (d / "run.json").exists())
        table = subprocess.run([sys.executable, "-m", "harness", "compare", run_id, "--results-dir", str(results),
                                "--format", "markdown", "--metric", "median_itl_ms"], capture_output=True, text=True)
        (out / "slurm-table.md").write_text(table.stdout + table.stderr)
        recs = []
        for path in sorted(results.glob(f"{run_id}/*/*/record.json")):
            r = json.loads(path.read_text())
            recs.append({k: r.get(k) for k in ("experiment", "status", "error", "slurm", "timings", "revert",
                                                "gpu_dirty", "provenance")})
        (out / "slurm-records.json").write_text(json.dumps({"sweep_exit": p.returncode, "records": recs,
                                                            "squeue": cluster.run("squeue", "-h", "--states=all",
                                                                                  "-o", "%i|%j|%T|%N|%S|%e|%M")},
                                                           indent=1))
        return p.returncode
    finally:
        cluster.stop()
        (out / "nvidia-smi-after.txt").write_text(smi())


if __name__ == "__main__":
    sys.exit(main())
