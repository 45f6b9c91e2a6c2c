"""A key line (a crash's, a refusal's) shortened to fit under a table: the exception and its message kept,
a list of choices shortened first, cuts between words (pure)."""

from __future__ import annotations

import re

KEY_LINE_MAX = 120
_ERROR_NAME = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b")


def short_key_line(line: str, limit: int = KEY_LINE_MAX) -> str:
    """A key line of at most `limit` characters that keeps the exception and its message: what comes before
    the last exception name (a logger prefix, a path) goes first, then the end of the message; a line
    without an exception name loses the end of a list it holds (choices: the words before say what was
    wrong), then its middle. Cuts fall between words (the ellipsis set apart by spaces): only a word too
    long to matter whole (a path, a hash: over LONG_WORD characters) is ever cut."""
    if len(line) <= limit:
        return line
    names = list(_ERROR_NAME.finditer(line))
    if names:
        tail = line[names[-1].start():]
        return "…" + tail if len(tail) < limit else _cut_end(tail, limit)
    line = _shorten_list(line, limit)
    return line if len(line) <= limit else _cut_middle(line, limit)


LONG_WORD = 30
_LIST = re.compile(r"\(([^()]*?, [^()]*)\)")  # "(valid: triton, torch_native, …)"


def _in_word(text: str, at: int) -> tuple[int, int] | None:
    """The word that position `at` cuts (its start and end), or None when `at` falls between words."""
    if at <= 0 or at >= len(text) or text[at - 1] == " " or text[at] == " ":
        return None
    end = text.find(" ", at)
    return text.rfind(" ", 0, at) + 1, end if end >= 0 else len(text)


def _is_long(word: tuple[int, int] | None) -> bool:
    return word is not None and word[1] - word[0] > LONG_WORD


def _cut_end(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with "…": before the word the cut falls in (unless it is long)."""
    if _is_long(_in_word(text, limit - 1)):
        return text[:limit - 1] + "…"
    word = _in_word(text, limit - 2)
    at = limit - 2 if word is None or _is_long(word) else word[0]
    return text[:at].rstrip() + " …"


def _cut_middle(text: str, limit: int) -> str:
    """`text` in `limit` characters, its middle "…": the cuts before and after the words they fall in (a long
    word is cut instead)."""
    for room in (limit - 1, limit - 3):  # "…" inside a long word; " … " between words
        head, start = room // 2, len(text) - (room - room // 2)
        left_word, right_word = _in_word(text, head), _in_word(text, start)
        head = head if left_word is None or _is_long(left_word) else left_word[0]
        start = start if right_word is None or _is_long(right_word) else right_word[1]
        inside = _is_long(left_word) and _is_long(right_word)
        shown = f"{text[:head]}…{text[start:]}" if inside else f"{text[:head].rstrip()} … {text[start:].lstrip()}"
        if len(shown) <= limit:
            return shown
    return shown


def _shorten_list(line: str, limit: int) -> str:
    """`line` with its longest parenthesised list cut to its first items and "…", as far as `limit` needs."""
    found = max(_LIST.finditer(line), key=lambda m: len(m.group(1)), default=None)
    if found is None:
        return line
    items = found.group(1).split(", ")
    for keep in range(len(items) - 1, 0, -1):
        shorter = line[:found.start(1)] + ", ".join(items[:keep]) + ", …" + line[found.end(1):]
        if len(shorter) <= limit or keep == 1:
            return shorter
    return line
