"""Time a newcomer's quick start: clone this repo's HEAD into an empty folder, make a venv, and run the
README's quick-start commands (`pip install -e . && harness demo`) from the clone. Target: install + demo
under 3 minutes.

The venv sees this Python's packages (`--system-site-packages`): the dependencies are what a warm pip cache
would give. By default pip builds as the README says (isolated: it fetches the build backend);
`--offline` builds with this Python's hatchling and editables instead (`--no-deps --no-build-isolation`).

Run:  python benchmarks/fresh_clone.py [--offline] [--keep] [--json benchmarks/results/fresh_clone.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.fresh_clone import FreshClone, missing_tools, readme_quickstart  # noqa: E402

TARGET_S = 180.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--offline", action="store_true", help="pip install --no-deps --no-build-isolation")
    ap.add_argument("--keep", action="store_true", help="keep the clone and venv (their folder is printed)")
    ap.add_argument("--json", type=Path, help="also write the timings here")
    args = ap.parse_args()
    reason = missing_tools()
    if reason:
        print(f"cannot replay a fresh clone here: {reason}", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="harness-fresh-clone-"))
    try:
        fresh = FreshClone(base, pip_args=["--no-deps", "--no-build-isolation"] if args.offline else [])
        prepare_s = fresh.prepare()
        reason = fresh.cannot_build()
        if reason:
            print(f"cannot build offline: {reason}", file=sys.stderr)
            return 2
        for command in readme_quickstart():
            step = fresh.run(command)
            print(f"{step.seconds:7.1f} s  {command}  (exit {step.proc.returncode})")
            if step.proc.returncode != 0:
                print(step.proc.stdout[-3000:] + step.proc.stderr[-3000:], file=sys.stderr)
                return 1
        total = sum(s.seconds for s in fresh.steps)
        ok = total < TARGET_S
        print(f"{prepare_s:7.1f} s  clone + venv (not counted)\n{total:7.1f} s  install + demo "
              f"(target < {TARGET_S:.0f} s: {'met' if ok else 'MISSED'})")
        if args.json:
            args.json.write_text(json.dumps({
                "target_s": TARGET_S, "pass": ok, "install_plus_demo_s": round(total, 1),
                "clone_venv_s": round(prepare_s, 1), "offline": args.offline,
                "steps": [{"command": s.command, "seconds": round(s.seconds, 1)} for s in fresh.steps],
                "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2) + "\n")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
