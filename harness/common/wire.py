"""How the protocol's messages cross the link: dataclasses to JSON objects and back, strictly.

Standard library only (it ships in the agent's zipapp; Python >= 3.8 there). `Message.from_dict` refuses an
unknown or a missing key; `Message.from_disk` reads what an older agent left on the host (its journal, its
recovery report, a lock holder's note) leniently: unknown keys are dropped, missing ones take their defaults.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from typing import Any, ClassVar, Dict, Tuple, Type, TypeVar

PROTOCOL = 12  # 6: the answer check (Spec.answers, BenchFacts.answers_file); 7: PreflightFacts.stack; 8: gc;
# 9: warm-up per case and cool-down (BenchCase.warmup, Spec.cooldown, BenchFacts.cases); 10: a warm-up of one
# wave of prompts (BenchCase.warmup_argv); 11: prompts per repeat and the prefix cache (BenchCase.seeds,
# warmup_seed, prefix_cache; CaseFacts.prefill, Spec.prefill_pattern); 12: bisect (Spec.checkout, mode history:
# Spec.history, Final.history)

T = TypeVar("T")

# field name → (the type to build it as: a Message or an Enum, whether it is a list of them)
Nested = Dict[str, Tuple[type, bool]]


class ProtocolError(ValueError):
    """A message that does not follow this module: another version, an unknown kind or key, a missing key."""


def _has_default(f: Any) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _default(f: Any) -> Any:
    return f.default if f.default is not MISSING else f.default_factory()


def _one(sub: type, value: Any, where: str, lenient: bool) -> Any:
    if issubclass(sub, Enum):
        try:
            return sub(value)
        except ValueError:
            raise ProtocolError("%s: %r is not one of %s" % (where, value, ", ".join(str(m.value) for m in sub))) \
                from None
    return _build(sub, value, where, lenient)


def _build(cls: Type[T], data: Any, where: str, lenient: bool = False) -> T:
    """A dataclass from a JSON object; nested messages and enums (the class's `NESTED`) are built too.
    Strict: unknown or missing keys are errors. Lenient (`from_disk`): unknown keys are dropped, missing keys
    and nulls where a value has a non-null default take that default."""
    if not isinstance(data, dict):
        raise ProtocolError("%s: expected a JSON object, got %s" % (where, type(data).__name__))
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown and not lenient:
        raise ProtocolError("%s: unknown key(s) %s (protocol %d)" % (where, ", ".join(unknown), PROTOCOL))
    nested: Nested = getattr(cls, "NESTED", {})
    kwargs = {}
    for name, f in known.items():
        value = data.get(name)
        if name not in data or (lenient and value is None and _has_default(f) and _default(f) is not None):
            if not _has_default(f):
                raise ProtocolError("%s: missing key %r" % (where, name))
            continue
        if name in nested and value is not None:
            sub, is_list = nested[name]
            if is_list:
                if not isinstance(value, list):
                    raise ProtocolError("%s.%s: expected a JSON array" % (where, name))
                value = [_one(sub, v, "%s.%s[%d]" % (where, name, i), lenient) for i, v in enumerate(value)]
            else:
                value = _one(sub, value, "%s.%s" % (where, name), lenient)
        kwargs[name] = value
    return cls(**kwargs)


def plain(value: Any) -> Any:
    """JSON-ready: a message as a dict of its fields, an enum as its value, containers element by element."""
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class Message:
    """JSON round trip for the protocol's dataclasses."""

    NESTED: ClassVar[Nested] = {}
    # The controller's record keeps these dataclasses as its parts (results/schemas.py): pydantic reads this, and
    # refuses a key that is not a field there too.
    __pydantic_config__: ClassVar[Dict[str, Any]] = {"extra": "forbid"}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = plain(self)
        return out

    @classmethod
    def from_dict(cls: Type[T], data: Any) -> T:
        return _build(cls, data, cls.__name__)

    @classmethod
    def from_disk(cls: Type[T], data: Any) -> T:
        """What an agent wrote on the host, maybe an older one: read leniently (see `_build`)."""
        return _build(cls, data, cls.__name__, lenient=True)
