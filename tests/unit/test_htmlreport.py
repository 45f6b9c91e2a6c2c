"""The HTML report (harness/render/page.py): its context (pure), the page it writes (parsed with the stdlib's
html.parser), without matplotlib, for two runs, and its size for a 50-attempt run."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis import compare
from harness.errors import ConfigError
from harness.render import outdir, page, tableformats
from harness.results.schemas import Record, RunInfo
from harness.results.store import ResultsStore
from tests.conftest import tree_snapshot
from tests.support.htmlpage import Page, external

GPU = [{"name": "NVIDIA H200", "compute_cap": "9.0"}] * 8
KEY = "ValueError: Exactly one of ckv_scale or ckv_scale_arr is required when kv_data_type is FP8."
HINT = "pass the FP8 scales to run(), or keep the KV cache in BF16"
SECRET = "hf_s3cretvalue42"
PATCH_SHA = "ab" * 32


def record(run, exp, attempt, samples=None, status="ok", version="0.5.23", **extra) -> Record:
    metrics = {case: {"output_throughput": sorted(s)[len(s) // 2], "samples": {"output_throughput": s}}
               for case, s in (samples or {}).items()}
    profile = None
    if status == "ok":
        profile = {"total_gpu_us": 1000.0, "steps": 4, "kernels": 2, "top": [
            {"name": "aten::copy_", "gpu_us": 600.0, "share": 0.6, "calls": 12,
             "kernels": [{"name": "elementwise_kernel", "gpu_us": 590.0}]},
            {"name": "flashinfer::mla_decode", "gpu_us": 300.0, "share": 0.3, "calls": 48}]}
    return Record(run_id=run, experiment=exp, attempt=attempt, host="sim-h200", backend=extra.pop("backend", exp),
                  status=status, metrics=metrics, profile=profile,
                  provenance={"gpu": GPU, "server_version": version, "flashinfer_version": "0.7.2",
                              "base_commit": "c" * 40, "patch_sets": {"fp8-kv": PATCH_SHA}, "harness_version": "0.1.0",
                              "arch": "sm90", "hostname": "box-1"}, **extra)


def write_run(store: ResultsStore, run: str, *, fast: float = 1.5, version: str = "0.5.23", extra_ok: int = 0) -> None:
    store.write_run(RunInfo(run_id=run, sweep="nightly", sweep_file="/x/nightly.yaml", baseline="base"))
    recs = []
    for i in range(2):
        recs.append(record(run, "base", f"0{i + 1}", {"bs1": [100, 101, 99], "bs8": [400, 404, 396]},
                           version=version))
        recs.append(record(run, "fast", f"0{i + 1}", {"bs1": [100 * fast, 101 * fast, 99 * fast],
                                                       "bs8": [400 * fast, 402 * fast, 398 * fast]}, version=version))
    for i in range(extra_ok):
        recs.append(record(run, f"more-{i:02d}", "01", {"bs1": [90 + i, 91 + i, 92 + i, 93 + i],
                                                         "bs8": [380 + i, 381 + i, 379 + i, 382 + i]}, version=version))
    recs.append(record(run, "crashy", "01", status="crashed", version=version, expect="crash", expectation_met=True,
                       verdict={"verdict": "crash", "category": "kernel-error", "key_line": KEY,
                                "phase": "cuda-graph-capture", "hint": HINT}))
    recs.append(record(run, "hangs", "01", status="hung", version=version,
                       verdict={"category": "hung", "key_line": "Init torch distributed begin.",
                                "phase": "distributed-init", "hint": "a collective waits for a peer"}))
    recs.append(record(run, "refused", "01", status="preflight-failed", version=version,
                       error="backend cutlass_mla needs SGLang >= 0.5.24 (found 0.5.23)\nmore detail"))
    for rec in recs:
        d = store.new_attempt_dir(run, rec.experiment, rec.attempt)
        store.write_record(d, rec)
        if rec.status.value in ("crashed", "hung"):
            lines = [f"[2026-11-30 01:00:{i % 60:02d}] line {i} of the server log" for i in range(500)]
            (d / "server.log").write_text("\n".join(lines + [f"HF_TOKEN={SECRET}", KEY]) + "\n")


@pytest.fixture
def store(tmp_path) -> ResultsStore:
    s = ResultsStore(tmp_path / "results")
    write_run(s, "run-a")
    return s


def load(store: ResultsStore, *runs: str, metric: str = "output_throughput"):
    records = [r for run in runs for r in store.final_records(run)]
    rows = compare.build_rows(records, metric=metric, baseline="base")
    return records, rows


def test_table_context_has_every_row_with_its_gpu_ratio_and_verdict(store):
    records, rows = load(store, "run-a")
    t = page.table_context(rows, "output_throughput")
    assert t["headers"][:4] == ["experiment", "backend", "GPU", "status"]
    assert "bs1 median ± CV, tok/s" in t["headers"] and "bs8 vs base" in t["headers"]
    by = {r["label"]: r for r in t["rows"]}
    assert set(by) == {"base", "fast", "crashy", "hangs", "refused"}
    assert by["base"]["baseline"] and t["baseline"] == ["base"]
    assert all(r["cells"][2]["text"] == "NVIDIA H200 x8" for r in t["rows"])
    fast = by["fast"]["cells"]
    ratio = fast[t["headers"].index("bs1 vs base")]
    assert ratio["text"].startswith("1.50x ▲ [") and "v-better" in ratio["cls"] and ratio["p"].startswith("p=")
    cell = next(r for r in rows if r.label == "fast").cells["bs1"]  # the interval the page shows is the row's
    assert cell.low is not None and cell.high is not None and cell.low <= cell.ratio <= cell.high
    assert ratio["text"].endswith(f"[{cell.low:.2f}–{cell.high:.2f}]")
    assert by["crashy"]["status"] == "expected" and by["hangs"]["status"] == "fail"
    assert KEY in by["crashy"]["cells"][-1]["text"]  # the key line in the notes


def test_failures_context_keeps_verdict_key_line_phase_hint_and_log(store):
    records, _ = load(store, "run-a")
    logs = {("run-a", "crashy", "01"): "logs/run-a/crashy-01.log.txt"}
    fails = {f["experiment"]: f for f in page.failures(records, logs)}
    assert set(fails) == {"crashy", "hangs", "refused"}
    c = fails["crashy"]
    assert (c["category"], c["key_line"], c["phase"], c["hint"]) == ("kernel-error", KEY, "cuda-graph-capture", HINT)
    assert c["expected"] and c["log"] == "logs/run-a/crashy-01.log.txt"
    r = fails["refused"]
    assert r["what"] == "refused before launch" and r["key_line"].startswith("backend cutlass_mla needs")
    assert r["log"] is None and r["error"] is None  # the error's first line is its key line already
    assert [f["experiment"] for f in page.failures(records, logs)][-1] == "crashy"  # expected ones last


def test_top_ops_and_provenance(store):
    records, _ = load(store, "run-a")
    tops = page.top_ops(records)
    assert [(t["backend"], t["op"], t["share"], t["kernel"]) for t in tops] == [
        ("base", "aten::copy_", "60%", "elementwise_kernel"), ("fast", "aten::copy_", "60%", "elementwise_kernel")]
    prov = page.provenance(records, {"run-a": store.find_run("run-a")})
    (host,) = prov["hosts"]
    assert (host["host"], host["gpu"], host["sglang"], host["flashinfer"], host["commit"]) == (
        "sim-h200", "NVIDIA H200 x8", "0.5.23", "0.7.2", "c" * 40)
    assert prov["patches"] == [{"run": "run-a", "name": "fp8-kv", "sha256": PATCH_SHA}]
    assert prov["runs"][0]["sweep"] == "nightly"


def write(store: ResultsStore, out: Path, *runs: str) -> tuple[Path, Page, str]:
    records, rows = load(store, *runs)
    index = page.write_html(out, records, rows, "output_throughput", stores={r: store for r in runs},
                                 runs={r: store.find_run(r) for r in runs})
    text = index.read_text()
    return index, Page(text), text


def test_page_shows_table_plots_failures_provenance_and_dark_mode(store, tmp_path):
    index, p, text = write(store, tmp_path / "page", "run-a")
    assert index == tmp_path / "page" / "index.html"
    assert {r[0] for r in p.rows} == {"base", "fast", "crashy", "hangs", "refused"}
    fast = next(r for r in p.rows if r[0] == "fast")
    assert any(re.match(r"1\.50x ▲ \[\d\.\d\d–\d\.\d\d\]p=", c) for c in fast) and "NVIDIA H200 x8" in fast  # p under it
    assert p.svgs == 2 and p.charts == ["plot", "plot"]  # one plot per bench case: bs1, bs8
    assert text.count('class="plot"') == 2 and 'data-case="bs1"' in text and 'data-case="bs8"' in text
    assert len(set(re.findall(r'\bid="([^"]+)"', text))) == len(re.findall(r'\bid="([^"]+)"', text))  # ids unique
    crash = next(f for f in p.failures if "crashy" in f)
    assert KEY in crash and HINT in crash and "cuda-graph-capture" in crash and "as expected" in crash
    assert any("refused before launch" in f and "cutlass_mla" in f for f in p.failures)
    assert len(p.failures) == 3
    body = " ".join(p.text)
    for fact in ("0.5.23", "0.7.2", "c" * 40, PATCH_SHA, "box-1", "aten::copy_", "each dot on it is one repeat"):
        assert fact in body, fact
    assert "prefers-color-scheme: dark" in p.css and "color-scheme" in text
    assert external(p.urls) == [] and "@import" not in p.css and "url(http" not in text
    # the log excerpts: beside the page, linked relatively, the last lines only, secrets masked
    logs = [u for u in p.urls if u.startswith("logs/")]
    assert sorted(logs) == ["logs/run-a/crashy-01.log.txt", "logs/run-a/hangs-01.log.txt"]
    excerpt = (index.parent / logs[0]).read_text()
    assert KEY in excerpt and "line 499 of" in excerpt and "line 200 of" not in excerpt


def test_log_excerpt_masks_secret_values_of_the_environment(store, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    index, p, _ = write(store, tmp_path / "page", "run-a")
    excerpt = (index.parent / "logs/run-a/crashy-01.log.txt").read_text()
    assert SECRET not in excerpt and "HF_TOKEN=<redacted>" in excerpt


def test_log_excerpt_leaves_short_values_of_secret_named_variables_alone(store, tmp_path, monkeypatch):
    # A stray `SOME_KEY=server` in the shell that writes the page is no secret: the excerpt keeps its words.
    monkeypatch.setenv("SOME_KEY", "server")
    index, _, _ = write(store, tmp_path / "page", "run-a")
    assert "line 499 of the server log" in (index.parent / "logs/run-a/crashy-01.log.txt").read_text()


def test_without_matplotlib_the_page_has_its_charts(tmp_path, monkeypatch):
    """A default install (no `plot` extra): a chart per bench case and, for the cases that differ only in
    max_concurrency (read from the bench JSONL beside the records), latency against throughput — drawn
    without matplotlib (svgcharts.py), with no note asking to install it."""
    for name in [n for n in sys.modules if n.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # its submodules an earlier test imported too
    with pytest.raises(ImportError):
        import matplotlib  # noqa: F401
    store = ResultsStore(tmp_path / "results")
    store.write_run(RunInfo(run_id="run-a", sweep="nightly", sweep_file="/x/nightly.yaml", baseline="base"))
    for exp, speed in (("base", 1.0), ("fast", 1.5)):
        for attempt in ("01", "02"):
            rec = record("run-a", exp, attempt)
            rec.metrics = {case: {"samples": {"output_throughput": [speed * 50 * level + i for i in range(3)],
                                              "median_itl_ms": [(10 + level) / speed + i for i in range(3)],
                                              "median_ttft_ms": [(90 + level) / speed + i for i in range(3)]}}
                           for case, level in (("bs1", 1), ("bs8", 8))}
            d = store.new_attempt_dir("run-a", exp, attempt)
            store.write_record(d, rec)
            for case, level in (("bs1", 1), ("bs8", 8)):
                (d / f"bench-{case}.jsonl").write_text(json.dumps({
                    "dataset_name": "random-ids", "random_input_len": 128, "random_output_len": 24,
                    "request_rate": float("inf"), "max_concurrency": level, "output_throughput": 1.0}) + "\n")
    _, p, text = write(store, tmp_path / "page", "run-a")
    assert p.charts == ["plot", "plot", "pareto", "pareto"]  # bs1, bs8; median ITL and TTFT across 1 and 8
    assert "matplotlib" not in text and "harness[plot]" not in text
    body = " ".join(p.text)
    for words in ("output throughput (tok/s)", "median inter-token latency, ITL (ms)", "base (baseline)",
                  "median time to first token, TTFT (ms)", "random-ids, 128 in / 24 out tokens", "Pareto front"):
        assert words in body, words
    assert {r[0] for r in p.rows} == {"base", "fast"}


def test_without_a_family_of_cases_the_page_says_why_there_is_no_latency_chart(store, tmp_path):
    _, p, text = write(store, tmp_path / "page", "run-a")  # no bench JSONL beside these records
    assert p.charts == ["plot", "plot"] and page.NO_PARETO in text


def test_two_runs_show_what_changed(store, tmp_path):
    write_run(store, "run-b", fast=2.0, version="0.5.24")
    records, rows = load(store, "run-a", "run-b")
    diff = page.changes(records, rows, "output_throughput", "run-a", "run-b")
    assert {"what": "SGLang", "a": "0.5.23", "b": "0.5.24"} in diff["setup"]
    fast = next(m for m in diff["results"] if m["experiment"] == "fast @ NVIDIA H200 x8" and m["case"] == "bs1")
    assert re.fullmatch(r"1\.33x ▲ \[\d\.\d\d–\d\.\d\d\]", fast["change"]) and fast["cls"] == "v-better"
    same = next(m for m in diff["results"] if m["experiment"].startswith("base") and m["case"] == "bs1")
    assert re.fullmatch(r"1\.00x ≈ \[\d\.\d\d–\d\.\d\d\]", same["change"])
    _, p, text = write(store, tmp_path / "page", "run-a", "run-b")
    assert 'id="changes"' in text and "What changed from run-a to run-b" in " ".join(p.text)


def test_a_50_attempt_page_stays_under_2_mb(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_run(store, "big", extra_ok=43)
    assert len(store.final_records("big")) == 50
    index, p, _ = write(store, tmp_path / "page", "big")
    assert p.svgs == 2 and len(p.rows) == 48
    total = sum(f.stat().st_size for f in index.parent.rglob("*") if f.is_file())
    assert index.stat().st_size < 2_000_000 and total < 2_000_000, (index.stat().st_size, total)


def test_report_command_writes_the_page(store, tmp_path):
    out = tmp_path / "html"
    p = subprocess.run([sys.executable, "-m", "harness", "report", "run-a", "--html", str(out), "--results-dir",
                        str(store.root)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"report: {out / 'index.html'}" in p.stdout
    assert (out / "index.html").is_file() and (out / "logs" / "run-a" / "crashy-01.log.txt").is_file()
    p = subprocess.run([sys.executable, "-m", "harness", "report", "nope", "--html", str(out), "--results-dir",
                        str(store.root)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "no run 'nope'" in p.stderr and "Traceback" not in p.stderr


def test_writing_again_replaces_the_page_and_a_foreign_folder_is_refused(store, tmp_path):
    out = tmp_path / "page"
    write(store, out, "run-a")
    (out / "index.html").write_bytes(b"")  # stands in for an older page of ours: it must come back whole
    manifest = out / outdir.MANIFEST
    listed = json.loads(manifest.read_text())
    listed["files"]["index.html"] = hashlib.sha256(b"").hexdigest()
    manifest.write_text(json.dumps(listed))
    write(store, out, "run-a")  # an earlier page's folder: its files replaced
    assert "</html>" in (out / "index.html").read_text()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="notes.txt: a file the harness did not write"):
        write(store, mine, "run-a")
    assert (mine / "notes.txt").read_text() == "keep me" and not (mine / "index.html").exists()
    (mine / "notes.txt").unlink()
    (mine / "index.html").write_text("<html>my own page</html>")
    with pytest.raises(ConfigError, match="index.html: a file the harness did not write"):
        write(store, mine, "run-a")
    assert (mine / "index.html").read_text() == "<html>my own page</html>"


def test_a_users_file_in_an_earlier_pages_folder_survives_and_is_named(store, tmp_path):
    out = tmp_path / "page"
    write(store, out, "run-a")
    (out / "logs" / "run-a" / "my-notes.txt").write_text("keep me")
    (out / ".DS_Store").write_bytes(b"finder")  # hidden files are files too
    with pytest.raises(ConfigError) as e:
        write(store, out, "run-a")
    assert f"{out / '.DS_Store'}: a file the harness did not write" in str(e.value)  # the first, by name
    assert "choose another folder for --html" in str(e.value)
    (out / ".DS_Store").unlink()
    before = tree_snapshot(out)
    with pytest.raises(ConfigError, match=r"my-notes\.txt: a file the harness did not write"):
        write(store, out, "run-a")
    assert tree_snapshot(out) == before  # nothing changed: not the page, not the excerpts, not the manifest
    (out / "logs" / "run-a" / "my-notes.txt").unlink()
    (out / "logs" / "run-a" / "crashy-01.log.txt").write_text("my annotated excerpt")
    (out / "logs" / "zz-mine").mkdir()
    before = tree_snapshot(out)
    with pytest.raises(ConfigError, match=r"crashy-01\.log\.txt: written by the harness but changed since"):
        write(store, out, "run-a")
    assert tree_snapshot(out) == before
    (out / "logs" / "run-a" / "crashy-01.log.txt").unlink()
    with pytest.raises(ConfigError, match=r"logs/zz-mine: a folder the harness did not make"):
        write(store, out, "run-a")


def test_rewriting_replaces_only_its_own_files_and_drops_its_stale_ones(store, tmp_path):
    write_run(store, "run-b")
    out = tmp_path / "page"
    write(store, out, "run-a")
    listed = json.loads((out / outdir.MANIFEST).read_text())
    assert sorted(listed["files"]) == ["index.html", "logs/run-a/crashy-01.log.txt", "logs/run-a/hangs-01.log.txt"]
    assert listed["files"]["index.html"] == hashlib.sha256((out / "index.html").read_bytes()).hexdigest()
    write(store, out, "run-b")  # the same folder for another run: run-a's excerpts were ours, so they go
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        outdir.MANIFEST, "index.html", "logs", "logs/run-b", "logs/run-b/crashy-01.log.txt",
        "logs/run-b/hangs-01.log.txt"]
    assert "run-b" in (out / "index.html").read_text()


def test_a_link_inside_the_folder_is_refused_and_its_target_untouched(store, tmp_path):
    out, elsewhere = tmp_path / "page", tmp_path / "elsewhere"
    write(store, out, "run-a")
    elsewhere.mkdir()
    (elsewhere / "crashy-01.log.txt").write_text("not the harness's")
    (elsewhere / "index.html").write_text("<html>someone's page</html>")
    shutil.rmtree(out / "logs")
    (out / "logs").symlink_to(elsewhere)  # the excerpts' folder is a link (the old code died in rmtree)
    outside, inside = tree_snapshot(elsewhere), tree_snapshot(out)
    with pytest.raises(ConfigError, match=r"page/logs: a symbolic link \(to .*elsewhere\) where the report writes"):
        write(store, out, "run-a")
    assert tree_snapshot(elsewhere) == outside and tree_snapshot(out) == inside and (out / "logs").is_symlink()
    (out / "logs").unlink()
    (out / "logs").mkdir()
    (out / "logs" / "run-a").symlink_to(elsewhere)  # a subfolder deeper down that is a link
    inside = tree_snapshot(out)
    with pytest.raises(ConfigError, match=r"logs/run-a: a symbolic link \(to .*elsewhere\) where the report writes"):
        write(store, out, "run-a")
    assert tree_snapshot(elsewhere) == outside and tree_snapshot(out) == inside
    (out / "logs" / "run-a").unlink()
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(elsewhere / "index.html")  # a file that is a link
    with pytest.raises(ConfigError, match=r"index\.html: a symbolic link"):
        write(store, out, "run-a")
    assert tree_snapshot(elsewhere) == outside


def test_the_folder_may_be_a_link_to_a_folder(store, tmp_path):
    gone = tmp_path / "gone"
    gone.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"gone is a symbolic link to .*nowhere, which does not exist"):
        write(store, gone, "run-a")
    assert not (tmp_path / "nowhere").exists()
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    index, p, _ = write(store, link, "run-a")
    assert index == link / "index.html" and (real / "index.html").is_file()
    assert (real / "logs" / "run-a" / "crashy-01.log.txt").is_file() and (real / outdir.MANIFEST).is_file()
    write(store, link, "run-a")  # written again through the link: its own files, replaced
    assert link.is_symlink() and len(p.rows) == 5


def test_a_write_cut_short_leaves_a_folder_the_next_write_accepts(store, tmp_path, monkeypatch):
    out = tmp_path / "page"
    write(store, out, "run-a")
    write_run(store, "run-b", version="0.5.24")
    real = outdir.replace_file
    calls = []

    def dies_on_the_third(path, data):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(outdir, "replace_file", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        write(store, out, "run-a", "run-b")
    monkeypatch.undo()
    assert not [p for p in out.rglob("*") if p.name.startswith(outdir.TMP_PREFIX)]  # no temporary file left
    write(store, out, "run-a", "run-b")  # half old, half new: all of it ours
    assert "What changed from run-a to run-b" in (out / "index.html").read_text()


def test_a_page_of_an_older_harness_without_a_manifest_is_refused_saying_so(store, tmp_path):
    out = tmp_path / "page"
    write(store, out, "run-a")
    (out / outdir.MANIFEST).unlink()
    with pytest.raises(ConfigError, match="a page of an older harness, which kept no record of the files it wrote"):
        write(store, out, "run-a")
    (out / outdir.MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match=r"\.harness-report\.json: not a manifest the harness can read"):
        write(store, out, "run-a")


def test_report_command_refuses_a_users_file_and_a_link_without_a_traceback(store, tmp_path):
    out = tmp_path / "html"

    def report_cmd() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harness", "report", "run-a", "--html", str(out),
                               "--results-dir", str(store.root)], capture_output=True, text=True, timeout=120)

    assert report_cmd().returncode == 0
    (out / "logs" / "run-a" / "todo.txt").write_text("keep me")
    p = report_cmd()
    assert p.returncode == 2 and "Traceback" not in p.stdout + p.stderr, p.stderr
    assert "todo.txt: a file the harness did not write" in " ".join(p.stderr.split())
    assert (out / "logs" / "run-a" / "todo.txt").read_text() == "keep me"
    shutil.rmtree(out / "logs")
    (tmp_path / "elsewhere").mkdir()
    (out / "logs").symlink_to(tmp_path / "elsewhere")
    p = report_cmd()
    assert p.returncode == 2 and "Traceback" not in p.stdout + p.stderr, p.stderr
    assert "a symbolic link" in p.stderr and list((tmp_path / "elsewhere").iterdir()) == []


def test_every_legend_words_the_significance_marks_alike(store, tmp_path):
    """One wording, from one constant, wherever the marks are explained: ▲/▼ when p < α, ≈ when p ≥ α — the
    terminal's legend, the markdown table's, the page's and the docs' (they once said "p ≥" and "p <" for ≈)."""
    import io

    from rich.console import Console

    from harness.cli import views
    from harness.render import nightstext

    _, rows = load(store, "run-a")
    legend = compare.SIGNIFICANCE_LEGEND
    assert f"▼ worse (two-sided Mann-Whitney test on the repeats, p < {compare.ALPHA})" in legend
    assert f"≈ not significant (p ≥ {compare.ALPHA})" in legend
    buf = io.StringIO()
    views.print_comparison(Console(file=buf, width=100), rows, "output_throughput")
    _, shown, _ = write(store, tmp_path / "page", "run-a")
    docs = (Path(__file__).resolve().parents[2] / "docs" / "reading-the-table.md").read_text()
    shown = {"terminal": buf.getvalue(), "markdown": tableformats.to_markdown(rows, "output_throughput"),
             "page": "".join(shown.text), "docs": docs, "nights": nightstext.legend()}
    for where, text in shown.items():
        flat = " ".join(text.split())
        assert legend in flat, where
        assert f"p<{compare.ALPHA}" not in flat and f"Mann-Whitney, p ≥ {compare.ALPHA}" not in flat, where
