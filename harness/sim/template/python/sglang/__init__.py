"""SGLang (simulated target for the experiment harness; see sglang/_sim)."""

from sglang.version import __version__  # noqa: F401
