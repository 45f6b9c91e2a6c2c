"""Where a patch set writes, and the one rule for it: inside the work tree, outside `.git`, never through a
symbolic link.

Pure and stdlib-only: the controller checks a patch set with it when the set is read (before any host is
contacted), and the agent, which ships without the rest of the harness, checks a spec's names with it
before git reads them. The agent checks the rule again against the real tree (links it already has), see
tree.py. The names are every name a header gives, as diffheaders.py reads them the way `git apply` does;
each is judged as written and as git strips it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .diffheaders import Name, diff_files

MAX_HOPS = 40  # links followed while resolving one target, as the kernel's limit: a loop ends here


def is_dot_git(part: str) -> bool:
    """`.git` as a case-insensitive file system (or Windows, which drops trailing dots and spaces) sees it."""
    return part.rstrip(". ").lower() == ".git"


def path_problem(rel: str) -> Optional[str]:
    """Why `rel` may not be written by a patch set (None: it may): absolute (`/`, `\\`, a drive letter), `..`,
    or inside `.git` — a backslash counted as a separator too, as git on Windows reads it."""
    if rel.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", rel):
        return "is an absolute path"
    parts = [p for p in re.split(r"[/\\]", rel) if p not in ("", ".")]
    if not parts:
        return "is not a path relative to the repo root"
    if ".." in parts:
        return "leaves the work tree ('..')"
    if any(is_dot_git(p) for p in parts):
        return "is inside .git/"
    return None


def name_problem(name: Name) -> Optional[str]:
    """Why a header's name breaks the rule (None: it does not), judged on every path git could make of it:
    as written (`+++ /abs` is absolute, though git would strip it to `abs`) and as git strips it."""
    if name.quoted_badly:
        return "is quoted as git never quotes a name (no closing quote on its line, or an escape git does not know)"
    for reading in name.readings:
        bad = path_problem(reading)
        if bad:
            return bad if reading == name.written else "is read by git as %r, which %s" % (reading, bad)
    return None


@dataclass(frozen=True)
class Refusal:
    source: str  # the patch file's name, or `files/<path>`
    path: str  # as the patch writes it
    reason: str
    line: Optional[int] = None  # the patch file's line that names it


def name_refusals(source: str, text: str) -> List[Refusal]:
    """Every name the headers of one patch give that breaks the rule, with its line."""
    return [Refusal(source, n.written, bad, n.line) for f in diff_files(text) for n in f.headers
            for bad in [name_problem(n)] if bad]


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
    for name, text in patches:
        out += name_refusals(name, text)
    for name, f in sections:
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
