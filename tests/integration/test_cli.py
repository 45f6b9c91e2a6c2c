"""The CLI as users run it: exit codes, clear errors without tracebacks, and the controller dying."""

from __future__ import annotations

import html
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import PATCHES, marked_processes, tree_snapshot, write_experiment
from tests.support.htmlpage import Page, external
from tests.support.sshd import free_port, keygen

pytestmark = pytest.mark.integration

HARNESS = [sys.executable, "-m", "harness"]


def harness(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(HARNESS + list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout)


def hosts_file(tmp_path: Path, entry: dict, name: str = "box") -> Path:
    f = tmp_path / "hosts.yaml"
    f.write_text(yaml.safe_dump({"hosts": {name: entry}}))
    return f


def ssh_entry(sshd, sim_target, tmp_path, **overrides) -> dict:
    entry = sshd.host_entry(repo=str(sim_target.repo), python=str(sim_target.python), gpus=8,
                            workdir=str(tmp_path / "work"))
    entry.update(overrides)
    return entry


def wait_pid_exit(pid: int, timeout: float) -> bool:
    """Wait for any process (not only a child) to exit, as an event: pidfd becomes readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def test_config_error_exit_2_with_file_line_and_no_traceback(tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text("model: {path: /m}\nserver:\n  kv_cache_dtyp: fp8_e4m3\n")
    hosts_file(tmp_path, {"address": "local", "repo": str(tmp_path)})
    p = harness("run", str(f), cwd=tmp_path)
    assert p.returncode == 2
    assert f"{f}:3:" in p.stderr and "did you mean 'kv_cache_dtype'" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_missing_patch_file_and_unknown_host_exit_2(tmp_path):
    (tmp_path / "patches").mkdir()
    f = tmp_path / "e.yaml"
    f.write_text("model: {path: /m}\npatches: [nope]\n")
    hosts_file(tmp_path, {"address": "local", "repo": str(tmp_path)})
    p = harness("run", str(f), cwd=tmp_path)
    assert p.returncode == 2 and ":2:" in p.stderr and "'nope' not found" in p.stderr
    f.write_text("model: {path: /m}\n")
    p = harness("run", str(f), "--host", "bxo", cwd=tmp_path)
    assert p.returncode == 2 and "unknown host 'bxo'" in p.stderr and "did you mean 'box'" in p.stderr


def test_compare_refuses_a_run_file_or_record_of_another_schema_clearly(tmp_path):
    from harness.results.schemas import PlannedEntry, Record, RunInfo
    from harness.results.store import ResultsStore

    store = ResultsStore(tmp_path / "results")
    store.write_run(RunInfo(run_id="r1", sweep="s", sweep_file=str(tmp_path / "s.yaml"),
                            attempts=[PlannedEntry(key="k", experiment="e", round=1, order=0)]))
    rec = Record(run_id="r1", experiment="e", attempt="01", host="h", status="ok", key="k")
    store.write_record(store.new_attempt_dir("r1", "e"), rec)
    p = harness("compare", "r1", "--format", "json", "--results-dir", str(store.root), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert [r["status"] for r in json.loads(p.stdout)["rows"]] == ["ok"]

    run_file = store.root / "r1" / "run.json"
    run_file.write_text(run_file.read_text().replace('"schema": 1', '"schema": 2'))
    p = harness("compare", "r1", "--results-dir", str(store.root), cwd=tmp_path)
    assert p.returncode == 1 and f"{run_file}: run file schema 2; this harness reads schema 1" in p.stderr
    assert "hint:" in p.stderr and "Traceback" not in p.stderr
    run_file.unlink()

    record_file = store.root / "r1" / "e" / "01" / "record.json"
    record_file.chmod(0o644)
    record_file.write_text(record_file.read_text().replace('"status": "ok"', '"status": "fine"'))
    p = harness("compare", "r1", "--results-dir", str(store.root), cwd=tmp_path)
    assert p.returncode == 1 and f"{record_file}: not a valid record of schema 1: status" in p.stderr
    assert "Traceback" not in p.stderr and "pydantic" not in p.stderr


def test_compare_with_an_unknown_metric_or_baseline_exits_2_naming_the_known_ones(tmp_path):
    from harness.results.schemas import Record
    from harness.results.store import ResultsStore

    store = ResultsStore(tmp_path / "results")
    for exp in ("base", "fast"):
        rec = Record(run_id="r1", experiment=exp, attempt="01", host="h", status="ok",
                     metrics={"bs1": {"output_throughput": 100.0, "samples": {"output_throughput": [100.0] * 4}}})
        store.write_record(store.new_attempt_dir("r1", exp), rec)
    p = harness("compare", "r1", "--metric", "itl", "--results-dir", str(store.root), cwd=tmp_path)
    assert p.returncode == 2 and "unknown metric 'itl'" in p.stderr and "median_itl_ms" in p.stderr, p.stderr
    p = harness("compare", "r1", "--baseline", "bsae", "--results-dir", str(store.root), cwd=tmp_path)
    assert p.returncode == 2 and "'bsae'" in p.stderr and "experiments: base, fast" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    p = harness("compare", "r1", "--baseline", "fast", "--results-dir", str(store.root), cwd=tmp_path)
    assert p.returncode == 0 and "baseline: fast" in p.stdout, p.stderr


def test_unreachable_host_exit_3_and_record_says_infra_error(tmp_path, sim_target):
    f = write_experiment(tmp_path, "stock", free_port(), backend="flashinfer-mla")
    hosts_file(tmp_path, {"address": "127.0.0.1", "port": free_port(), "user": "root",
                          "repo": str(sim_target.repo), "connect_timeout": 3})
    p = harness("run", str(f), "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert p.returncode == 3
    assert "cannot connect" in p.stderr and "Traceback" not in p.stderr
    rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
    assert rec["status"] == "infra-error"


def test_port_that_accepts_and_stays_silent_is_one_sentence_without_paramikos_traceback(tmp_path):
    """Something that is no sshd listens on the port: it accepts and never writes. paramiko logs its own
    traceback from its transport thread; the terminal shows only the harness's sentence (exit 3)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept_and_say_nothing() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:  # the listener was closed: the test is over
                return

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    try:
        f = write_experiment(tmp_path, "stock", free_port())
        hosts_file(tmp_path, {"address": "127.0.0.1", "port": listener.getsockname()[1], "user": "root",
                              "repo": str(tmp_path), "connect_timeout": 1})
        p = harness("run", str(f), "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
    assert p.returncode == 3, p.stderr
    assert "no SSH banner" in p.stderr and "host 'box'" in p.stderr and "port" in p.stderr
    assert "Traceback" not in p.stderr and "Exception (client)" not in p.stderr, p.stderr


def test_python_that_is_a_folder_is_a_config_error_naming_the_inventory_line_and_key(tmp_path):
    f = write_experiment(tmp_path, "stock", free_port())
    inventory = hosts_file(tmp_path, {"address": "local", "repo": str(tmp_path), "python": str(tmp_path)})
    p = harness("run", str(f), "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert f"{inventory}:" in p.stderr and "`python:" in p.stderr and "host 'box'" in p.stderr and "folder" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert not (tmp_path / "results").exists(), "refused before anything ran"


@pytest.mark.parametrize("kind", ["read-only", "not-a-folder"])
def test_results_folder_that_cannot_be_written_is_refused_before_any_host_is_touched(tmp_path, kind):
    results = tmp_path / "results"
    if kind == "not-a-folder":
        (tmp_path / "afile").write_text("")
        results = tmp_path / "afile" / "results"
    elif os.geteuid() != 0:
        results.mkdir()
        results.chmod(0o555)
    else:  # root writes through mode bits: a read-only mount it is
        results.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(results)],
                          capture_output=True).returncode:
            pytest.skip("cannot mount a read-only tmpfs here (needs root and mount permission)")
    try:
        f = write_experiment(tmp_path, "stock", free_port())
        hosts_file(tmp_path, {"address": "local", "repo": str(tmp_path / "repo"), "python": sys.executable,
                              "workdir": str(tmp_path / "work")})
        p = harness("run", str(f), "--results-dir", str(results), cwd=tmp_path)
    finally:
        if kind == "read-only" and os.geteuid() == 0:
            subprocess.run(["umount", str(results)], capture_output=True)
    assert p.returncode == 2, p.stderr
    assert str(results) in p.stderr and "--results-dir" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert "connect" not in p.stdout and not (tmp_path / "work").exists(), "no host was touched"


def test_failed_authentication_exit_3(tmp_path, sshd, sim_target):
    stranger = keygen(tmp_path / "stranger", "not-authorized")
    before = tree_snapshot(sim_target.repo)
    f = write_experiment(tmp_path, "stock", free_port(), backend="flashinfer-mla")
    hosts_file(tmp_path, ssh_entry(sshd, sim_target, tmp_path, key=str(stranger)))
    p = harness("run", str(f), cwd=tmp_path)
    assert p.returncode == 3 and "authentication failed" in p.stderr and "Traceback" not in p.stderr
    assert tree_snapshot(sim_target.repo) == before


def test_unknown_host_key_refused_unless_host_opts_in(tmp_path, sshd, sim_target):
    empty_known = tmp_path / "known_hosts_empty"
    empty_known.write_text("")
    f = write_experiment(tmp_path, "stock", free_port(), backend="flashinfer-mla")
    hosts_file(tmp_path, ssh_entry(sshd, sim_target, tmp_path, known_hosts=str(empty_known)))
    p = harness("run", str(f), cwd=tmp_path)
    assert p.returncode == 3
    assert "unknown SSH host key" in p.stderr and "accept_new_host_key" in p.stderr
    assert empty_known.read_text() == ""

    hosts_file(tmp_path, ssh_entry(sshd, sim_target, tmp_path, known_hosts=str(empty_known),
                                   accept_new_host_key=True))
    f = write_experiment(tmp_path, "stock", free_port(), backend="flashinfer-mla")
    p = harness("run", str(f), "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"[127.0.0.1]:{sshd.port}" in empty_known.read_text()


def test_changed_host_key_refused_even_with_opt_in(tmp_path, sshd, sim_target):
    other = keygen(tmp_path / "other_host_key", "impostor").with_suffix(".pub").read_text().split()
    known = tmp_path / "known_hosts_wrong"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    f = write_experiment(tmp_path, "stock", free_port(), backend="flashinfer-mla")
    hosts_file(tmp_path, ssh_entry(sshd, sim_target, tmp_path, known_hosts=str(known), accept_new_host_key=True))
    p = harness("run", str(f), cwd=tmp_path)
    assert p.returncode == 3 and "CHANGED" in p.stderr and "ssh-keygen -R" in p.stderr


@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_controller_sigkill_mid_benchmark_server_gone_and_tree_reverted_within_5s(
        tmp_path, sshd, sim_target, transport):
    before = tree_snapshot(sim_target.repo)
    port = free_port()
    entry = (ssh_entry(sshd, sim_target, tmp_path) if transport == "ssh" else
             {"address": "local", "repo": str(sim_target.repo), "python": str(sim_target.python),
              "workdir": str(tmp_path / "work")})
    hosts_file(tmp_path, entry)
    # A patch that changes the tree but still serves with a BF16 KV cache: there is something to revert.
    f = write_experiment(tmp_path, "long-bench", port, backend="flashinfer-mla",
                         patches=["sim_fp8_kv_into_mla_plan"], server={"kv_cache_dtype": "auto"},
                         bench=[{"name": "long", "num_prompts": 400, "input_len": 32, "output_len": 64,
                                 "max_concurrency": 1}])
    proc = subprocess.Popen(HARNESS + ["run", str(f), "--results-dir", str(tmp_path / "results"),
                                       "--patches-dir", str(PATCHES)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:  # progress lines on a pipe are plain: wait for the bench stage
        seen.append(line)
        if line.rstrip().endswith(": bench"):
            break
    else:
        pytest.fail("never reached the bench stage:\n" + "".join(seen))
    journal = json.loads((sim_target.repo / ".git" / "harness" / "journal.json").read_text())
    assert tree_snapshot(sim_target.repo) != before  # the patch is applied right now
    server_pid, agent_pid = journal["server"]["pid"], journal["agent_pid"]
    t_kill = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_pid_exit(agent_pid, 5.0), "the agent did not finish its cleanup within 5 s"
    elapsed = time.monotonic() - t_kill
    assert elapsed < 5.0
    assert not Path(f"/proc/{server_pid}").exists() or "Z" in Path(f"/proc/{server_pid}/stat").read_text()
    assert marked_processes(journal["run_id"]) == []
    assert tree_snapshot(sim_target.repo) == before
    assert not (sim_target.repo / ".git" / "harness" / "journal.json").exists()


def test_ctrl_c_aborts_reverts_and_exits_130(tmp_path, sim_target):
    before = tree_snapshot(sim_target.repo)
    hosts_file(tmp_path, {"address": "local", "repo": str(sim_target.repo), "python": str(sim_target.python),
                          "workdir": str(tmp_path / "work")})
    f = write_experiment(tmp_path, "long-bench", free_port(), backend="flashinfer-mla",
                         bench=[{"name": "long", "num_prompts": 400, "input_len": 32, "output_len": 64,
                                 "max_concurrency": 1}])
    proc = subprocess.Popen(HARNESS + ["run", str(f), "--results-dir", str(tmp_path / "results")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if line.rstrip().endswith(": bench"):
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(30) == 130, rest
    rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
    assert rec["status"] == "aborted" and rec["revert"]["verified"]
    assert tree_snapshot(sim_target.repo) == before
    assert marked_processes(rec["run_id"]) == []


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_stops_reverts_and_keeps_the_cases_already_measured(tmp_path, sim_target, sig, code):
    """A CI timeout (SIGTERM) or a closed terminal (SIGHUP) is handled like Ctrl-C: nothing left running,
    the tree restored, and an `aborted` record that still holds the benchmark cases that finished."""
    before = tree_snapshot(sim_target.repo)
    hosts_file(tmp_path, {"address": "local", "repo": str(sim_target.repo), "python": str(sim_target.python),
                          "workdir": str(tmp_path / "work")})
    f = write_experiment(tmp_path, "two-cases", free_port(), backend="flashinfer-mla",
                         bench=[{"name": "short", "num_prompts": 2, "input_len": 16, "output_len": 8,
                                 "max_concurrency": 1},
                                {"name": "long", "num_prompts": 400, "input_len": 32, "output_len": 64,
                                 "max_concurrency": 1, "warmup": False}])  # its measured run is interrupted
    proc = subprocess.Popen(HARNESS + ["run", str(f), "--results-dir", str(tmp_path / "results")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if line.rstrip().endswith(": bench"):
            break
    # The agent starts the long case's client (and its log) only after it reported the short case's
    # result; the log is a file on the host, not an event the test could await.
    t0 = time.monotonic()
    while not any((tmp_path / "work").rglob("bench-long.log")):
        assert time.monotonic() - t0 < 60, "the long case never started"
        time.sleep(0.05)
    proc.send_signal(sig)
    rest = proc.stdout.read()
    assert proc.wait(30) == code, rest
    rec = json.loads(next((tmp_path / "results").rglob("record.json")).read_text())
    assert rec["status"] == "aborted" and rec["revert"]["verified"]
    assert rec["metrics"]["short"]["completed"] == 2, "a finished case was lost"
    assert tree_snapshot(sim_target.repo) == before
    assert marked_processes(rec["run_id"]) == []


def test_sim_init_prints_interpreter(tmp_path):
    p = harness("sim", "init", str(tmp_path / "t"), "--arch", "sm100", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    python = p.stdout.strip().splitlines()[-1]
    assert Path(python).exists() and python.endswith("/.venv/bin/python")
    out = subprocess.run([python, "-c", "import sglang; print(sglang.__version__)"], capture_output=True, text=True)
    assert out.stdout.strip() == "0.5.23"
    p = harness("sim", "init", str(tmp_path / "t"), cwd=tmp_path)  # exists already
    assert p.returncode == 2 and "Traceback" not in p.stderr


def demo_page(demo_run) -> Path:
    p = demo_run.proc
    assert p.returncode == 0, p.stdout + p.stderr
    (page,) = (demo_run.folder / "results").glob("*/report/index.html")
    assert f"report: {page}" in p.stdout  # the demo ends by saying where its page is
    return page


# One `harness demo` for the tests of its records, its table and its page (`demo_run`,
# tests/integration/conftest.py): the README quick start's own, when the checkout has no uncommitted change.
@pytest.mark.xdist_group("demo")
def test_demo_sweeps_two_simulated_archs_and_prints_the_comparison(demo_run):
    p = demo_run.proc
    assert p.returncode == 0, p.stdout + p.stderr
    records = demo_records(demo_run.folder)
    by_exp = {}
    for r in records:
        by_exp.setdefault(r["experiment"], []).append(r)
    assert {r["status"] for r in by_exp["sim-fp8-kv-into-mla-plan"]} == {"crashed"}
    assert {r["status"] for r in by_exp["sim-hang-nccl-init"]} == {"hung"}
    assert {r["host"] for r in by_exp["sim-trtllm_mla"]} == {"sim-b200"}  # Blackwell-only: ran on the B200
    assert all(r["status"] == "ok" for r in by_exp["sim-trtllm_mla"])
    assert {r["status"] for r in by_exp["sim-cutlass_mla"]} == {"preflight-failed"}  # not in SGLang 0.5.23
    assert {r["host"] for r in by_exp["sim-flashinfer-mla"]} == {"sim-h200", "sim-b200"}  # baseline per arch
    for r in records:  # every attempt that reached the patch stage was reverted, and the revert verified
        if "patch_s" in r["timings"]:
            assert r["revert"] and r["revert"]["verified"], (r["experiment"], r["revert"])
            assert r["revert"]["tree_before"] == r["revert"]["tree_after"]
        else:  # refused in preflight: nothing was applied, so there was nothing to revert
            assert (r["status"], r["revert"]) == ("preflight-failed", None), r["experiment"]
    # The seed's patch on the simulated FlashInfer 0.7.2: run() wants the FP8 scales (SM90), or plan() refuses
    # FP8 off SM90; the table shows the key line (wrapped in its cell).
    for r in by_exp["sim-fp8-kv-into-mla-plan"]:
        assert r["verdict"]["key_line"] in (
            "ValueError: Exactly one of ckv_scale or ckv_scale_arr is required when kv_data_type is FP8.",
            "ValueError: FP8 kv_data_type for MLA requires an SM90 (Hopper) device, got SM100.")
    assert "ckv_scale_arr" in p.stdout or "SM90 (Hopper)" in p.stdout
    assert "vs base" in p.stdout and "▲" in p.stdout  # the comparison table, with significant ratios
    assert "top op" in p.stdout and "aten::copy_" in p.stdout  # every attempt profiled: the copy shows up
    stock = [r for r in by_exp["sim-flashinfer-mla"] if r["profile"]]
    assert stock and all(r["profile"]["top"][0]["name"] == "aten::copy_" for r in stock)


@pytest.mark.xdist_group("demo")
def test_demo_writes_a_self_contained_page(demo_run):
    page = demo_page(demo_run)
    text = page.read_text()
    html = Page(text)
    exps = {r[0] for r in html.rows}
    for exp in ("sim-flashinfer-mla", "sim-trtllm_mla", "sim-fp8-kv-into-mla-plan", "sim-hang-nccl-init",
                "sim-cutlass_mla"):
        assert any(exp in e for e in exps), (exp, exps)
    cases = {c for r in demo_records(demo_run.folder) for c in r["metrics"]}
    assert cases and html.charts.count("plot") == len(cases)  # one plot per bench case
    # decode-bs1 and conc8 differ only in max_concurrency (1, 8): median ITL and TTFT against throughput
    assert html.charts.count("pareto") == 2 and "matplotlib" not in text
    crash = [f for f in html.failures if "sim-fp8-kv-into-mla-plan" in f]
    assert crash and all("ckv_scale_arr" in f or "SM90 (Hopper)" in f for f in crash)
    assert any("refused before launch" in f and "sim-cutlass_mla" in f for f in html.failures)
    assert "prefers-color-scheme: dark" in html.css and external(html.urls) == []
    logs = [u for u in html.urls if u.startswith("logs/")]
    assert logs and all((page.parent / u).is_file() for u in logs)  # every excerpt beside the page
    assert sum(f.stat().st_size for f in page.parent.rglob("*") if f.is_file()) < 2_000_000


def demo_records(tmp_path: Path) -> list[dict]:
    return [json.loads(r.read_text()) for r in (tmp_path / "results").rglob("record.json")]


# Appended to a copy of the page: what Chromium laid out for each chart, as JSON in a <pre> of the dumped DOM.
PROBE = """<script>
const drawn = [...document.querySelectorAll("svg")].map(s => {
  const box = s.getBoundingClientRect(), style = getComputedStyle(s), fig = s.closest("figure");
  const legend = {};
  s.querySelectorAll(".legend-entry text").forEach(t => { legend[t.textContent] = t.getBBox().width; });
  return {figure: fig ? fig.className : "", width: box.width, height: box.height, legend: legend,
          visible: style.display !== "none" && style.visibility !== "hidden"};
});
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify(drawn);
document.body.appendChild(pre);
</script>"""


def charts_as_drawn(browser: list[str], page: Path, tmp_path: Path) -> list[dict]:
    """Each <svg> of the page as headless Chromium lays it out: its figure's class, size, visibility and
    legend texts with their drawn widths (PROBE, run in a copy of the page: it loads nothing from beside it)."""
    probe = tmp_path / "probe.html"  # a copy: the report folder holds only the harness's own files
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = subprocess.run(browser + ["--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert dom.returncode == 0 and found, dom.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


ARTIFACTS = Path(os.environ.get("HARNESS_TEST_ARTIFACTS") or Path(tempfile.gettempdir()) / "harness-test-artifacts")


@pytest.mark.xdist_group("demo")
@pytest.mark.skipif(chromium() is None, reason="no chromium on PATH: scripts/test installs it (apt-get install chromium)")
def test_demo_page_in_a_real_browser(demo_run, tmp_path, capsys):
    """The demo's page as Chromium renders it, opened from disk: the DOM a reader sees has the table's rows,
    a plot per case, the latency–throughput charts, each drawn at a real size with its legend, and the crash
    with its key line; screenshots in light and dark mode are kept."""
    page = demo_page(demo_run)
    browser = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1366,2400"]
    dom = subprocess.run(browser + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    seen = Page(dom.stdout)
    assert any("sim-flashinfer-mla" in r[0] for r in seen.rows) and any("▲" in "".join(r) for r in seen.rows)
    cases = {c for r in demo_records(demo_run.folder) for c in r["metrics"]}
    assert seen.charts.count("plot") == len(cases) >= 1 and seen.charts.count("pareto") == 2
    drawn = charts_as_drawn(browser, page, tmp_path)
    assert [c["figure"] for c in drawn] == seen.charts
    for c in drawn:  # laid out at a readable size, not hidden, its legend's words drawn with a width
        assert c["visible"] and c["width"] > 400 and c["height"] > 150, c
        assert c["legend"] and all(w > 0 for w in c["legend"].values()), c
    ran = {r["experiment"] for r in demo_records(demo_run.folder) if r["status"] == "ok"}
    for c in drawn:
        if c["figure"] == "pareto":  # a line per experiment that ran, named in the legend
            assert all(any(label.startswith(e) for label in c["legend"]) for e in ran), (ran, c["legend"])
    assert any("sim-fp8-kv-into-mla-plan" in f and ("ckv_scale_arr" in f or "SM90 (Hopper)" in f)
               for f in seen.failures)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots = {}
    for mode, flags in (("light", []), ("dark", ["--force-dark-mode"])):
        shot = ARTIFACTS / f"demo-report-{mode}.png"
        shot.unlink(missing_ok=True)
        p = subprocess.run(browser + flags + [f"--screenshot={shot}", page.as_uri()], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and shot.is_file() and shot.stat().st_size > 20_000, p.stderr[-2000:]
        shots[mode] = shot
    with capsys.disabled():
        print(f"\nscreenshots of the demo's page: {', '.join(map(str, shots.values()))}")
    try:
        from PIL import Image
    except ImportError:
        return
    corner = {m: sum(Image.open(s).convert("RGB").getpixel((4, 4))) for m, s in shots.items()}
    assert corner["light"] > 600 and corner["dark"] < 150, corner  # prefers-color-scheme is honoured
