"""Issue 35's "done when" for night against night: two simulated nights where one backend was made 20 % slower;
`harness compare TONIGHT --against LAST_NIGHT` flags exactly that backend as a regression in the terminal, and
`harness report … --against … --html` does on the page, as headless Chromium renders it."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.results.store import ResultsStore
from tests.integration.test_cli import chromium
from tests.support import nights as sim

pytestmark = pytest.mark.integration

SLOW = "sim-triton"


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def results(tmp_path) -> Path:
    store = ResultsStore(tmp_path / "results")
    sim.two_nights(store, slower=SLOW, factor=1.2)
    return store.root


def test_the_terminal_flags_exactly_the_slowed_backend(results):
    p = harness("compare", "night-b", "--against", "night-a", "--results-dir", str(results))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "B = night-b against A = night-a: regressions in 1 of 5 experiments"
    flagged = [x for x in lines if x.startswith("  ▼ ")]
    assert [x.split(":")[0] for x in flagged] == [f"  ▼ {SLOW} c1", f"  ▼ {SLOW} c8"]
    assert "only in B (added): sim-trtllm_mla" in p.stdout and "only in A (removed): sim-cutlass_mla" in p.stdout
    name = ""
    worse: dict[str, bool] = {}
    for cells in ([c.strip() for c in x.split("│")] for x in lines if "│" in x):  # the matrix (and its chunks)
        name = cells[0].split(" [")[0] or name
        worse[name] = worse.get(name, False) or any("▼" in c for c in cells[2:])
    assert {n for n, w in worse.items() if w} == {SLOW} and len(worse) == 5


class Against(HTMLParser):
    """The page's "against" section as rendered: the summary's items and each matrix line's experiment,
    whether the page marks it a regression, and what its cells say."""

    def __init__(self, text: str):
        super().__init__()
        self.summary: list[tuple[str, str]] = []  # (data-experiment, text)
        self.lines: list[tuple[str, str, list[str]]] = []  # (data-experiment, data-regression, cell texts)
        self._in: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "li" and "regression" in (a.get("class") or "").split():
            self.summary.append((a.get("data-experiment") or "", ""))
            self._in = "li"
        elif tag == "tr" and a.get("data-regression"):
            self.lines.append((a.get("data-experiment") or "", a["data-regression"] or "", []))
        elif tag == "td" and self.lines:
            self.lines[-1][2].append("")
            self._in = "td"

    def handle_endtag(self, tag):
        if tag in ("li", "td", "tr"):
            self._in = None

    def handle_data(self, data):
        if self._in == "li":
            self.summary[-1] = (self.summary[-1][0], self.summary[-1][1] + data)
        elif self._in == "td":
            self.lines[-1][2][-1] += data


@pytest.mark.skipif(chromium() is None, reason="no chromium on PATH: scripts/test installs it (apt-get install chromium)")
def test_the_page_flags_exactly_the_slowed_backend_in_a_real_browser(results, tmp_path):
    out = tmp_path / "page"
    p = harness("report", "night-b", "--against", "night-a", "--html", str(out), "--results-dir", str(results))
    assert p.returncode == 0, p.stdout + p.stderr
    page = out / "index.html"
    browser = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1366,1400"]
    dom = subprocess.run(browser + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    seen = Against(dom.stdout)
    assert [e for e, _ in seen.summary] == [SLOW, SLOW]  # its two bench cases
    assert all("▼" in text and "worse in 14 of 14 metrics" in text for _, text in seen.summary)
    marked = {e for e, regression, _ in seen.lines if regression == "yes"}
    assert marked == {SLOW}
    for exp, _, cells in seen.lines:  # the ▼ in the cells agrees: only the slowed backend's
        assert any("▼" in c for c in cells) == (exp == SLOW), (exp, cells)
    assert "regressions in 1 of 5 experiments" in dom.stdout
