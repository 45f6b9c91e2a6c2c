"""Text from a host, made safe to show: on a terminal, in a record's display fields, on the HTML page.

A host's text (a crash's fatal line, a log excerpt, an agent's or a remote command's error) may hold terminal
control sequences: OSC 52 sets the clipboard, OSC 0 the window title, CSI moves the cursor or clears the
screen, a bare `\\r` overwrites what was printed, C1 controls (`\\x9b` is a one-byte CSI) do the same, and bidi
overrides make a line read other than it is. `display_text` shows every such character escaped, the way
Python writes it (`\\x1b`, `\\x07`, `\\u202e`): a user debugging a log sees that something was there, and no
terminal acts on it. Colour (SGR) sequences are dropped: they carry no information. Raw logs fetched to the
results folder are evidence and stay byte-exact; this is only for what is displayed.

Pure, and idempotent: its output holds no control character, so a second pass changes nothing.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator

# Colour and style (SGR: CSI … m), by ESC [ or the one-byte C1 CSI: dropped, a log's colours say nothing.
_SGR = re.compile(r"(?:\x1b\[|\x9b)[0-9;:]*m")
# C0 controls but \t and \n (\n is allowed only where the text may span lines), DEL, C1 controls, the bidi
# embeddings/overrides (U+202A–U+202E) and isolates (U+2066–U+2069), and lone surrogates (undecodable bytes
# kept by surrogateescape: a strict UTF-8 stream cannot even write them).
_UNSAFE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def display_text(text: str, *, multiline: bool = False) -> str:
    """`text` with every control character shown escaped (colour sequences dropped). With `multiline`, line
    breaks stay (a CRLF becomes a plain newline); without it, a newline is shown as `\\n` too."""
    if multiline and "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if "\x1b" in text or "\x9b" in text:
        text = _SGR.sub("", text)
    return (_UNSAFE_TEXT if multiline else _UNSAFE_LINE).sub(_escaped, text)


def display_line(text: str) -> str:
    """One line of host text, safe to show (a key line, a hint)."""
    return display_text(text)


def display_lines(text: str) -> str:
    """Host text that may span lines, safe to show (an error message, a log excerpt)."""
    return display_text(text, multiline=True)


# The same, as pydantic field types for the fields meant for display that hold a host's words (a crash's fatal
# line, an agent's error): made safe when a record is made and again when an older one is read, so no terminal
# or page that shows them acts on them. Logs stay raw in their own files.
DisplayLine = Annotated[str, AfterValidator(display_line)]
DisplayText = Annotated[str, AfterValidator(display_lines)]


P = TypeVar("P")


def shown_safe(part: P) -> P:
    """A dataclass of a host's facts (the agent's report) with each of its strings made safe to show as one line,
    its nested dataclasses too; the same object when nothing needed it. Lists of strings (paths) stay as they
    are: they are data, never shown raw."""
    if not dataclasses.is_dataclass(part) or isinstance(part, type):
        return part
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(part):
        value = getattr(part, f.name)
        if isinstance(value, str):
            safe: Any = display_line(value)
        elif isinstance(value, list) and value and all(dataclasses.is_dataclass(v) for v in value):
            safe = [shown_safe(v) for v in value]
        else:
            safe = shown_safe(value)
        if safe != value:
            changes[f.name] = safe
    return dataclasses.replace(part, **changes) if changes else part
