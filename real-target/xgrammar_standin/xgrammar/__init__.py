"""A stand-in for xgrammar, for serving SGLang 0.5.16 with `--grammar-backend none`.

The real xgrammar wheel is 44 MB; on the serving path SGLang 0.5.16 needs only one name from it at import
time: `sglang/srt/function_call/inkling_detector.py` does `from xgrammar import StructuralTag` at module
level (and calls `StructuralTag.model_validate({...})` only when an Inkling tool call is constrained).
`sglang/srt/entrypoints/openai/protocol.py` tries the same import and uses `StructuralTag` in a pydantic
Union of request fields, so it must be a pydantic model.

Nothing else is defined, on purpose: `sglang/srt/function_call/base_format_detector.py` imports
`StructuralTag, get_model_structural_tag` in a try/except ImportError, and without the second name it
takes its "no xgrammar" path; SGLang's xgrammar grammar backend (`--grammar-backend xgrammar`, the
default) and tiktoken tokenizers import other names and fail with ImportError, saying so.

Built into the wheelhouse as `xgrammar-0.0.0+standin` by build_wheelhouse.py (real-target/ of the harness
repo).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__version__ = "0.0.0+standin"
STANDIN = True


class StructuralTag(BaseModel):
    """Accepts what xgrammar's StructuralTag accepts at the top level: {"type": "structural_tag", "format": …}."""

    model_config = ConfigDict(extra="allow")

    type: Literal["structural_tag"] = "structural_tag"
    format: Any


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"xgrammar.{name}: this is the harness kit's xgrammar stand-in (only StructuralTag); "
        "serve with --grammar-backend none, or install the real xgrammar"
    )
