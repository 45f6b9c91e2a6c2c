"""YAML with line numbers: load a file into plain data plus a map from key paths to lines.

Pydantic reports errors as key paths (`("server", "kv_cache_dtyp")`); this map turns them into
`file:line` so every configuration error points at the exact place to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

KeyPath = tuple[Any, ...]


@dataclass
class YamlDoc:
    file: Path
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """Line of the deepest prefix of `path` that exists in the document."""
        for n in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:n]))
            if line is not None:
                return line
        return None


def load_yaml(file: Path) -> YamlDoc:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=file, hint="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read file: {exc}", file=file) from None
    return parse_yaml(text, file)


def parse_yaml(text: str, file: Path) -> YamlDoc:
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # the reader rejects control characters already here
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
        if exc.context:
            problem = f"{exc.context}, {problem}"
        raise ConfigError(f"invalid YAML: {problem}", file=file, line=line,
                          hint="check indentation and quoting around this line") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=file) from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()
    doc = YamlDoc(file=file, data=data)
    if node is not None:
        _record_lines(node, (), doc)
    return doc


def _record_lines(node: yaml.Node, path: KeyPath, doc: YamlDoc) -> None:
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.start_mark)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} (first on line {seen[key]})", file=doc.file,
                                  line=line, hint="remove one of them")
            seen[key] = line
            doc.lines[path + (key,)] = line
            _record_lines(value_node, path + (key,), doc)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            doc.lines[path + (i,)] = item.start_mark.line + 1
            _record_lines(item, path + (i,), doc)
