"""The record's format across the change that made its parts the agent's own dataclasses (issue #46): records
written before read back byte for byte — every committed one, and a fixture with every part set that the
previous format wrote — and `make_record` writes that fixture again from the same final report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.common.protocol import CaseFacts, RevertReport, StackFacts, StopReport
from harness.results.metrics import CaseSummary
from harness.results.schemas import Record

from . import every_part

PROJECT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((PROJECT / "benchmarks" / "results").rglob("record.json"))
# Written before `server.stop` left out the facts that did not apply (its null `signal` is no longer written).
OLDER = {"real-h200-gpu-tests/real-fp8-e5m2-crash/01/record.json"}


def test_there_are_committed_records_to_read():
    assert len(COMMITTED) >= 50


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.relative_to(PROJECT / "benchmarks" / "results").as_posix())
def test_a_committed_record_reads_back_byte_for_byte(path):
    text = path.read_text()
    back = Record.model_validate_json(text).to_json()
    if path.relative_to(PROJECT / "benchmarks" / "results").as_posix() in OLDER:
        old, new = json.loads(text), json.loads(back)
        old["server"]["stop"] = {k: v for k, v in old["server"]["stop"].items() if v is not None}
        assert new == old
    else:
        assert back == text


def test_the_fixture_with_every_part_reads_back_byte_for_byte():
    text = every_part.FIXTURE.read_text()
    assert Record.model_validate_json(text).to_json() == text


def test_a_record_made_of_every_part_is_what_the_previous_format_wrote(tmp_path):
    assert every_part.make(tmp_path).to_json() == every_part.FIXTURE.read_text()


def test_the_record_keeps_the_agents_dataclasses_as_its_parts(tmp_path):
    rec = every_part.make(tmp_path)
    final = every_part.final()
    assert isinstance(rec.revert, RevertReport) and rec.revert == final.revert
    assert isinstance(rec.server.stop, StopReport) and rec.server.stop == final.server.stop
    assert isinstance(rec.bench_cases["c1"], CaseFacts) and rec.bench_cases["c1"].prefill == final.bench.cases[0].prefill
    assert isinstance(rec.metrics["c1"], CaseSummary) and rec.metrics["c1"].samples["completed"] == [2, 2]
    # every string from the host made safe to show, in a copy: the agent's report is left as it came
    stack = rec.provenance.stack
    assert isinstance(stack, StackFacts) and stack.driver == "570.1\\x1b[2J"
    assert final.preflight.stack.driver == "570.1\x1b[2J"
    assert dataclasses.replace(stack, driver=final.preflight.stack.driver) == final.preflight.stack
    read = Record.model_validate_json(every_part.FIXTURE.read_text())
    assert read.bench_cases["c1"].name == "" and read.bench_cases["c1"].warmup_file is None  # never written


def test_an_unknown_key_in_a_part_is_refused():
    data = json.loads(every_part.FIXTURE.read_text())
    data["revert"]["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        Record.model_validate(data)
    data = json.loads(every_part.FIXTURE.read_text())
    data["metrics"]["c1"]["p50_whatever"] = 1
    with pytest.raises(ValueError, match="p50_whatever"):
        Record.model_validate(data)
