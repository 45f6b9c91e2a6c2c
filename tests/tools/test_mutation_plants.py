"""scripts/mutation.py's planted bugs still find their line: each plant's text occurs exactly once in its file
(a module moved or a line retyped would otherwise make `mutation.py planted` fail only when someone runs it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT / "scripts"))  # mutation.py imports mutation_diff from its own folder
_spec = importlib.util.spec_from_file_location("mutation_script_plants", PROJECT / "scripts" / "mutation.py")
mutation = importlib.util.module_from_spec(_spec)
sys.modules["mutation_script_plants"] = mutation
_spec.loader.exec_module(mutation)


@pytest.mark.parametrize("plant", mutation.PLANTS, ids=lambda p: p.name)
def test_each_planted_bug_finds_its_line_exactly_once(plant):
    text = (PROJECT / plant.file).read_text()
    assert text.count(plant.find) == 1, f"{plant.file}: {plant.find!r} occurs {text.count(plant.find)} times"
    for killer in plant.killers:
        assert (PROJECT / killer.split("::")[0]).is_file(), killer
