"""The charts drawn without matplotlib (harness/render/svgcharts.py, svgdraw.py, families.py): each parses as XML,
has its axis titles with units, a legend entry per experiment, a point per case and level where the numbers put
it, escaped names, scoped ids; the load families read from the bench JSONL; the page and `compare --plot x.svg`
with matplotlib made unimportable; the terminal's sparklines."""

from __future__ import annotations

import io
import json
import math
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from harness.analysis import families
from harness.analysis.compare import build_rows
from harness.render import svgcharts, svgdraw
from harness.results.schemas import Record
from harness.results.store import ResultsStore

NS = {"s": "http://www.w3.org/2000/svg"}
GPU = [{"name": "NVIDIA H200", "compute_cap": "9.0"}]
EVIL = 'x<b>&"\'y'  # a name that would be markup if it were not escaped
LEVELS = {"c1": 1, "c8": 8, "c32": 32}


def rec(exp: str, cases: dict[str, dict[str, list[float]]], status: str = "ok", attempt: str = "01") -> Record:
    return Record(run_id="r1", experiment=exp, attempt=attempt, host="h", backend=exp, status=status,
                  metrics={c: {"samples": m} for c, m in cases.items()},
                  provenance={"gpu": GPU, "server_version": "0.5.23", "base_commit": "c" * 40})


def curve(speed: float) -> dict[str, dict[str, list[float]]]:
    """Three concurrency levels: throughput grows with the level and with `speed`, latency falls with `speed`."""
    return {case: {"output_throughput": [speed * 40 * lv * k for k in (0.99, 1.0, 1.01)],
                   "median_itl_ms": [(10 + lv) / speed * k for k in (0.99, 1.0, 1.01)],
                   "median_ttft_ms": [(50 + 3 * lv) / speed * k for k in (0.99, 1.0, 1.01)]}
            for case, lv in LEVELS.items()}


def jsonl_line(level: int | None, input_len: int = 128) -> dict:
    return {"dataset_name": "random-ids", "random_input_len": input_len, "random_output_len": 24,
            "request_rate": float("inf"), "max_concurrency": level, "output_throughput": 1.0}


def fleet():
    records = [rec("base", curve(1.0)), rec(EVIL, curve(1.5)), rec("crashy", {}, status="crashed")]
    rows = build_rows(records, metric="output_throughput", baseline="base")
    loads = {("r1", r.experiment, c): families.load_of(jsonl_line(lv)) for r in records for c, lv in LEVELS.items()}
    return records, rows, loads


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def texts(el: ET.Element, path: str) -> list[str]:
    return ["".join(t.itertext()) for t in el.iterfind(path, NS)]


def translate(g: ET.Element) -> tuple[float, float]:
    x, y = re.fullmatch(r"translate\(([-\d.]+) ([-\d.]+)\)", g.get("transform", "")).groups()
    return float(x), float(y)


# ============================================================================ the case chart


def test_case_chart_has_a_bar_per_measured_row_at_its_median_and_a_cross_for_a_crash():
    _, rows, _ = fleet()
    svg = parse(svgcharts.case_chart(rows, "c8", "output_throughput", "plot0").svg)
    assert svg.get("role") == "img" and svg.get("data-case") == "c8"
    title_id, desc_id = svg.get("aria-labelledby").split()
    assert svg.find("s:title", NS).get("id") == title_id and svg.find("s:desc", NS).get("id") == desc_id
    assert "c8" in svg.find("s:title", NS).text and "base (baseline): median 320.0, 3 repeats from 316.8 to 323.2" in svg.find("s:desc", NS).text
    assert texts(svg, ".//s:g[@class='x-axis']/s:text[@class='axis-title']") == [
        "output_throughput (tok/s), higher is better"]
    bars = {b.get("data-label"): b for b in svg.iterfind(".//s:g[@class='bar']", NS)}
    assert set(bars) == {"base", EVIL}  # the crashed row has no bar at all, not one of length 0
    width = {k: float(b.find("s:rect", NS).get("width")) for k, b in bars.items()}
    assert width[EVIL] / width["base"] == pytest.approx(1.5, rel=0.01)  # bars proportional to the medians
    assert all(len(b.findall("s:circle[@class='repeat']", NS)) == 3 for b in bars.values())  # a dot per repeat
    assert bars["base"].find("s:rect", NS).get("fill") == "url(#plot0-hatch)"  # the baseline is hatched
    line = svg.find(".//s:line[@class='baseline-line']", NS)
    assert float(line.get("x1")) == pytest.approx(float(bars["base"].find("s:rect", NS).get("x")) + width["base"],
                                                  abs=0.2)
    assert texts(svg, ".//s:g[@class='no-result']/s:text") == ["crashed"]
    assert texts(svg, ".//s:g[@class='legend-entry']/s:text") == [
        "median", "baseline median", "lowest to highest repeat", "one repeat", "no result"]


def test_a_latency_case_chart_says_lower_is_better_in_ms():
    rows = build_rows(fleet()[0], metric="median_itl_ms", baseline="base")
    svg = parse(svgcharts.case_chart(rows, "c1", "median_itl_ms", "p").svg)
    assert texts(svg, ".//s:text[@class='axis-title']") == ["median_itl_ms (ms), lower is better"]


def test_names_are_escaped_never_markup():
    _, rows, loads = fleet()
    fam = families.families(rows, fleet()[0], loads)[0]
    for chart in (svgcharts.case_chart(rows, "c1", "output_throughput", "a").svg,
                  svgcharts.pareto_chart(fam, "median_itl_ms", "b").svg):
        assert "<b>" not in chart and "&lt;b&gt;&amp;&quot;" in chart
        svg = parse(chart)
        assert svg.find(".//s:b", NS) is None and svg.find(".//b") is None
        labels = [e.get("data-label") or e.get("data-series") for e in svg.iter()]
        assert EVIL in labels  # the name round-trips through the attribute as it was
        assert any(EVIL in t for t in texts(svg, ".//s:text"))


def test_same_input_same_bytes_and_ids_scoped_by_the_prefix():
    records, rows, loads = fleet()
    one = svgcharts.case_plots(rows, "output_throughput")
    again = svgcharts.case_plots(build_rows(records, metric="output_throughput", baseline="base"),
                                 "output_throughput")
    assert [p["svg"] for p in one] == [p["svg"] for p in again]
    pareto = svgcharts.pareto_plots(families.families(rows, records, loads))
    ids = [i for p in one + pareto for i in re.findall(r'\bid="([^"]+)"', p["svg"])]
    assert len(ids) == len(set(ids)) and len(ids) >= 5 * 3  # several charts share a page
    for p in one + pareto:
        root = parse(p["svg"]).get("id")
        assert all(i == root or i.startswith(root + "-") for i in re.findall(r'\bid="([^"]+)"', p["svg"]))
    with pytest.raises(ValueError):
        svgcharts.case_chart(rows, "c1", "output_throughput", '"><script>')


# ============================================================================ the Pareto chart


def test_pareto_chart_has_a_line_per_experiment_a_point_per_level_where_the_numbers_put_it():
    records, rows, loads = fleet()
    (fam,) = families.families(rows, records, loads)
    assert fam.levels == [1, 8, 32] and fam.cases == ["c1", "c32", "c8"] and fam.title == (
        "random-ids, 128 in / 24 out tokens")
    svg = parse(svgcharts.pareto_chart(fam, "median_itl_ms", "pareto0-itl").svg)
    assert texts(svg, ".//s:text[@class='axis-title']") == ["output throughput (tok/s)",
                                                            "median inter-token latency, ITL (ms)"]
    assert texts(svg, ".//s:g[@class='legend-entry']/s:text") == ["base (baseline)", EVIL, "Pareto front"]
    points = {(g.get("data-series"), int(g.get("data-level"))): g for g in svg.iterfind(".//s:g[@class='point']", NS)}
    assert set(points) == {(s, lv) for s in ("base", EVIL) for lv in LEVELS.values()}  # the crash has none
    at = {k: translate(g) for k, g in points.items()}
    for s in ("base", EVIL):  # along each line: more concurrency, more throughput (right) and latency (up)
        assert at[(s, 1)][0] < at[(s, 8)][0] < at[(s, 32)][0]
        assert at[(s, 1)][1] > at[(s, 8)][1] > at[(s, 32)][1]
    for lv in LEVELS.values():  # the faster experiment: right of and below the baseline at every level
        assert at[(EVIL, lv)][0] > at[("base", lv)][0] and at[(EVIL, lv)][1] > at[("base", lv)][1]
    # positions are linear in the numbers: x from 0, 1.5 times the throughput is 1.5 times as far from the axis
    x0 = float(svg.find(".//s:g[@class='x-axis']/s:line", NS).get("x1"))
    assert (at[(EVIL, 8)][0] - x0) / (at[("base", 8)][0] - x0) == pytest.approx(1.5, rel=0.01)
    y0 = float(svg.find(".//s:g[@class='y-axis']/s:line", NS).get("y1"))
    assert (y0 - at[("base", 8)][1]) / (y0 - at[(EVIL, 8)][1]) == pytest.approx(1.5, rel=0.01)
    # the faster one beats the baseline everywhere: its points, and only they, are ringed
    ringed = {k for k, g in points.items() if g.find("s:circle[@class='front']", NS) is not None}
    assert ringed == {(EVIL, lv) for lv in LEVELS.values()}
    assert [g.get("data-series") for g in svg.iterfind(".//s:g[@class='series']", NS)] == ["base", EVIL]


def test_pareto_front():
    assert svgcharts.pareto_front([(10, 5), (20, 6), (15, 7), (20, 5), (5, 1)]) == {3, 4}
    assert svgcharts.pareto_front([(1, 1), (1, 1)]) == {0, 1}  # equal points beat neither


def test_cases_form_a_family_only_when_they_differ_in_max_concurrency_alone():
    records, rows, loads = fleet()
    loads[("r1", "base", "c32")] = families.load_of(jsonl_line(32, input_len=4096))  # another load
    loads[("r1", EVIL, "c32")] = families.load_of(jsonl_line(None))  # not capped: the last level
    fams = families.families(rows, records, loads, min_levels=1)
    by = {(f.title, tuple(f.levels)): [(s.label, [p.level for p in s.points]) for s in f.series] for f in fams}
    assert by == {("random-ids, 128 in / 24 out tokens", (1, 8, None)): [("base", [1, 8]), (EVIL, [1, 8, None])],
                  ("random-ids, 4096 in / 24 out tokens", (32,)): [("base", [32])]}
    assert [f.title for f in families.families(rows, records, loads)] == ["random-ids, 128 in / 24 out tokens"]
    assert families.level_text(None) == "∞"
    assert families.load_of({"dataset_name": "sharegpt"}) is None  # not a bench_serving line: no level known
    assert families.load_of({"max_concurrency": True}) is None


def test_loads_come_from_the_bench_jsonl_beside_the_records(tmp_path):
    store = ResultsStore(tmp_path / "results")
    records = [rec("base", curve(1.0), attempt="01"), rec("base", curve(1.0), attempt="02")]
    for r in records:
        store.write_record(store.new_attempt_dir("r1", r.experiment, r.attempt), r)
    first = store.run_path("r1") / "base" / "01"
    for case, lv in LEVELS.items():
        (first / f"bench-{case}.jsonl").write_text("\n" + json.dumps(jsonl_line(lv)) + "\n"
                                                   + json.dumps(jsonl_line(lv)) + "\n")
    (first / "bench-c8.jsonl").unlink()  # missing in the first attempt: the second one's is read
    (store.run_path("r1") / "base" / "02" / "bench-c8.jsonl").write_text(json.dumps(jsonl_line(8)) + "\n")
    reads = []

    def read(r, case):
        reads.append((r.attempt, case))
        return store.read_bench_lines(r, case)

    loads = families.read_loads(records, read)
    assert {k: v.level for k, v in loads.items()} == {("r1", "base", c): lv for c, lv in LEVELS.items()}
    assert sorted(reads) == [("01", "c1"), ("01", "c32"), ("01", "c8"), ("02", "c8")]  # once found, never again
    assert store.read_bench_lines(records[0], "nope") == []


# ============================================================================ drawing helpers


@pytest.mark.parametrize("lo,hi", [(0, 1), (0, 61.8), (0, 1536), (0, 0.037), (0, 123456), (3, 3)])
def test_ticks_are_round_and_cover_the_data(lo, hi):
    t = svgdraw.ticks(lo, hi)
    step = t[1] - t[0]
    assert t[0] <= lo and t[-1] >= hi and 3 <= len(t) - 1 <= 7
    assert all(b - a == pytest.approx(step) for a, b in zip(t, t[1:]))
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(mantissa == pytest.approx(m) for m in (1, 2, 2.5, 5))
    assert hi == lo or t[-1] - hi < 2 * step  # little room wasted past the data
    labels = [svgdraw.tick_label(v, t) for v in t]
    assert len(set(labels)) == len(labels) and all(float(x.replace(",", "")) == pytest.approx(v)
                                                   for x, v in zip(labels, t))


def test_sparkline_heights_follow_the_values():
    assert families.sparkline([0, 50, 100, None], 100) == "▁▅█ "
    assert families.sparkline([1, 1], 0) == "▁▁"


# ============================================================================ no matplotlib needed


def without_matplotlib(monkeypatch) -> None:
    """matplotlib unimportable, its submodules an earlier test imported too."""
    for name in [n for n in sys.modules if n.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)


def test_compare_plot_to_svg_needs_no_matplotlib(tmp_path, monkeypatch):
    without_matplotlib(monkeypatch)
    from harness.errors import ConfigError
    from harness.render import plots

    _, rows, _ = fleet()
    out = tmp_path / "p.svg"
    plots.plot(rows, "output_throughput", out)
    svg = parse(out.read_text())
    assert plots.MARK in "".join(svg.find("s:metadata", NS).itertext())
    assert [c.get("data-case") for c in svg.iterfind("s:g/s:svg", NS)] == ["c1", "c32", "c8"]
    plots.plot(rows, "output_throughput", out)  # ours: written again
    mine = tmp_path / "mine.svg"
    mine.write_text("<svg/>")
    with pytest.raises(ConfigError, match="did not write"):
        plots.plot(rows, "output_throughput", mine)
    with pytest.raises(ConfigError, match="needs matplotlib"):
        plots.plot(rows, "output_throughput", tmp_path / "p.png")


def test_sparklines_under_the_terminal_table_only(tmp_path, capsys):
    from rich.console import Console

    from harness.cli.views import show_comparison

    store = ResultsStore(tmp_path / "results")
    for r in (rec("base", curve(1.0)), rec("fast", curve(1.5))):
        d = store.new_attempt_dir("r1", r.experiment, r.attempt)
        store.write_record(d, r)
        for case, lv in LEVELS.items():
            (d / f"bench-{case}.jsonl").write_text(json.dumps(jsonl_line(lv)) + "\n")
    console = Console(file=io.StringIO(), width=200)
    show_comparison(console, [(store, "r1")], baseline="base", metric="output_throughput", fmt="table",
                    plot_file=None)
    lines = console.file.getvalue().splitlines()
    head = lines.index("output_throughput (tok/s) across max concurrency 1, 8, 32: random-ids, 128 in / 24 out "
                       "tokens (c1, c32, c8)")
    base, fast = (lines[head + i].split() for i in (1, 2))
    assert base[0] == "base" and base[2:] == ["40.0", "…", "1,280.0"]  # the medians at the first and last level
    assert fast[0] == "fast" and fast[2:] == ["60.0", "…", "1,920.0"]
    height = {ch: i for i, ch in enumerate(families.SPARKS)}
    b, f = ([height[ch] for ch in line[1]] for line in (base, fast))
    assert b == sorted(b) and f == sorted(f) and len(b) == len(f) == 3  # a bar per level, rising with it
    assert f[-1] == len(families.SPARKS) - 1 and all(x <= y for x, y in zip(b, f)) and b[-1] < f[-1]  # one scale
    for fmt in ("csv", "markdown", "json"):
        show_comparison(console, [(store, "r1")], baseline="base", metric="output_throughput", fmt=fmt,
                        plot_file=None)
        assert not any(ch in capsys.readouterr().out for ch in families.SPARKS)


def test_a_value_that_is_not_a_number_is_left_out_never_drawn_as_nan():
    nan = float("nan")  # JSON as Python writes it may hold NaN, and a record keeps what its JSONL said
    records = [rec("base", curve(1.0)), rec("odd", {c: {**m, "median_itl_ms": [nan, nan, nan]}
                                                    for c, m in curve(2.0).items()})]
    rows = build_rows(records, metric="output_throughput", baseline="base")
    loads = {("r1", r.experiment, c): families.load_of(jsonl_line(lv)) for r in records for c, lv in LEVELS.items()}
    (fam,) = families.families(rows, records, loads)
    itl = svgcharts.pareto_chart(fam, "median_itl_ms", "b").svg
    assert "nan" not in itl.lower()
    assert {g.get("data-series") for g in parse(itl).iterfind(".//s:g[@class='point']", NS)} == {"base"}
    ttft = parse(svgcharts.pareto_chart(fam, "median_ttft_ms", "c").svg)
    assert {g.get("data-series") for g in ttft.iterfind(".//s:g[@class='point']", NS)} == {"base", "odd"}
    odd = next(r for r in rows if r.label == "odd").cells["c8"]
    odd.median, odd.samples = nan, [nan, 1.0, nan]
    bars = svgcharts.case_chart(rows, "c8", "output_throughput", "a").svg
    assert "nan" not in bars.lower() and texts(parse(bars), ".//s:g[@class='no-result']/s:text") == ["no result"]
