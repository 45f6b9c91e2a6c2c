"""The README is two screens that link one docs/ page per concept: every relative link must lead to a file
of the repo (a page moved or renamed would leave a newcomer at a dead end), and every page must be linked."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_in_the_readme_and_docs_leads_to_a_file():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    dead = [(p.relative_to(ROOT).as_posix(), t) for p in pages for t in relative_links(p) if not (p.parent / t).exists()]
    assert not dead, dead


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t).resolve() for t in relative_links(ROOT / "README.md")}
    generated = {"mutation-planted.md", "mutation-report.md"}  # written by scripts/mutation.py, named in testing.md
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md") if p.name not in generated}
    assert pages <= linked, sorted(p.name for p in pages - linked)


def test_the_readme_fits_on_two_screens():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 120
