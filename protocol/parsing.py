"""The one family of value parsers: SET options (typed values or text), SUT URL query options
and agent action parameters (text) all go through these, so `yes`, `on` and `1` mean true
everywhere and a range is checked and worded the same way. Each raises ValueError saying what
it expected; the caller names the option."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["OptionError", "boolean", "choice", "integer", "number", "number_range", "parse_seconds", "text"]


class OptionError(ValueError):
    """An option's name or value is wrong; the message names it."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"option {name!r}: {problem}")
        self.name = name


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


_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TIME_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_seconds(value: Any) -> float:
    """`90`, `1.5`, `"120s"`, `"10m"`, `"1h30m"`, `"250ms"` -> seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a time such as 120s, 10m or 1h30m")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        elif text and _TIME_PART.sub("", text) == "":
            seconds = sum(float(n) * _UNITS_S[u] for n, u in _TIME_PART.findall(text))
        else:
            raise ValueError(f"{value!r} is not a time such as 120s, 10m or 1h30m")
    if seconds < 0:
        raise ValueError(f"{value!r} is negative")
    return seconds
