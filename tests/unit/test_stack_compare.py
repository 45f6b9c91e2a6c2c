"""Same stack? The comparability rule of analysis/stack.py as the table applies it: rows on stacks that differ
in what matters are not comparable (the note names the field), rows that differ only in the packages hash
get a note, and a stack column appears only when the rows' stacks differ — in one run and between two
(`harness compare A B`), on the terminal, in CSV/JSON and on the page."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from harness.analysis.compare import build_rows, columns, table_rows
from harness.analysis.stack import differences, fingerprint, stack_id
from harness.cli.app import app
from harness.render import page
from harness.render.tableformats import to_csv
from harness.results.schemas import Record, RunInfo
from harness.results.store import ResultsStore

GPU = [{"name": "NVIDIA H200", "compute_cap": "9.0"}] * 2
SAMPLES = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]


def stack(**over: Any) -> dict[str, Any]:
    gpu = {"index": "0", "sm_mhz": 345, "app_sm_mhz": 1980, "app_mem_mhz": 3201, "default_app_sm_mhz": 1980,
           "default_app_mem_mhz": 3201, "power_limit_w": 700.0, "default_power_limit_w": 700.0}
    gpu.update(over.pop("gpu", {}))
    out = {"torch": "2.9.1+cu128", "cuda_runtime": "12.8", "sgl_kernel": "0.4.1", "triton": "3.5.1",
           "flashinfer": "0.7.2", "sglang": "0.5.23", "packages": 212, "packages_sha256": "a" * 64,
           "driver": "570.133.20", "cuda_driver": "12.8", "gpus": [gpu, dict(gpu, index="1")]}
    out.update(over)
    return out


def rec(exp: str, samples: list[float], st: dict[str, Any] | None, run: str = "r1") -> Record:
    prov: dict[str, Any] = {"gpu": GPU, "server_version": "0.5.23", "base_commit": "c" * 40}
    if st is not None:
        prov["stack"] = st
    return Record(run_id=run, experiment=exp, attempt="01", host="h", backend=exp, status="ok",
                  metrics={"bs1": {"output_throughput": samples[0], "samples": {"output_throughput": samples}}},
                  provenance=prov)


def row(rows: list[Any], exp: str) -> Any:
    return next(r for r in rows if r.experiment == exp)


def test_a_row_on_another_torch_is_not_comparable_and_the_note_says_torch():
    rows = build_rows([rec("base", SAMPLES, stack()), rec("new", [x * 1.2 for x in SAMPLES], stack(torch="2.8.0"))],
                      metric="output_throughput", baseline="base")
    new = row(rows, "new")
    assert new.cells["bs1"].verdict == "n/a" and new.cells["bs1"].ratio is not None
    assert any(n.startswith("not comparable to the baseline: torch 2.8.0 vs 2.9.1+cu128") for n in new.notes)
    assert new.stack_id != row(rows, "base").stack_id
    # the terminal's and markdown's table: a stack column, each row's id
    cols = columns(rows, "output_throughput")
    assert "stack" in cols
    ids = {line[0]: line[cols.index("stack")] for line in table_rows(rows)}
    assert ids == {"base": row(rows, "base").stack_id, "new": new.stack_id}


def test_several_differences_beyond_what_matters_are_listed_in_one_note():
    rows = build_rows([rec("base", SAMPLES, stack()),
                       rec("new", SAMPLES, stack(packages_sha256="b" * 64, driver="570.144.0"))],
                      metric="output_throughput", baseline="base")
    notes = [n for n in row(rows, "new").notes if "beyond what matters" in n]
    assert len(notes) == 1
    listed = notes[0].split(": ", 1)[1].split(", ")
    assert len(listed) == 2 and any("570.144.0" in x for x in listed) and any("bbbbbbbb" in x for x in listed)
    assert all(x.startswith(("driver version ", "packages ")) for x in listed), listed


def test_only_the_packages_hash_differs_a_note_and_the_verdict_stands():
    rows = build_rows([rec("base", SAMPLES, stack()),
                       rec("new", [x * 1.2 for x in SAMPLES], stack(packages_sha256="b" * 64))],
                      metric="output_throughput", baseline="base")
    new = row(rows, "new")
    assert new.cells["bs1"].verdict == "better"
    assert not any("not comparable" in n for n in new.notes)
    assert any("beyond what matters" in n and "packages bbbbbbbb vs aaaaaaaa" in n for n in new.notes)
    assert new.stack_id == row(rows, "base").stack_id
    assert "stack" not in columns(rows, "output_throughput")  # same stack: no column


def test_each_fact_that_matters_and_those_that_do_not():
    base = fingerprint(rec("b", SAMPLES, stack()))
    cases = {"CUDA runtime": stack(cuda_runtime="13.0"), "driver": stack(driver="580.159.03"),
             "sgl-kernel": stack(sgl_kernel="0.4.5"), "Triton": stack(triton="3.6.0"),
             "FlashInfer": stack(flashinfer="0.6.13"), "sglang": stack(sglang="0.5.16"),
             "power limit": stack(gpu={"power_limit_w": 500.0}), "clocks": stack(gpu={"app_sm_mhz": 1500})}
    for field, other in cases.items():
        matters, _ = differences(fingerprint(rec("n", SAMPLES, other)), base)
        assert [m.split(" ")[0] for m in matters] == [field.split(" ")[0]], field
    matters, notes = differences(fingerprint(rec("n", SAMPLES, stack(driver="570.195.03", gpu={"sm_mhz": 1980}))),
                                 base)
    assert matters == [] and notes == ["driver version 570.195.03 vs 570.133.20"]  # the current clock: never
    matters, notes = differences(fingerprint(rec("n", SAMPLES, stack(driver="580.95.05"))), base)
    assert matters == ["driver 580 vs 570"] and notes == []  # the major said it


def test_set_clocks_and_power_limits_read_as_the_gpus_show_them():
    fp = fingerprint(rec("n", SAMPLES, stack(gpu={"app_sm_mhz": 1500, "power_limit_w": 550.5})))
    assert fp is not None and (fp["clocks"], fp["power limit"]) == ("set SM 1500/mem 3201 MHz", "550.5 W")
    assert fingerprint(rec("b", SAMPLES, stack()))["clocks"] == "default"  # type: ignore[index]


def test_a_fact_one_side_did_not_record_is_no_difference():
    old = rec("old", SAMPLES, None)
    unknown = rec("unknown", SAMPLES, stack(torch=None, gpus=None))
    rows = build_rows([rec("base", SAMPLES, stack()), old, unknown], metric="output_throughput", baseline="base")
    assert fingerprint(old) is None and stack_id(None) is None
    for exp in ("old", "unknown"):
        assert not any("not comparable" in n for n in row(rows, exp).notes)
        assert row(rows, exp).cells["bs1"].verdict == "same"


def test_a_row_pooling_attempts_from_two_stacks_says_so():
    a, b = rec("exp", SAMPLES, stack()), rec("exp", SAMPLES, stack(triton="3.6.0"))
    b.attempt = "02"
    (only,) = build_rows([a, b], metric="output_throughput")
    assert any(n.startswith("attempts ran on 2 stacks") for n in only.notes)


def write(store: ResultsStore, run: str, torch: str, packages: str) -> None:
    store.write_run(RunInfo(run_id=run, sweep="nightly", sweep_file="/x/nightly.yaml", baseline="base"))
    for exp, factor in (("base", 1.0), ("fast", 1.2)):
        r = rec(exp, [x * factor for x in SAMPLES], stack(torch=torch, packages_sha256=packages), run=run)
        store.write_record(store.new_attempt_dir(run, exp, "01"), r)


def compare(store: ResultsStore, *args: str) -> str:
    res = CliRunner().invoke(app, ["compare", *args, "--results-dir", str(store.root)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    return res.output


def test_harness_compare_of_two_nights_on_different_stacks(tmp_path: Path):
    store = ResultsStore(tmp_path / "results")
    write(store, "night-1", "2.9.1+cu128", "a" * 64)
    write(store, "night-2", "2.10.0+cu128", "a" * 64)
    # Against one baseline: the other night's rows are not comparable, and the note says torch.
    rows = {r["label"]: r for r in json.loads(compare(store, "night-1", "night-2", "--baseline", "night-1:base",
                                                      "--format", "json"))["rows"]}
    assert rows["night-1:fast"]["cells"]["bs1"]["verdict"] == "better"
    for label in ("night-2:base", "night-2:fast"):
        assert rows[label]["cells"]["bs1"]["verdict"] == "n/a"
        assert any("not comparable" in n and "torch 2.10.0+cu128 vs 2.9.1+cu128" in n for n in rows[label]["notes"])
    # Each night against its own baseline (the sweep's): each verdict stands, the stack column and the line
    # under the table say the nights ran on different stacks, and in what.
    rows = {r["label"]: r for r in json.loads(compare(store, "night-1", "night-2", "--format", "json"))["rows"]}
    assert rows["night-2:fast"]["cells"]["bs1"]["verdict"] == "better"
    text = compare(store, "night-1", "night-2")
    first, second = rows["night-1:base"]["stack_id"], rows["night-2:base"]["stack_id"]
    header = text[:text.index("━")]  # the table's header rows (how many: the console's width decides)
    assert first != second and "stack" in header and second in text
    assert f"stack {second} differs from {first} in torch 2.10.0+cu128 vs 2.9.1+cu128" in text


def test_nights_differing_only_in_packages_compare_with_a_note(tmp_path: Path):
    store = ResultsStore(tmp_path / "results")
    write(store, "night-1", "2.9.1+cu128", "a" * 64)
    write(store, "night-3", "2.9.1+cu128", "e" * 64)
    rows = {r["label"]: r for r in json.loads(compare(store, "night-1", "night-3", "--baseline", "night-1:base",
                                                      "--format", "json"))["rows"]}
    assert rows["night-3:fast"]["cells"]["bs1"]["verdict"] == "better"
    assert any("packages eeeeeeee vs aaaaaaaa" in n for n in rows["night-3:fast"]["notes"])
    assert not any("not comparable" in n for n in rows["night-3:fast"]["notes"])
    table = list(csv.DictReader(io.StringIO(compare(store, "night-1", "night-3", "--format", "csv"))))
    assert len({r["stack"] for r in table}) == 1  # one stack: the terminal table has no stack column
    assert "stack" not in compare(store, "night-1", "night-3").splitlines()[1]


def test_the_page_shows_the_stack_column_its_facts_and_what_changed(tmp_path: Path):
    records = [rec("base", SAMPLES, stack(), run="a"), rec("base", SAMPLES, stack(torch="2.10.0"), run="b")]
    rows = build_rows(records, metric="output_throughput")
    ctx = page.build_context(records, rows, "output_throughput", runs={"a": None, "b": None}, plots=None)
    headers = ctx["table"]["headers"]
    assert "stack" in headers
    cell = ctx["table"]["rows"][1]["cells"][headers.index("stack")]
    assert cell["text"] == rows[1].stack_id and "torch 2.10.0" in cell["title"]
    assert [s["torch"] for s in ctx["provenance"]["stacks"]] == ["2.9.1+cu128", "2.10.0"]
    assert {"what": "stack: torch", "a": "2.9.1+cu128", "b": "2.10.0"} in ctx["changes"]["setup"]
    moved = {m["case"]: m for m in ctx["changes"]["results"]}
    assert moved["stack"]["change"] == "not comparable: torch 2.10.0 vs 2.9.1+cu128"
    assert moved["bs1"]["cls"] == "v-na" and moved["bs1"]["change"] == "1.00x"  # no ≈: nothing was tested
    assert "stack" in to_csv(rows).splitlines()[0].split(",")
