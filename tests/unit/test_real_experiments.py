"""The live-GPU experiments measure enough to decide: every bench case of every experiment under
experiments/real-h200 runs at least compare.MIN_SAMPLES times per attempt, the fewest at which the two-sided
Mann-Whitney test can reach p < 0.05 (else the table can only print "?"). A case opts out only by saying
`repeats: 1` itself, for what is not a number (greedy texts, the negative control). Each file also loads
through the harness's own validation, so a key the config no longer knows fails here, not on the GPU; and every live
sweep's attempt budget fits a fresh machine's first server start."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.analysis.compare import MIN_SAMPLES
from harness.experiments.files import read_experiment_file

ROOT = Path(__file__).resolve().parents[2] / "experiments" / "real-h200"
EXPERIMENT_FILES = sorted(p for p in ROOT.rglob("*.yaml") if "backend" in yaml.safe_load(p.read_text()))


def test_the_live_experiments_are_found() -> None:
    assert len(EXPERIMENT_FILES) >= 10, EXPERIMENT_FILES


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_measured_case_has_enough_repeats_for_the_test_to_decide(path: Path) -> None:
    exp = read_experiment_file(path).experiment
    too_few = {case.name: case.repeats or exp.repeats for case in exp.bench
               if case.repeats != 1 and (case.repeats or exp.repeats) < MIN_SAMPLES}
    assert not too_few, f"{path.name}: cases measured fewer than {MIN_SAMPLES} times: {too_few}"


# A fresh GPU machine's first server start compiles FlashInfer's, Triton's and Inductor's kernels and loads the
# model: DeepSeek-V2-Lite was ready only after 277 s (answers-v2-lite.yaml's 300 s budget aborted it), against
# ~90 s with warm caches. Every live sweep's attempt budget leaves that start and a minute of work.
FRESH_HOST_READY_S = 277
SWEEP_FILES = sorted(p for p in ROOT.rglob("*.yaml") if "budget" in yaml.safe_load(p.read_text()))


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_live_sweep_budget_fits_a_fresh_machines_first_start(path: Path) -> None:
    attempt = (yaml.safe_load(path.read_text())["budget"] or {}).get("attempt")
    assert attempt is None or attempt >= FRESH_HOST_READY_S + 60, f"{path.name}: attempt budget {attempt} s"
