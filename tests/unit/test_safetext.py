"""Host text made safe to show (harness/safetext.py), and where it is applied: a record's display fields, the
CLI's consoles, triage's key line and the HTML page."""

from __future__ import annotations

import io
import json

import pytest

from harness.analysis import compare
from harness.render import page, tableformats
from harness.results.schemas import Record
from harness.results.store import ResultsStore
from harness.safetext import display_line, display_lines, display_text
from harness.triage.classify import triage_text

OSC52_BEL = "\x1b]52;c;cm0gLXJmIH4=\x07"
OSC52_ST = "\x1b]52;c;cm0gLXJmIH4=\x1b\\"
OSC0 = "\x1b]0;pwned\x07"
# Every byte a terminal may act on: ESC, BEL, C1 (0x80-0x9f), DEL, CR, the bidi overrides and isolates.
ACTIVE = {chr(c) for c in [*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0),
                           *range(0x202a, 0x202f), *range(0x2066, 0x206a)]}


def inert(text: str, multiline: bool = False) -> bool:
    return not (set(text) & (ACTIVE if multiline else ACTIVE | {"\n"}))


@pytest.mark.parametrize(("raw", "shown"), [
    (f"boom {OSC52_BEL} end", "boom \\x1b]52;c;cm0gLXJmIH4=\\x07 end"),
    (f"boom {OSC52_ST} end", "boom \\x1b]52;c;cm0gLXJmIH4=\\x1b\\ end"),
    (f"{OSC0}RuntimeError: x", "\\x1b]0;pwned\\x07RuntimeError: x"),
    ("a\x1b[2J\x1b[Hb", "a\\x1b[2J\\x1b[Hb"),  # clear screen, cursor home: shown
    ("\x9b31;1Hx", "\\x9b31;1Hx"),  # the one-byte C1 CSI
    ("\x9d0;t\x9c", "\\x9d0;t\\x9c"),  # C1 OSC and ST
    ("bare \x1b alone", "bare \\x1b alone"),
    ("ok\rFAKE", "ok\\rFAKE"),  # a carriage return would let FAKE overwrite ok
    ("del\x7f nul\x00 bs\x08", "del\\x7f nul\\x00 bs\\x08"),
    ("file\u202etxt.exe", "file\\u202etxt.exe"),  # right-to-left override
    ("\u2066iso\u2069", "\\u2066iso\\u2069"),
    ("\x1b[1;31mERROR\x1b[0m: x", "ERROR: x"),  # colours carry no information: dropped
    ("bad \udcff byte", "bad \\udcff byte"),  # surrogateescape'd byte: a strict UTF-8 stream cannot write it
])
def test_control_sequences_are_shown_escaped(raw, shown):
    assert display_line(raw) == shown
    assert inert(display_line(raw)) and inert(display_lines(raw), multiline=True)


def test_plain_text_and_utf8_are_untouched():
    for text in ("ValueError: Exactly one of ckv_scale or ckv_scale_arr is required [tp 0]",
                 "naïve café — 日本語 Ελληνικά ▲▼≈ ±", "tab\tseparated", "shalom שלום مرحبا", ""):
        assert display_line(text) == text
        assert display_lines(text) == text


def test_newlines_only_where_the_text_may_span_lines():
    assert display_line("a\nb\r\nc") == "a\\nb\\r\\nc"
    assert display_lines("a\nb\r\nc\rd") == "a\nb\nc\\rd"


def test_idempotent():
    for raw in (OSC52_BEL, OSC52_ST, OSC0 + "x\r\ny", "\x9b2J\u202e\x1b[31mred", "plain", "a\\x1b"):
        for multiline in (False, True):
            once = display_text(raw, multiline=multiline)
            assert display_text(once, multiline=multiline) == once


def test_record_display_fields_are_escaped_when_made_and_when_read(tmp_path):
    rec = Record(run_id="r", experiment="e", attempt="01", host="h", status="crashed",
                 error=f"agent said {OSC0}\nsecond line", abort_reason=f"gone {OSC52_BEL}",
                 preflight_warnings=[f"w {OSC0}"],
                 verdict={"category": "oom", "key_line": f"OOM {OSC52_BEL}", "hint": "x\u202ey"})
    assert rec.verdict is not None and rec.verdict.key_line == "OOM \\x1b]52;c;cm0gLXJmIH4=\\x07"
    assert rec.error == "agent said \\x1b]0;pwned\\x07\nsecond line"
    assert inert(rec.to_json(), multiline=True) and "\\u001b" not in rec.to_json()
    # a record written before (raw ESC in its JSON) is read back escaped
    raw = json.loads(rec.to_json())
    raw["verdict"]["key_line"] = f"old {OSC52_ST}"
    old = Record.model_validate_json(json.dumps(raw))
    assert old.verdict is not None and old.verdict.key_line == "old \\x1b]52;c;cm0gLXJmIH4=\\x1b\\"


def test_triage_key_line_is_escaped():
    log = f"Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access {OSC52_BEL}{OSC0}\n"
    v = triage_text(log, 1)
    assert v.category == "illegal-memory-access" and v.key_line is not None
    assert inert(v.key_line) and "\\x1b]52;c;" in v.key_line


def test_the_cli_console_prints_host_text_inert_even_unescaped_or_in_a_table():
    from rich.markup import escape
    from rich.table import Table

    from harness.cli.common import SafeConsole

    buf = io.StringIO()
    console = SafeConsole(file=buf, force_terminal=False, width=200)
    console.print(f"key line: {escape(OSC52_BEL + OSC0 + '[bold]x')}", highlight=False)
    console.print(f"note: {OSC52_ST}\u202eevil\rFAKE", markup=False)
    table = Table()
    table.add_column("gpu")
    table.add_row(f"H200{OSC0}")
    console.print(table)
    out = buf.getvalue()
    assert inert(out, multiline=True), repr(out)
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in out and "[bold]x" in out and "\\u202eevil\\rFAKE" in out


def test_the_page_and_its_log_excerpt_show_host_text_escaped(tmp_path):
    store = ResultsStore(tmp_path / "results")
    gpu = [{"name": f"NVIDIA H200{OSC0}", "compute_cap": "9.0"}]
    rec = Record(run_id="r1", experiment="crashy", attempt="01", host="box", status="crashed",
                 provenance={"gpu": gpu, "hostname": f"box-1{OSC52_BEL}", "server_version": "0.5.23\u202e"},
                 verdict={"category": "oom", "key_line": f"OOM {OSC52_BEL}"})
    directory = store.run_path("r1") / "crashy" / "01"
    directory.mkdir(parents=True)
    (directory / "record.json").write_text(rec.to_json())
    (directory / "server.log").write_bytes(f"start\nRuntimeError: OOM {OSC52_BEL}{OSC0}\n".encode())
    records = [rec]
    rows = compare.build_rows(records, metric="output_throughput")
    index = page.write_html(tmp_path / "page", records, rows, "output_throughput", stores={"r1": store},
                                 runs={"r1": None})
    text = index.read_text()
    assert inert(text, multiline=True) and "box-1\\x1b]52;c;" in text
    excerpt = next((index.parent / "logs").rglob("*.log.txt")).read_text()
    assert inert(excerpt, multiline=True) and "RuntimeError: OOM \\x1b]52;c;" in excerpt
    assert OSC52_BEL.encode() in (directory / "server.log").read_bytes()  # the evidence itself stays raw


def test_the_comparison_shows_host_words_escaped_in_its_cells_and_notes():
    """The table's cells are printed as rich Text (no markup, no render_str): the views escape them."""
    from rich.console import Console

    from harness.cli.views import print_comparison

    def rec(exp: str, gpu: str, **extra) -> Record:
        return Record(run_id="r", experiment=exp, attempt="01", host="h", backend=exp, provenance={"gpu": [
            {"name": gpu, "compute_cap": "9.0"}]}, **extra)

    ok = {"bs1": {"output_throughput": 100.0, "samples": {"output_throughput": [99.0, 100.0, 101.0]}}}
    top = {"total_gpu_us": 10.0, "steps": 1, "kernels": 1,
           "top": [{"name": f"op{OSC0}", "gpu_us": 10.0, "share": 1.0, "calls": 1}]}
    records = [rec("base", "H200", status="ok", metrics=ok, profile=top),
               rec("evil", f"B200{OSC52_BEL}", status="ok", metrics=ok),
               rec("dead", "H200", status="crashed", verdict={"category": "oom", "key_line": "OOM"},
                   cannot_run=[f"needs {OSC0}"])]
    rows = compare.build_rows(records, metric="output_throughput", baseline="base")
    for width in (200, 60):
        buf = io.StringIO()
        print_comparison(Console(file=buf, force_terminal=False, width=width), rows, "output_throughput")
        assert inert(buf.getvalue(), multiline=True), repr(buf.getvalue())
    csv_text = tableformats.to_csv(rows)
    assert inert(csv_text.replace("\r\n", "\n"), multiline=True) and "B200\\x1b]52;c;" in csv_text
