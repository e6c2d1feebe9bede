"""An in-memory driver: the sender's and receiver's loops tested without a broker.

It keeps what was published, and settles each message as the test says: at once, after a
delay on the event loop, or only when the test releases it. With `batches`, it takes each burst
whole before handing any of it over, as the Kafka driver's `produce_batch` does. A receiving one
hands over the bursts the test gives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from worker.drivers.base import DisconnectedError, Driver, Endpoint, Handover, OnMessages, SendError

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
        refuse: Callable[[int], bool] = lambda _token: False,  # refused outright by publish
        batches: bool = False,
    ) -> None:
        super().__init__(Endpoint("memory://x/q", "memory", "x", 0, "q"), client)
        self.confirm_delay_s = confirm_delay_s
        self.verdict = verdict
        self.down_for = down_for  # (token, attempt) -> the connection is down for this try
        self.refuse = refuse
        self.batches = batches
        self.TAKES_BURSTS = batches  # type: ignore[misc]
        self.bursts: list[int] = []  # with batches: the size of each burst taken whole
        self.bodies: list[bytes] = []
        self.tokens: list[int] = []
        self.held: list[int] = []
        self.attempts: dict[int, int] = {}
        self.max_in_flight = 0
        self._in_flight = 0
        self.closed = False

    async def connect(self) -> None:
        pass

    def publish(self, body: bytes, token: int) -> None:
        attempt = self.attempts.get(token, 0)
        self.attempts[token] = attempt + 1
        if self.down_for(token, attempt):
            raise DisconnectedError("memory: down", retry=True)
        if self.refuse(token):
            raise SendError("memory: refused", retry=False, kind="refused")
        self.bodies.append(body)
        self.tokens.append(token)
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        if self.confirm_delay_s is None:
            self.held.append(token)
        else:
            asyncio.get_running_loop().call_later(self.confirm_delay_s, self._settle, token)

    def publish_many(self, bodies: Iterable[bytes], first_token: int) -> Handover:
        if not self.batches:
            return super().publish_many(bodies, first_token)
        burst = list(bodies)  # every body built before any is handed over
        self.bursts.append(len(burst))
        return super().publish_many(burst, first_token)

    def _settle(self, token: int) -> None:
        self._in_flight -= 1
        self.on_settled(1, self.verdict(token))

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
