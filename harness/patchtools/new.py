"""`harness patch new`: a local SGLang checkout's changes → a new patch set folder under `patches/`.

The pure parts (names, targets, file names, patchset.yaml and README texts) are plain functions; git is
read in gitcapture.py; the folder is written last, through a staging folder that is loaded with the
harness's own loader before it takes its name, so an error anywhere leaves `patches/` as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from ..common.targetid import read_server_version
from ..errors import ConfigError
from ..experiments.configerrors import SAFE_NAME
from ..experiments.patchsets import TARGET_ID, PatchSet, diff_paths, load_patch_set
from .gitcapture import capture_range, capture_uncommitted, open_checkout

# --------------------------------------------------------------------------- pure parts


def check_name(name: str) -> None:
    if not re.match(SAFE_NAME, name):
        raise ConfigError(f"patch set name {name!r} is not allowed",
                          hint="letters, digits, '.', '_' and '-', starting with a letter or digit "
                               "(at most 128), e.g. my_fp8_fix")


def parse_target(text: str) -> str:
    """`--applies-to`: 'sglang==0.5.23', or just '0.5.23'."""
    target = text if "==" in text or text == "harness-sim" else f"sglang=={text}"
    if not re.match(TARGET_ID, target):
        raise ConfigError(f"--applies-to {text!r} is not a target", hint="write sglang==<version>, e.g. sglang==0.5.23")
    return target


_PROJECT_TABLE = re.compile(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", re.MULTILINE | re.DOTALL)
_VERSION_KEY = re.compile(r"""^version\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def pyproject_version(text: str) -> str | None:
    """`version = "..."` of the `[project]` table (a regex: tomllib is not in Python 3.10)."""
    table = _PROJECT_TABLE.search(text)
    m = _VERSION_KEY.search(table.group(1)) if table else None
    return m.group(1) if m else None


def slug(subject: str) -> str:
    """A commit subject as a file name part, the way `git format-patch` names its files."""
    return re.sub(r"[^A-Za-z0-9_]+", "-", subject).strip("-")[:52].rstrip("-") or "change"


def patch_file_names(labels: Sequence[str], name: str) -> list[str]:
    """0001-<subject>.patch, ... in apply order (the loader sorts by name); the set's name for a diff
    that is no commit."""
    return [f"{i:04d}-{slug(label or name)}.patch" for i, label in enumerate(labels, 1)]


def meta_text(description: str, applies_to: str) -> bytes:
    return yaml.safe_dump({"description": description, "applies_to": applies_to}, sort_keys=False,
                          allow_unicode=True, width=1000).encode()


def readme_text(name: str, description: str, applies_to: str, source: str, base: str,
                patch_names: Sequence[str]) -> bytes:
    version = applies_to.split("==", 1)[-1]
    files = "\n".join(f"- `{p}`" for p in patch_names)
    return (f"# {name}\n\n{description}\n\n"
            f"Patch set for **SGLang {version}** (`applies_to: {applies_to}`), made with `harness patch new` "
            f"from {source} (base commit `{base[:12]}`):\n\n{files}\n\n"
            "## The change\n\nTODO: what it changes, why, and what to measure.\n\n"
            "## Check it\n\n"
            f"    harness patch check {name} --against /path/to/sglang-{version}\n").encode()


def undecodable(diff: bytes) -> list[str]:
    """Files whose diff is not UTF-8 (patch sets are read as UTF-8 text): their `diff --git` lines."""
    bad = []
    for part in re.split(rb"(?m)^(?=diff --git )", diff):
        try:
            part.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(part.split(b"\n", 1)[0].decode("utf-8", errors="replace"))
    return bad


def first_shared_path(diffs: Sequence[tuple[str, str]]) -> tuple[str, str, str] | None:
    """(path, earlier label, later label) for the first path two of the (label, diff text) pairs change.

    The agent checks a set's patch files in one `git apply --check`, which reads every file against the
    tree as it is, not as the earlier files leave it: a path two files change is refused on the host."""
    seen: dict[str, str] = {}
    for label, text in diffs:
        paths = diff_paths(text)
        for path in sorted(paths):
            if path in seen:
                return path, seen[path], label
        seen.update({path: label for path in paths})
    return None


# --------------------------------------------------------------------------- reading the checkout


def checkout_target(checkout: Path) -> str | None:
    """The SGLang release the checkout holds: its version.py (what the agent reads on a host; the simulated
    target claims one too), else the version in python/pyproject.toml's metadata."""
    version = read_server_version(str(checkout))
    if version and re.match(TARGET_ID, f"sglang=={version}"):
        return f"sglang=={version}"
    try:
        version = pyproject_version((checkout / "python" / "pyproject.toml").read_text())
    except (OSError, UnicodeDecodeError):
        return None
    return f"sglang=={version}" if version and re.match(TARGET_ID, f"sglang=={version}") else None


# --------------------------------------------------------------------------- the whole command


def make_patch_set(name: str, checkout: Path, patches_dir: Path, *, commit_range: str | None = None,
                   squash: bool = False, description: str | None = None, applies_to: str | None = None,
                   force: bool = False) -> PatchSet:
    """Capture `checkout`'s changes as patch set `name` in `patches_dir`; return it as the harness loads it."""
    check_name(name)
    target = parse_target(applies_to) if applies_to else None
    if (patches_dir / name).exists() and not force:
        raise ConfigError(f"patch set {name!r} already exists ({patches_dir / name})",
                          hint="choose another name, or pass --force to replace it")
    if squash and not commit_range:
        raise ConfigError("--squash goes with --range A..B", hint="uncommitted changes are one patch file already")
    repo = open_checkout(checkout)
    capture = capture_range(repo, commit_range, squash=squash) if commit_range else capture_uncommitted(repo)
    if not capture.diffs:
        raise ConfigError(f"{checkout}: no changes to capture ({capture.source})",
                          hint="edit the checkout first (uncommitted changes are taken, untracked files "
                               "included), or pass --range A..B for commits")
    bad = [line for d in capture.diffs for line in undecodable(d.diff)]
    if bad:
        raise ConfigError(f"{checkout}: changes that are not UTF-8 text: {'; '.join(bad)}",
                          hint="mark such files binary in .gitattributes (`<path> binary`) and run again")
    names = patch_file_names([d.label for d in capture.diffs], name)
    shared = first_shared_path([(n, d.diff.decode()) for n, d in zip(names, capture.diffs)])
    if shared:
        path, first, later = shared
        raise ConfigError(f"{first} and {later} both change {path}: the harness applies a set's patch files "
                          "together, each to the unpatched tree, so the host would refuse the second",
                          hint="pass --squash for one patch file from A to B, or squash those commits")
    target = target or checkout_target(checkout)
    if target is None:
        raise ConfigError(f"{checkout}: cannot read SGLang's version (python/sglang/version.py `__version__`, "
                          "or `version` in python/pyproject.toml)",
                          hint="say which SGLang the patches are for: --applies-to sglang==<version>")
    if description is None:
        description = capture.diffs[0].label if len(capture.diffs) == 1 and capture.diffs[0].label else \
            f"{name}: {capture.source} of {checkout.resolve().name}"
    contents = {n: d.diff for n, d in zip(names, capture.diffs)}
    contents["patchset.yaml"] = meta_text(description, target)
    contents["README.md"] = readme_text(name, description, target, capture.source, capture.base, names)
    return write_patch_set(patches_dir, name, contents)


def write_patch_set(patches_dir: Path, name: str, contents: dict[str, bytes]) -> PatchSet:
    """Write the folder beside its final place, load it as the agent's runs will, then move it in
    (replacing an old one only once the new one loads)."""
    made_dir = not patches_dir.exists()
    patches_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.new-", dir=patches_dir))
    try:
        (staging / name).mkdir()
        for rel, data in contents.items():
            (staging / name / rel).write_bytes(data)
        load_patch_set(staging, name)  # a ConfigError here names the problem before anything is replaced
        final = patches_dir / name
        if final.exists():
            os.rename(final, staging / "replaced")
        os.rename(staging / name, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if made_dir:
            shutil.rmtree(patches_dir, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return load_patch_set(patches_dir, name)
