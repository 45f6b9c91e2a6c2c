"""A diff's headers as `git apply` reads them, and every name they give, with its line.

Mirrors git's apply.c (find_header, parse_git_diff_header, parse_traditional_patch, parse_fragment):
a file's section starts at `diff --git` followed by at least one of git's header lines, or at a `---`
line directly followed by `+++` and `@@ -` (a plain unified diff); its hunks are read by their line
counts, so a removed line that starts with `-- ` is content; any other line is text git skips (a context
diff, `***`, git does not apply at all).

A name is kept as the patch writes it (git's C quoting decoded) and with every path git could make of
it, for the path rule to judge (patchpaths.py): without an option git strips the first component of
`diff --git`, `---` and `+++` names (-p1), but reads the rest of a run at -p0 once a plain diff names a
file without a `/`; `rename`/`copy` names are whole; an unquoted `---`/`+++` name ends at a tab, or
where a timestamp starts after a space. Standard library only: the controller reads patch sets with it,
the agent checks a spec with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
LINK_MODE = "120000"
_HUNK = re.compile(r"@@ -[0-9]+(?:,([0-9]+))? \+[0-9]+(?:,([0-9]+))? @@")
# git's header lines after `diff --git`, in its order; any other line ends the header ("@@ -" included)
_GIT_HEADER = ("--- ", "+++ ", "old mode ", "new mode ", "deleted file mode ", "new file mode ", "copy from ",
               "copy to ", "rename old ", "rename new ", "rename from ", "rename to ", "similarity index ",
               "dissimilarity index ", "index ")
_TO = ("copy to ", "rename new ", "rename to ")
_WHOLE = ("copy from ", "rename old ", "rename from ") + _TO
_SPACE = " \t\r\v\f"  # C's isspace on one line: a space or tab may sit inside a name, the others end it
# git's diff_timestamp_len: a date (2- or 4-digit year), a time (fractional seconds), a zone, at the very end
# of the line (with a CR at the end there is none); _before_stamp checks the tab or spaces before it
_STAMP = re.compile(r"(?:[0-9]{2})?[0-9]{2}-[0-9]{2}-[0-9]{2}(?: [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)?"
                    r"(?: [+-][0-9]{4}| [+-][0-9]{2}:[0-9]{2})?\Z")


def _unquote(body: str) -> Optional[str]:
    """The inside of a C-quoted name decoded as git's unquote_c_style does; None where git refuses it."""
    out, i = bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.extend(c.encode("utf-8", errors="surrogateescape"))
            i += 1
            continue
        nxt = body[i + 1:i + 2]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.match(r"[0-3][0-7][0-7]$", body[i + 1:i + 4]):
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
        else:
            return None
    return out.decode("utf-8", errors="surrogateescape")


def _quoted_prefix(s: str) -> Tuple[Optional[str], str]:
    """(the quoted name at the start of `s` decoded, the rest) — (None, s) when `s` does not start with one
    git can read on this line."""
    if not s.startswith('"'):
        return None, s
    i = 1
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == '"':
            name = _unquote(s[1:i])
            return (None, s) if name is None else (name, s[i + 1:])
        i += 1
    return None, s


def git_unquote(name: str) -> str:
    """A path as git writes it in a patch header: as is, or in double quotes with C escapes (octal bytes)."""
    quoted, rest = _quoted_prefix(name)
    return quoted if quoted is not None and not rest else name


def strip_one(name: str) -> str:
    """-p1: git drops the first component (`a/`, `b/` or anything else) of a name."""
    return name.split("/", 1)[1] if "/" in name else name


@dataclass(frozen=True)
class Name:
    """One name a header line gives: the line, the name as written, the path git makes of it, and every
    path it could make of it (as written first)."""

    line: int
    written: str
    path: str
    readings: Tuple[str, ...]
    quoted_badly: bool = False  # starts with `"` but is no quoted name git reads on its line


def _name(line: int, written: str, forms: Sequence[str], strip: bool, quoted_badly: bool = False) -> Name:
    readings: List[str] = []
    for form in [written, *forms]:
        for r in (form, strip_one(form)) if strip else (form,):
            if r and r not in readings:
                readings.append(r)
    return Name(line, written, strip_one(written) if strip else written, tuple(readings), quoted_badly)


def _before_stamp(value: str) -> Optional[str]:
    """The name before a timestamp git recognises (after one tab, or after spaces, all of them dropped)."""
    m = _STAMP.search(value)
    head = value[:m.start()] if m else ""
    if head.endswith("\t"):
        return head[:-1]
    return head.rstrip(" ") if head.endswith(" ") else None


def _header_name(line: int, value: str, whole: bool) -> Name:
    """A `---`/`+++` name (`whole`: a `rename`/`copy` name, which git neither strips nor ends at a tab or a
    timestamp). Unquoted, git's reading ends before a timestamp, else at a tab or a CR; the rule judges too
    what another tool would take (up to the first space) and the whole value."""
    quoted, _ = _quoted_prefix(value)
    if quoted is not None:
        return _name(line, quoted, [], strip=not whole)
    stamp = None if whole else _before_stamp(value)
    written = stamp if stamp is not None else re.split("[\r\v\f]" if whole else "[\t\r\v\f]", value)[0]
    return _name(line, written, [re.split(r"\s", value)[0], value.rstrip("\r")], strip=not whole,
                 quoted_badly=value.startswith('"'))


def _git_header_names(line: int, rest: str) -> List[Name]:
    """The names of `diff --git <a> <b>`: quoted, or the split where both sides are the same path (as
    written, or both stripped of their first component); none when git finds none either."""
    first, after = _quoted_prefix(rest)
    if first is not None:
        second, _ = _quoted_prefix(after.lstrip(_SPACE))
        pair = [first, second if second is not None else after.strip(_SPACE)]
    elif '"' in rest:
        second, _ = _quoted_prefix(rest[rest.index('"'):])
        pair = [rest[:rest.index('"')].strip(_SPACE)] + ([second] if second is not None else [])
    else:
        pair = next(([rest[:k], rest[k + 1:]] for k, c in enumerate(rest) if c in " \t" and
                     strip_one(rest[:k]) == strip_one(rest[k + 1:])), [])
    return [_name(line, w, [], strip=True) for w in pair if w]


@dataclass
class DiffFile:
    """One file's section of a diff: every name it gives (each one written: created, changed, renamed
    or copied to, or deleted by a rename), and whether it makes the new path a symbolic link."""

    headers: List[Name] = field(default_factory=list)
    new: Optional[str] = None
    link: bool = False
    deleted: bool = False  # the file is gone after the patch (`deleted file mode`, `+++ /dev/null`)
    plus: List[str] = field(default_factory=list)  # its hunks' added lines: a link's target
    hunks: int = 0

    @property
    def names(self) -> List[str]:
        """The paths git makes of its names (-p1)."""
        return [n.path for n in self.headers]

    def link_target(self) -> Optional[str]:
        """What the link points to, as the patch writes it; None when the patch does not say (no hunk)."""
        return "\n".join(self.plus) if self.hunks else None


def _is_dev_null(value: str) -> bool:
    return value.startswith("/dev/null") and (len(value) == 9 or value[9] in _SPACE)


def _bare(line: str) -> str:
    return line[:-1] if line.endswith("\r") else line


def _git_section(lines: List[str], start: int) -> Tuple[Optional[DiffFile], int]:
    """A `diff --git` header and the lines git reads as part of it; (None, next line) when no header line
    follows (git skips such a line). `/dev/null` is no file only on the side `new file mode` or `deleted
    file mode` says; elsewhere git reads it as the path `dev/null`."""
    f = DiffFile(headers=_git_header_names(start + 1, _bare(lines[start])[len("diff --git "):]))
    i, created = start + 1, False
    while i < len(lines):
        line = _bare(lines[i])
        key = next((k for k in _GIT_HEADER if line.startswith(k)), None)
        if key is None:
            break
        value = lines[i][len(key):]
        if key in ("--- ", "+++ ") and _is_dev_null(value) and (created if key == "--- " else f.deleted):
            pass
        elif key in ("--- ", "+++ ") or key in _WHOLE:
            f.headers.append(_header_name(i + 1, value, whole=key in _WHOLE))
            f.new = f.headers[-1].path if key == "+++ " or key in _TO else f.new
        elif key == "deleted file mode ":
            f.deleted = True
        elif key in ("new file mode ", "new mode "):
            created = created or key == "new file mode "
            f.link = value.strip() == LINK_MODE
        elif key == "index " and len(value.split()) == 2 and value.split()[-1] == LINK_MODE:
            f.link = True  # a tracked link given a new target
        i += 1
    if i == start + 1:
        return None, i
    if f.new is None and f.headers:
        f.new = f.headers[-1].path
    return f, i


def _plain_section(lines: List[str], start: int) -> DiffFile:
    """A plain diff's `---`/`+++` pair (`/dev/null` on the one side: a new or deleted file; on both, git
    creates the file `dev/null`)."""
    old, new = lines[start][4:], lines[start + 1][4:]
    f = DiffFile()
    if not _is_dev_null(old):
        f.headers.append(_header_name(start + 1, old, whole=False))
    if _is_dev_null(new) and not _is_dev_null(old):
        f.deleted = True
    else:
        f.headers.append(_header_name(start + 2, new, whole=False))
    f.new = f.headers[-1].path if f.headers else None
    return f


def _hunks(lines: List[str], i: int, f: DiffFile) -> int:
    """Read the hunks from line `i` by their counts, as git does; the index of the first line after them."""
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if not m:
            return i
        f.hunks += 1
        old, new = (int(g) if g is not None else 1 for g in m.groups())
        i += 1
        while (old > 0 or new > 0) and i < len(lines):
            tag = lines[i][:1]
            if tag in (" ", ""):
                old, new = old - 1, new - 1
            elif tag == "-":
                old -= 1
            elif tag == "+":
                new -= 1
                f.plus.append(_bare(lines[i])[1:])
            elif tag != "\\":
                return i  # git calls the patch corrupt and applies none of it
            i += 1
    return i


def diff_files(text: str) -> List[DiffFile]:
    """Every file section of a diff, in order, as `git apply` finds them."""
    lines = text.split("\n")
    out: List[DiffFile] = []
    i = 0
    while i < len(lines):
        found: Optional[DiffFile] = None
        if lines[i].startswith("diff --git "):
            found, i = _git_section(lines, i)
        elif lines[i].startswith("--- ") and i + 2 < len(lines) and lines[i + 1].startswith("+++ ") \
                and lines[i + 2].startswith("@@ -"):
            found, i = _plain_section(lines, i), i + 2
        else:
            i += 1
        if found is not None:
            out.append(found)
            i = _hunks(lines, i, found)
    return out
