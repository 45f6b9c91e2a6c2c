"""Reading a server log (pure but for the files): a file in bounded memory, whatever its size, each line's
message alone (what real logs wrap around SGLang's words removed), and the cheap first pass that finds the
lines holding an anchor. What the lines mean is classify.py's job."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from .signatures import LINE_PREFIX_PATTERN

_PREFIX = re.compile(LINE_PREFIX_PATTERN)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ray's log deduplication appends this to a line that several workers printed.
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")


def clean_line(raw: str) -> str:
    """SGLang's message alone: tqdm redraws collapsed, colours and container/rank prefixes removed."""
    line = raw.rstrip("\n").rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "[repeated " in line:
        line = _RAY_REPEAT.sub("", line)
    return _PREFIX.sub("", line.lstrip(), count=1).strip()


def line_starts(body: str, anchors: Iterable[str]) -> set[int]:
    """Where the lines of `body` (which ends with a newline) that hold any of `anchors` start (str.find runs
    at memory speed: a regex alternation would be 10x slower on a 100 MB log)."""
    starts: set[int] = set()
    for anchor in anchors:
        i = body.find(anchor)
        while i >= 0:
            starts.add(body.rfind("\n", 0, i) + 1)
            i = body.find(anchor, body.find("\n", i) + 1)  # body ends with "\n": always found
    return starts


def iter_file_chunks(path: Path, chunk: int = 4 << 20) -> Iterator[str]:
    with open(path, "rb") as f:
        while True:
            data = f.read(chunk)
            if not data:
                return
            yield data.decode("utf-8", errors="replace")


def iter_file_lines(path: Path, chunk: int = 1 << 20, max_line: int = 1 << 16) -> Iterator[str]:
    """Lines of a possibly huge file in bounded memory (overlong lines are cut at `max_line`)."""
    with open(path, "rb") as f:
        partial = b""
        while True:
            data = f.read(chunk)
            if not data:
                break
            data = partial + data
            pieces = data.split(b"\n")
            partial = pieces.pop()
            if len(partial) > max_line:
                partial = partial[-max_line:]
            for p in pieces:
                yield p[:max_line].decode("utf-8", errors="replace")
        if partial:
            yield partial.decode("utf-8", errors="replace")
