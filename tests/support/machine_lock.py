"""The machine, shared by the tests of both pytest-xdist workers and held alone by a test marked
`quiet` (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

__all__ = ["the_machine"]


@contextlib.contextmanager
def the_machine(folder: Path, alone: bool) -> Iterator[None]:
    """A readers-writer lock over flock(2). Everyone passes the turnstile on the way in; a quiet
    test keeps it shut while it waits for the room and while it runs, so the other worker's next
    tests cannot keep it waiting for ever."""
    with (folder / "turnstile").open("a") as turnstile, (folder / "room").open("a") as room:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield  # closing the files lets both go
