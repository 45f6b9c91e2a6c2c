"""benchmarks/real_size.py on the committed live records (benchmarks/results/real-size-runs/, one H200,
2026-12-02): each column comes from the newest attempt that measured it, the answers column judges each row
against stock at the large pool, and the negative control is flagged."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from harness.results.store import ResultsStore

PROJECT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("real_size", PROJECT / "benchmarks" / "real_size.py")
assert _spec is not None and _spec.loader is not None
real_size = importlib.util.module_from_spec(_spec)
sys.modules["real_size"] = real_size
_spec.loader.exec_module(real_size)

RUNS = PROJECT / "benchmarks" / "results" / "real-size-runs"


def _rows() -> dict[tuple[str, bool], object]:
    return {(r.backend, r.control): r for r in real_size.build_rows(ResultsStore(RUNS))}


def test_stock_is_the_reference_and_the_wrong_kv_scale_is_flagged():
    rows = _rows()
    assert rows[("flashinfer-mla", False)].answers == "ref"
    control = rows[("flashinfer-mla", True)].answers
    assert control.startswith("✗"), control


def test_a_column_comes_from_the_newest_attempt_that_measured_it():
    stock = _rows()[("flashinfer-mla", False)]
    # The newest stock attempt only answered (no bench case); its ITL comes from the one its budget stopped.
    assert stock.record.metrics == {}
    assert stock.cells["ITL bs8 ms"].values and "aborted" in stock.sources["ITL bs8 ms"]
    assert stock.cells["ITL bs1 ms"].values == [] and "ITL bs1 ms" not in stock.sources


def test_the_page_has_a_row_per_backend_and_the_targets():
    text = real_size.render(real_size.build_rows(ResultsStore(RUNS)))
    assert "| custom-fp8-mla | 0.8 |" in text and "control: wrong KV scale" in text
    assert "TTFT 1K hit ms custom pool 0.8 / 0.4" in text


def test_answers_made_on_other_dummy_weights_are_not_judged(tmp_path: Path):
    import json
    import shutil

    for run in RUNS.iterdir():
        if run.is_dir():
            shutil.copytree(run, tmp_path / run.name)
    custom = next(r for r in real_size.build_rows(ResultsStore(tmp_path))
                  if r.backend == "custom-fp8-mla" and r.pool == real_size.LARGE)
    assert custom.answers.startswith(("✓", "✗"))  # judged: same weights as the reference
    record = custom.folder / "record.json"
    doc = json.loads(record.read_text())
    doc["provenance"]["patch_sets"]["dummy_weights_scaled"] = "0" * 64  # another version of the weights
    record.write_text(json.dumps(doc))
    custom = next(r for r in real_size.build_rows(ResultsStore(tmp_path))
                  if r.backend == "custom-fp8-mla" and r.pool == real_size.LARGE)
    assert custom.answers == "other weights"
