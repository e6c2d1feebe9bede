"""Settlements a library tells one message at a time (rstream's confirmation callback, a
JetStream acknowledgement), counted and handed to the driver's `on_settled` once per turn of the
event loop: one call for those taken and one per reason a message was not, not a call each."""

from __future__ import annotations

import asyncio
from collections import Counter

from worker.drivers.base import Driver, SendError

__all__ = ["Tally"]


class Tally:
    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._taken = 0
        self._refused: Counter[tuple[str, str]] = Counter()  # (why, error kind) -> messages
        self._scheduled = False

    def taken(self) -> None:
        self._taken += 1
        if not self._scheduled:
            self._soon()

    def refused(self, why: str, kind: str, count: int = 1) -> None:
        """`count` messages not taken: `why` in the driver's words, `kind` the sender's error
        counter (nacked, unconfirmed, ...)."""
        self._refused[(why, kind)] += count
        if not self._scheduled:
            self._soon()

    def _soon(self) -> None:
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self.settle)

    def settle(self) -> None:
        """What was counted since the last settling, to `on_settled` now."""
        self._scheduled = False
        taken, self._taken = self._taken, 0
        refused, self._refused = self._refused, Counter()
        driver = self._driver
        if taken:
            driver.on_settled(taken, None)
        for (why, kind), count in refused.items():
            driver.on_settled(count, SendError(f"{driver.endpoint}: {why}", retry=False, kind=kind))
