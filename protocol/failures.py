"""A failure in the words a peer sends back: its kind and message, and, when the message is
empty (a `TimeoutError()` from a future's `result`, a bare `AssertionError`), the line of ours
that it came through, so that a reason such as "s1@vm: TimeoutError" still points somewhere."""

from __future__ import annotations

import traceback
from pathlib import Path

__all__ = ["describe"]

# The directory that holds our packages: a frame there is ours, not the standard library's or
# a client library's, and is the one that says what we were doing.
_OURS = Path(__file__).resolve().parents[1]


def describe(exc: BaseException) -> str:
    kind = type(exc).__name__
    text = str(exc).strip()
    if text:
        return f"{kind}: {text}"
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [frame for frame in frames if _is_ours(frame.filename)]
    if not (ours or frames):
        return kind
    where = (ours or frames)[-1]
    return f"{kind} (no message) at {Path(where.filename).name}:{where.lineno} in {where.name}"


def _is_ours(filename: str) -> bool:
    path = Path(filename).resolve()
    return path.is_relative_to(_OURS) and ".venv" not in path.relative_to(_OURS).parts
