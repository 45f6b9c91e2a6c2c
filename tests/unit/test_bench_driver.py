"""agent/bench_driver.py: the bench stage's clients run one after the other in one process of the target's
Python — each run is its command line as `__main__` with its own argv, its output (Python's and native) in its
log, its result line reported, the client's imports paid once; the first failing run ends the process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.agent import bench_driver

CLIENT = '''
import argparse, json, os, sys
import heavy_dependency  # imported once per process: it counts its imports in a file
ap = argparse.ArgumentParser()
ap.add_argument("--case"); ap.add_argument("--exit", type=int, default=0); ap.add_argument("--output-file")
args = ap.parse_args()
print("python output of", args.case)
os.write(2, ("native output of %s\\n" % args.case).encode())
if args.exit:
    sys.exit(args.exit)
with open(args.output_file, "a") as f:
    f.write(json.dumps({"case": args.case, "argv": sys.argv[1:]}) + "\\n")
'''


def _plan(tmp_path: Path, runs: list[tuple[str, int]]) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "fake_client.py").write_text(CLIENT)
    (src / "heavy_dependency.py").write_text(f"open({str(tmp_path / 'imports')!r}, 'a').write('x')\n")
    plan = {"status": str(tmp_path / "status.jsonl"), "runs": [
        {"module": "fake_client", "log": str(tmp_path / f"{case}.log"), "output": str(tmp_path / f"{case}.jsonl"),
         "args": ["--case", case, "--exit", str(code), "--output-file", str(tmp_path / f"{case}.jsonl")]}
        for case, code in runs]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return src


def _drive(tmp_path: Path, src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, bench_driver.__file__, str(tmp_path / "plan.json")], cwd=src,
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=60)


def _events(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "status.jsonl").read_text().splitlines()]


def test_every_run_in_one_process_with_its_own_argv_log_and_result(tmp_path):
    src = _plan(tmp_path, [("a", 0), ("b", 0), ("a", 0)])
    p = _drive(tmp_path, src)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "imports").read_text() == "x", "the client's dependencies were imported more than once"
    events = _events(tmp_path)
    assert [(e["event"], e["index"]) for e in events] == [
        ("start", 0), ("end", 0), ("start", 1), ("end", 1), ("start", 2), ("end", 2)]
    ends = [e for e in events if e["event"] == "end"]
    assert [e["rc"] for e in ends] == [0, 0, 0]
    assert [e["result"]["case"] for e in ends] == ["a", "b", "a"]
    assert ends[1]["result"]["argv"] == ["--case", "b", "--exit", "0", "--output-file", str(tmp_path / "b.jsonl")]
    log = (tmp_path / "a.log").read_text()
    assert log.count("python output of a") == 2 and log.count("native output of a") == 2
    assert "output of" not in p.stdout + p.stderr  # nothing leaks to the driver's own output


def test_the_first_failing_run_is_reported_and_ends_the_process(tmp_path):
    src = _plan(tmp_path, [("ok", 0), ("bad", 3), ("never", 0)])
    p = _drive(tmp_path, src)
    assert p.returncode == 1
    ends = [e for e in _events(tmp_path) if e["event"] == "end"]
    assert [(e["index"], e["rc"], e["result"]) for e in ends[1:]] == [(1, 3, None)]
    assert "native output of bad" in (tmp_path / "bad.log").read_text()
    assert not (tmp_path / "never.log").exists()


def test_a_client_that_raises_fails_its_run_with_the_traceback_in_its_log(tmp_path):
    src = _plan(tmp_path, [("boom", 0)])
    (src / "fake_client.py").write_text("raise RuntimeError('client broke')\n")
    assert _drive(tmp_path, src).returncode == 1
    assert _events(tmp_path)[-1]["rc"] == 1
    assert "RuntimeError: client broke" in (tmp_path / "boom.log").read_text()
