"""Fixtures for the upstream tests: SGLang's real source as a git checkout, one fresh copy per test."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.experiments.config import HostConfig
from tests.conftest import tree_snapshot
from tests.upstream.sglang_source import SKIP_ENV, FetchError, copy_repo, fetch_wheel, lay_out


@dataclass(frozen=True)
class Template:
    repo: Path
    snapshot: dict  # tree_snapshot(repo): every file but .git/, mode + sha256


@pytest.fixture(scope="session")
def sglang_template(tmp_path_factory) -> Template:
    """SGLang 0.5.23 from PyPI under python/ in a one-commit repo; never changed by a test."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1")
    try:
        wheel, problem = fetch_wheel(), None
    except FetchError as exc:
        wheel, problem = None, str(exc)
    if problem:  # CI reaches PyPI: a skip here would hide a real problem, so it fails, saying why
        pytest.fail(problem, pytrace=False)
    repo = lay_out(wheel, tmp_path_factory.mktemp("sglang-template") / "sglang")
    yield Template(repo, tree_snapshot(repo))
    shutil.rmtree(repo, ignore_errors=True)  # 130 MB of source: not left for pytest's tmp retention


@pytest.fixture
def sglang_repo(sglang_template, tmp_path) -> Path:
    """A private copy of the template, so a test that breaks its tree breaks nothing else."""
    repo = copy_repo(sglang_template.repo, tmp_path / "sglang")
    yield repo
    shutil.rmtree(repo, ignore_errors=True)


@pytest.fixture
def upstream_host(sshd, sglang_repo, tmp_path) -> HostConfig:
    """The copy, reached through the test sshd, with this Python as the host's."""
    return HostConfig(**sshd.host_entry(), repo=str(sglang_repo), python=sys.executable,
                      workdir=str(tmp_path / "work"))
