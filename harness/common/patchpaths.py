"""Where a patch set writes, and the one rule for it: inside the work tree, outside `.git`, never through a
symbolic link.

Pure and stdlib-only: the controller checks a patch set with it when the set is read (before any host is
contacted), and the agent, which ships without the rest of the harness, decodes git's quoted names with it.
The agent checks the same rule again against the real tree (links it already has), see tree.py.

Names are read the way `git apply` (default -p1) reads them: `diff --git` headers, `---`/`+++` lines (first
component stripped), `rename from/to` and `copy from/to` (whole path), each possibly in git's C-quoted form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
LINK_MODE = "120000"
MAX_HOPS = 40  # links followed while resolving one target, as the kernel's limit: a loop ends here


def git_unquote(name: str) -> str:
    """A path as git writes it in a patch header: as is, or in double quotes with C escapes (octal bytes)."""
    if not (len(name) >= 2 and name[0] == name[-1] == '"'):
        return name
    out, body, i = bytearray(), name[1:-1], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                out.append(int(body[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(_C_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out.extend(c.encode())
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _quoted_prefix(s: str) -> Tuple[Optional[str], str]:
    """(the quoted name at the start of `s` decoded, the rest) — (None, s) when `s` does not start with one."""
    if not s.startswith('"'):
        return None, s
    i = 1
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == '"':
            return git_unquote(s[:i + 1]), s[i + 1:]
        i += 1
    return None, s


def _strip_one(name: str) -> str:
    """-p1: git drops the first component (`a/`, `b/` or anything else) of header names."""
    return name.split("/", 1)[1] if "/" in name else name


def is_dot_git(part: str) -> bool:
    """`.git` as a case-insensitive file system (or Windows, which drops trailing dots and spaces) sees it."""
    return part.rstrip(". ").lower() == ".git"


def path_problem(rel: str) -> Optional[str]:
    """Why `rel` may not be written by a patch set (None: it may): absolute, `..`, or inside `.git`."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or rel.startswith("/"):
        return "is not a path relative to the repo root"
    if ".." in parts:
        return "leaves the work tree ('..')"
    if any(is_dot_git(p) for p in parts):
        return "is inside .git/"
    return None


@dataclass
class DiffFile:
    """One file's section of a diff: every name it gives (each one written: created, changed, renamed
    or copied to, or deleted by a rename), and whether it makes the new path a symbolic link."""

    names: List[str] = field(default_factory=list)
    new: Optional[str] = None
    link: bool = False
    deleted: bool = False  # the file is gone after the patch (`deleted file mode`, `+++ /dev/null`)
    plus: List[str] = field(default_factory=list)  # its hunks' added lines: a link's target
    hunks: int = 0
    seen_old: bool = False

    def link_target(self) -> Optional[str]:
        """What the link points to, as the patch writes it; None when the patch does not say (no hunk)."""
        return "\n".join(self.plus) if self.hunks else None


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _git_header_names(rest: str) -> List[str]:
    """The two names of `diff --git <a> <b>`, as git finds them: quoted, or the split where both are equal."""
    first, after = _quoted_prefix(rest)
    if first is not None:
        second, _ = _quoted_prefix(after.lstrip(" "))
        return [_strip_one(first), _strip_one(second if second is not None else after.strip())]
    second, _ = _quoted_prefix(rest[rest.rfind(' "') + 1:] if ' "' in rest else "")
    if second is not None:
        return [_strip_one(rest[:rest.rfind(' "')]), _strip_one(second)]
    for i, c in enumerate(rest):
        if c == " " and _strip_one(rest[:i]) == _strip_one(rest[i + 1:]):
            return [_strip_one(rest[:i])]
    return []


def _header_name(value: str) -> List[str]:
    """A `---`/`+++` name: quoted, else up to a tab (git) — and up to a space too (what `patch` would take)."""
    quoted, _ = _quoted_prefix(value)
    if quoted is not None:
        return [_strip_one(quoted)]
    name = value.split("\t", 1)[0].rstrip()
    if name == "/dev/null":
        return []
    return sorted({_strip_one(name), _strip_one(name.split(" ", 1)[0])})


def _whole_name(value: str) -> str:
    quoted, _ = _quoted_prefix(value)
    return quoted if quoted is not None else value.rstrip()


def diff_files(text: str) -> List[DiffFile]:
    """Every file section of a unified diff, read line by line as git does (hunk lengths say where a hunk
    ends, so a removed line that starts with `-- ` is content, not a header)."""
    out: List[DiffFile] = []
    cur: Optional[DiffFile] = None
    old_left = new_left = 0
    for line in text.split("\n"):
        line = line[:-1] if line.endswith("\r") else line
        if old_left > 0 or new_left > 0:  # inside a hunk
            tag = line[:1]
            if tag in (" ", ""):
                old_left, new_left = old_left - 1, new_left - 1
            elif tag == "-":
                old_left -= 1
            elif tag == "+":
                new_left -= 1
                if cur is not None:
                    cur.plus.append(line[1:])
            continue
        if line.startswith("diff --git "):
            cur = DiffFile(names=_git_header_names(line[len("diff --git "):]))
            out.append(cur)
            continue
        if line.startswith(("--- ", "+++ ")) and (cur is None or cur.hunks or (cur.seen_old and line[0] == "-")):
            cur = DiffFile()  # a plain (non-git) diff's next file
            out.append(cur)
        if cur is None:
            continue
        _header_line(cur, line)
        m = _HUNK.match(line)
        if m:
            cur.hunks += 1
            old_left = int(m.group(1)) if m.group(1) is not None else 1
            new_left = int(m.group(2)) if m.group(2) is not None else 1
    return out


def _header_line(cur: DiffFile, line: str) -> None:
    if line.startswith("--- "):
        cur.seen_old = True
        cur.names += _header_name(line[4:])
    elif line.startswith("+++ "):
        cur.deleted = cur.deleted or line[4:].strip() == "/dev/null"
        names = _header_name(line[4:])
        cur.names += names
        cur.new = names[0] if names else cur.new
    else:
        for key in ("rename from ", "rename to ", "copy from ", "copy to "):
            if line.startswith(key):
                cur.names.append(_whole_name(line[len(key):]))
                if key.endswith("to "):
                    cur.new = cur.names[-1]
        if line.startswith("deleted file mode "):
            cur.deleted = True
        if line.startswith(("new file mode ", "new mode ")):
            cur.link = line.split()[-1] == LINK_MODE
        elif line.startswith("index ") and len(line.split()) == 3 and line.split()[-1] == LINK_MODE:
            cur.link = True  # a tracked link given a new target
    if cur.new is None and cur.names:
        cur.new = cur.names[-1]


@dataclass(frozen=True)
class Refusal:
    source: str  # the patch file's name, or `files/<path>`
    path: str
    reason: str


def _parts(rel: str) -> List[str]:
    return [p for p in rel.split("/") if p not in ("", ".")]


def _key(parts: List[str]) -> Tuple[str, ...]:
    return tuple(p.lower() for p in parts)  # as a case-insensitive file system matches names


def _resolve(link_parts: List[str], target: str, links: Dict[Tuple[str, ...], Optional[str]]) -> Optional[str]:
    """Why the link at `link_parts` pointing to `target` points where nothing may be written (None: it
    points inside the work tree, outside .git), following the set's own links along the way."""
    out: List[str] = []
    queue = link_parts[:-1] + target.split("/")
    hops = 0
    while queue:
        part = queue.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return "points outside the work tree"
            out.pop()
            continue
        out.append(part)
        if is_dot_git(part):
            return "points into .git/"
        if _key(out) not in links:
            continue
        nxt = links[_key(out)]
        if nxt is None:
            return "points through a link whose target the patch does not show"
        hops += 1
        if hops > MAX_HOPS:
            return "is a loop of links"
        if nxt.startswith("/"):
            return "points outside the work tree"
        out.pop()
        queue = nxt.split("/") + queue
    return None


def patch_set_refusals(patches: List[Tuple[str, str]], files: List[str]) -> List[Refusal]:
    """Every path a patch set (its patches in order, then its files/ entries) would write that breaks the
    rule: inside the work tree, outside .git, never through a symbolic link the set itself creates — and
    no link it creates may point outside the tree or into .git (git refuses writes through links it finds
    in the tree; files/ entries are written by the agent, which must not follow them either)."""
    out: List[Refusal] = []
    sections = [(name, f) for name, text in patches for f in diff_files(text)]
    links: Dict[Tuple[str, ...], Optional[str]] = {}
    link_paths: Dict[Tuple[str, ...], Tuple[str, str]] = {}
    for name, f in sections:
        for path in f.names:
            bad = path_problem(path)
            if bad:
                out.append(Refusal(name, path, bad))
        if f.link and f.new and not path_problem(f.new):
            links[_key(_parts(f.new))] = f.link_target()
            link_paths[_key(_parts(f.new))] = (name, f.new)
    for key, (name, path) in link_paths.items():
        target = links[key]
        if target is None:
            problem: Optional[str] = "is a symbolic link whose target the patch does not show"
        elif target.startswith("/"):
            problem = "is a symbolic link to an absolute path (%s), outside the work tree" % target
        else:
            problem = _resolve(_parts(path), target, links)
            problem = problem and "is a symbolic link that %s (%s)" % (problem, target)
        if problem:
            out.append(Refusal(name, path, problem))
    written = [(name, p, False) for name, f in sections for p in f.names] + \
        [("files/" + p, p, True) for p in files]
    for source, path, whole_file in written:
        bad = path_problem(path)
        if bad and whole_file:
            out.append(Refusal(source, path, bad))  # a patch's names were checked above
        parts = _parts(path)
        through = [k for k in range(1, len(parts) + (1 if whole_file else 0)) if _key(parts[:k]) in links]
        if through and not path_problem(path):
            via = "/".join(parts[:through[0]])
            out.append(Refusal(source, path, "is written through the symbolic link %s that the patch set creates"
                               % via))
    return _unique(out)


def _unique(refusals: List[Refusal]) -> List[Refusal]:
    seen, out = set(), []
    for r in refusals:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out
