"""An in-memory driver: the sender's and receiver's loops tested without a broker.

It keeps what was published, and settles each message as the test says: at once, after a
delay on the event loop, or only when the test releases it. A receiving one hands over the
bursts the test gives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from worker.drivers.base import DisconnectedError, Driver, Endpoint, OnMessages, SendError

__all__ = ["MemoryDriver"]


class MemoryDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = {"memory": (False, 0)}
    OPTIONS: ClassVar[dict[str, Any]] = {}
    DESCRIPTION = "in memory (tests)"
    DEFAULT_WINDOW = 1000

    def __init__(
        self,
        client: int = 0,
        *,
        confirm_delay_s: float | None = 0.0,  # None: settled only by release()
        verdict: Callable[[int], SendError | None] = lambda _token: None,
        down_for: Callable[[int, int], bool] = lambda _token, _attempt: False,
    ) -> None:
        super().__init__(Endpoint("memory://x/q", "memory", "x", 0, "q"), client)
        self.confirm_delay_s = confirm_delay_s
        self.verdict = verdict
        self.down_for = down_for  # (token, attempt) -> the connection is down for this try
        self.bodies: list[bytes] = []
        self.tokens: list[int] = []
        self.held: list[int] = []
        self.attempts: dict[int, int] = {}
        self.max_in_flight = 0
        self._in_flight = 0
        self.closed = False

    async def connect(self) -> None:
        pass

    def publish(self, body: bytes, token: int) -> bool:
        attempt = self.attempts.get(token, 0)
        self.attempts[token] = attempt + 1
        if self.down_for(token, attempt):
            raise DisconnectedError("memory: down", retry=True)
        self.bodies.append(body)
        self.tokens.append(token)
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        if self.confirm_delay_s is None:
            self.held.append(token)
        else:
            asyncio.get_running_loop().call_later(self.confirm_delay_s, self._settle, token)
        return False

    def _settle(self, token: int) -> None:
        self._in_flight -= 1
        self.on_settled(token, self.verdict(token))

    def release(self, count: int) -> None:
        for token in self.held[:count]:
            self._settle(token)
        del self.held[:count]

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        self.on_messages = on_messages

    def deliver(self, batch: list[tuple[bytes, int]]) -> None:
        """Hand the receiver a burst of (body, arrival wall ns), as a library's thread would."""
        self.on_messages(batch)

    async def close(self) -> None:
        self.closed = True
