"""The one family of value parsers: SET options (typed values or text), SUT URL query options
and agent action parameters (text) all go through these, so `yes`, `on` and `1` mean true
everywhere and a range is checked and worded the same way. Each raises ValueError saying what
it expected; the caller names the option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["boolean", "choice", "integer", "number", "number_range", "text"]


def number(low: float, high: float | None = None, integer: bool = False) -> Callable[[Any], float | int]:
    def parse(value: Any) -> float | int:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            parsed = float(value)
        except ValueError as exc:
            raise ValueError(f"expected a number, got {value!r}") from exc
        if integer:
            if parsed != int(parsed):
                raise ValueError(f"expected a whole number, got {value!r}")
            parsed = int(parsed)
        if parsed < low or (high is not None and parsed > high):
            bound = f"{low:g} to {high:g}" if high is not None else f"at least {low:g}"
            raise ValueError(f"{value} is out of range ({bound})")
        return parsed

    return parse


def integer(low: int, high: int) -> Callable[[Any], int]:
    whole = number(low, high, integer=True)
    return lambda value: int(whole(value))


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return str(value)

    return parse


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def number_range(value: Any) -> tuple[int, int]:
    """`1-100` -> (1, 100): the numbers a `%d` in a destination runs through."""
    low, sep, high = text(value).partition("-")
    if not sep or not low.isdigit() or not high.isdigit() or int(low) > int(high):
        raise ValueError(f"expected a range such as 1-100, got {value!r}")
    return int(low), int(high)
