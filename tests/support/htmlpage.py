"""The report page as a reader sees it, parsed with the stdlib's html.parser (tests of harness/render/page.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class Page(HTMLParser):
    """What the page holds, element by element: the comparison table's rows (cell texts), inline SVGs,
    failure articles, every link and source, the CSS."""

    def __init__(self, text: str):
        super().__init__()
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self.svgs = 0
        self.charts: list[str] = []  # each <svg>: the class of the figure it is in ("plot", "pareto"; "" for none)
        self.failures: list[str] = []
        self.urls: list[str] = []
        self.css = ""
        self.text: list[str] = []
        self.feed(text)

    def _inside(self, tag: str, cls: str | None = None) -> bool:
        return any(t == tag and (cls is None or cls in (a.get("class") or "").split()) for t, a in self.stack)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("href", "src"):
            if a.get(k):
                self.urls.append(a[k] or "")
        if tag == "svg":
            self.svgs += 1
            figure = next((fa for t, fa in reversed(self.stack) if t == "figure"), None)
            self.charts.append((figure or {}).get("class") or "")
        if tag == "tr" and self._inside("table", "comparison") and self._inside("tbody"):
            self.rows.append([])
        if tag == "td" and self.rows and self._inside("table", "comparison"):
            self.rows[-1].append("")
        if tag == "article" and "failure" in (a.get("class") or ""):
            self.failures.append("")
        if tag not in ("meta", "br", "link", "img", "input", "path", "use", "rect", "line", "circle", "stop"):
            self.stack.append((tag, a))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if self._inside("style"):
            self.css += data
            return
        self.text.append(data)
        if self._inside("td") and self._inside("table", "comparison") and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data
        if self._inside("article", "failure") and self.failures:
            self.failures[-1] += data


def external(urls: list[str]) -> list[str]:
    """The links and sources that would leave the page's folder (another host, a script URL)."""
    return [u for u in urls if re.match(r"^(https?:)?//", u, re.I) or u.startswith(("data:text/html", "javascript:"))]
