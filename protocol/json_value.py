"""What JSON is, as a type: the values `json.dumps` writes. A record's `to_json` returns a
`JsonObject`, so mypy refuses a value JSON cannot hold (a set, a Path, a dataclass) where the
record is written, not when a file is read two packages away. The containers are the read-only
(covariant) kinds, so a `list[JsonObject]` or a `dict[str, float]` is JSON as it stands; what is
written is a list, a tuple or a dict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

__all__ = ["JsonObject", "JsonValue"]

JsonValue: TypeAlias = "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"
