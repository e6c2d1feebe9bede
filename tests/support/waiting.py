"""Waiting, in a test's event loop, for a state that callbacks bring about."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], object], timeout_s: float = 10.0, what: str = "the awaited state") -> None:
    """Wait for `condition()` to hold, however long the work takes on a loaded machine; fail
    the test, naming `what`, if it never does."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} never came within {timeout_s:g} s"
        await asyncio.sleep(0.005)


def until_blocking(condition: Callable[[], object], timeout_s: float = 10.0, what: str = "the awaited state") -> None:
    """`until`, from a thread that runs no event loop."""
    asyncio.run(until(condition, timeout_s, what))
