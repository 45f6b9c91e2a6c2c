"""The real-target kit's scripts (real-target/*.py) as modules, for the tests that use them.

The folder's name has a hyphen (it is a folder of scripts, not a package), so they are loaded by path.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

KIT = Path(__file__).resolve().parents[2] / "real-target"


def load(name: str) -> ModuleType:
    """real-target/<name>.py, imported once as `real_target_<name>`."""
    module_name = f"real_target_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, KIT / f"{name}.py")
    assert spec and spec.loader, f"no kit script {name}.py in {KIT}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before exec: dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module
