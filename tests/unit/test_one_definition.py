"""Types declared once: the experiment's `timeouts:` take their names and defaults from the wire's Timeouts, and
the log reader's Verdict is the record's verdict, so neither pair can drift apart."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import ValidationError

from harness.common.protocol import Timeouts as WireTimeouts
from harness.experiments.config import Timeouts
from harness.results.schemas import Record
from harness.triage.classify import Verdict, triage_text


def test_the_yaml_timeouts_are_the_wire_timeouts_key_for_key_with_the_same_defaults():
    wire = {f.name: f.default for f in dataclasses.fields(WireTimeouts)}
    yaml = {name: info.default for name, info in Timeouts.model_fields.items()}
    assert list(yaml) == list(wire)
    assert yaml == wire
    assert WireTimeouts(**Timeouts().model_dump()) == WireTimeouts()  # the one conversion, spec.py's


def _record(verdict: dict[str, object] | Verdict) -> Record:
    return Record(run_id="r", experiment="e", attempt="01", host="h", status="crashed", verdict=verdict)


def test_a_triage_verdict_is_kept_by_the_record_with_every_field():
    v = triage_text("[2025-11-01 10:00:04 TP0] torch.OutOfMemoryError: CUDA out of memory.\n", exit_code=1)
    rec = _record(v.to_dict())
    assert rec.verdict == v
    assert list(json.loads(rec.to_json())["verdict"]) == ["verdict", "category", "key_line", "phase", "hint"]


def test_a_hang_verdict_has_no_verdict_key_in_the_record_as_before():
    hang = {"category": "hung", "key_line": "Memory pool end.", "phase": "kv-cache", "hint": "h"}
    written = json.loads(_record(hang).to_json())["verdict"]
    assert written == hang


def test_positional_and_named_construction_agree_and_unknown_keys_are_refused():
    assert Verdict("crash", "oom", "x", "load-weights", None) == Verdict(
        verdict="crash", category="oom", key_line="x", phase="load-weights", hint=None)
    with pytest.raises(ValidationError):
        Verdict(category="oom", surprise=1)
    with pytest.raises(ValidationError):
        Verdict(verdict="crash")  # a verdict always names its category


def test_a_verdicts_display_lines_are_shown_escaped():
    assert Verdict(category="hung", key_line="a\x1b]52;c;evil\x07b").key_line == "a\\x1b]52;c;evil\\x07b"
