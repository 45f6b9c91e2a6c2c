"""`harness validate --against` a real SGLang 0.5.23 checkout: the seed box's experiments and every
patch set they name apply and compile, without touching the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import tree_snapshot

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_glm5_experiments_validate_against_sglang_0523(sglang_repo):
    before = tree_snapshot(sglang_repo)
    files = sorted(str(p) for p in (ROOT / "experiments" / "glm5").glob("*.yaml"))
    p = subprocess.run([sys.executable, "-m", "harness", "validate", *files, "--against", str(sglang_repo)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("flashinfer_mla_gather_cast", "custom_fp8_mla"):
        assert f"patch set {name} applies to {sglang_repo} and compiles" in p.stdout
    assert tree_snapshot(sglang_repo) == before
