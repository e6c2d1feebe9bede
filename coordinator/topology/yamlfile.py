"""YAML read with the line of every mapping and list kept, so that errors can name the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["LineDict", "LineList", "TopologyError", "line_of", "load_yaml", "plain"]


class TopologyError(ValueError):
    """Bad input to the topology generator; the message names the file, line or node."""


class LineDict(dict[Any, Any]):
    line: int = 0


class LineList(list[Any]):
    line: int = 0


def line_of(value: Any, default: int = 0) -> int:
    return getattr(value, "line", default)


class _DuplicateKeyError(Exception):
    def __init__(self, line: int, key: Any) -> None:
        super().__init__(line, key)
        self.line, self.key = line, key


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise _DuplicateKeyError(key_node.start_mark.line + 1, key)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load_yaml(text: str, path: Path) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except _DuplicateKeyError as exc:
        raise TopologyError(f"{path}:{exc.line}: {exc.key!r} is given twice") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise TopologyError(f"{where}: not valid YAML: {problem}") from exc


def plain(value: Any) -> Any:
    """Ordinary dicts and lists again: yaml.safe_dump refuses subclasses."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
