"""Pydantic's validation errors → one `ConfigError` naming the file, the line and, for a misspelt key, the
closest valid one (pure)."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .yamlsrc import YamlDoc

# Names end up in paths on this machine and in argv on hosts: keep them boring.
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


def config_error(model: type[BaseModel], exc: ValidationError, doc: YamlDoc) -> ConfigError:
    problems: list[tuple[int | None, str, str | None]] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        hint = None
        if err["type"] == "extra_forbidden":
            key = loc[-1]
            valid = valid_keys(model, loc[:-1])
            close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            parent = ".".join(str(p) for p in loc[:-1]) or "the top level"
            msg = f"unknown key {key!r} in {parent}"
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(sorted(valid))}"
        elif err["type"] == "missing":
            msg = f"missing required key {where!r}"
        elif err["type"] == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") == SAFE_NAME:
            msg = (f"{where}: {err['input']!r} is not a usable name: use letters, digits, '.', '_' and '-', "
                   f"starting with a letter or digit (names become folder names under results/)")
        else:
            msg = f"{where}: {err['msg']}"
            if "input" in err and not isinstance(err["input"], (dict, list)):
                msg += f" (got {err['input']!r})"
        problems.append((doc.line_of(loc), msg, hint))
    described = [(ln, m + (f" — {h}" if h else "")) for ln, m, h in problems]
    line, first = described[0]
    message = first + "".join(f"\n  also line {ln}: {m}" for ln, m in described[1:])
    return ConfigError(message, file=doc.file, line=line)


def valid_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model found by following `loc` through nested models, dicts and lists."""
    target: Any = model
    for part in loc:
        target = unwrap(target)
        if isinstance(target, type) and issubclass(target, BaseModel):
            field = target.model_fields.get(str(part))
            if field is None:
                return []
            target = field.annotation
        else:
            origin = typing.get_origin(target)
            args = typing.get_args(target)
            if origin is dict and len(args) == 2:
                target = args[1]
            elif origin in (list, tuple) and args:
                target = args[0]
            else:
                return []
    target = unwrap(target)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return list(target.model_fields)
    return []


def unwrap(tp: Any) -> Any:
    """Strip Optional[...] and Annotated[...] so the model or container type remains."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp
