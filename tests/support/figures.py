"""Figures for docs/reliability.md: each fault test says what it measured; scripts/fault_report.py collects
them (HARNESS_FAULT_REPORT=path makes the test session write them there, appended across modules)."""

from __future__ import annotations

import json
import os
from pathlib import Path

FIGURES: list[dict] = []


def figure(fault: str, *, survived: bool, time_to_clean_s: float | None, lost: int, note: str = "") -> None:
    FIGURES.append({"fault": fault, "survived": survived, "time_to_clean_s": time_to_clean_s, "lost": lost,
                    "note": note})


def write_figures() -> None:
    path = os.environ.get("HARNESS_FAULT_REPORT")
    if not path or not FIGURES:
        return
    p = Path(path)
    old = json.loads(p.read_text()) if p.exists() else []
    p.write_text(json.dumps(old + FIGURES, indent=1) + "\n")
    FIGURES.clear()
