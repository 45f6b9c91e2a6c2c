"""What SGLang a source tree holds, read from its files (importing SGLang takes seconds and a GPU stack).

Both halves name a target the same way: the agent to pick a patch set's variant on the host, the controller
to check a patch set against a local checkout (`harness patch check`, `validate --against`, `patch new`).
"""

from __future__ import annotations

import os
import re
from typing import Optional, Tuple

VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)""", re.MULTILINE)


def read_server_version(repo: str) -> Optional[str]:
    """SGLang's version from its source: _version.py (written by the build) first, then version.py;
    only module-level assignments count (version.py also holds a '0.0.0.dev0' fallback)."""
    for rel in ("python/sglang/_version.py", "python/sglang/version.py"):
        try:
            with open(os.path.join(repo, rel)) as f:
                m = VERSION_RE.search(f.read())
            if m:
                return m.group(1)
        except OSError:
            continue
    return None


def target_identity(repo: str) -> Optional[str]:
    """What a patch set's `applies_to` (and its variants) name: 'harness-sim' for the simulated target,
    else 'sglang==<version>' read from the source; None when no version is found."""
    if os.path.isdir(os.path.join(repo, "python", "sglang", "_sim")):
        return "harness-sim"
    version = read_server_version(repo)
    return "sglang==%s" % version if version else None


def target_names(repo: str) -> Tuple[str, ...]:
    """Every name a tree answers to in a patch set's `applies_to`: its identity, and for the simulated target
    also the release its version.py claims (`harness patch new` names a set after that release, as it does
    for a real checkout). Variants are picked by the identity alone (`target_identity`)."""
    ident = target_identity(repo)
    version = read_server_version(repo)
    claimed = "sglang==%s" % version if version else None
    return tuple(n for n in dict.fromkeys((ident, claimed)) if n)
