"""An in-memory driver: the sender's and receiver's loops run without a broker, for this
project's tests and for a user's tests of a script or a driver of their own. Not a URL scheme a
test definition can name: it is made in code (`MemoryDriver(client, confirm_delay_s=...)`).

It keeps what was published, and settles each message as the test says: at once, after a
delay on the event loop, or only when the test releases it. With `batches`, it takes each burst
whole before handing any of it over, as the Kafka driver's `produce_batch` does. A receiving one
hands over the bursts the test gives it.

As strict as the real clients: with `settle_batch`, what came in during a delay is settled
together, in chunks of that many and shuffled (RabbitMQ confirms with `multiple`, Kafka's
delivery reports per partition, MQTT's PUBACKs as the broker sends them); `drop()` loses the
connection as a real one is lost: every message in flight is settled as unconfirmed
(aio-pika's "closed before confirmed", paho's unsettled publishes), and publishing fails until
`restore()`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from worker.drivers.base import DisconnectedError, Driver, Endpoint, Handover, OnMessages, SendError

__all__ = ["MemoryDriver"]


class MemoryDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = {"memory": (False, 0)}
    OPTIONS: ClassVar[dict[str, Any]] = {}
    DESCRIPTION = "in memory (tests, made in code)"
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
        settle_batch: int = 0,  # 0: each settled on its own; n: together, n at most at once, shuffled
        seed: int = 0,
        acknowledges: bool = True,  # False: settled without the SUT's word (QoS 0, no confirms)
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
        self.closed = False
        self.settle_batch = settle_batch
        self.settled_in: list[int] = []  # with settle_batch: the size of each chunk settled together
        self.dropped = False
        self._rng = random.Random(seed)
        self._acknowledges = acknowledges
        self._flying: set[int] = set()  # published, not settled
        self._pending: list[int] = []  # with settle_batch: due at the next settlement
        self._pending_at: asyncio.TimerHandle | None = None

    def acknowledges(self) -> bool:
        return self._acknowledges

    async def connect(self) -> None:
        pass

    def publish(self, body: bytes, token: int) -> None:
        attempt = self.attempts.get(token, 0)
        self.attempts[token] = attempt + 1
        if self.dropped or self.down_for(token, attempt):
            raise DisconnectedError("memory: down", retry=True)
        if self.refuse(token):
            raise SendError("memory: refused", retry=False, kind="refused")
        self.bodies.append(body)
        self.tokens.append(token)
        self._flying.add(token)
        self.max_in_flight = max(self.max_in_flight, len(self._flying))
        if self.confirm_delay_s is None:
            self.held.append(token)
        elif self.settle_batch:
            self._pending.append(token)
            if self._pending_at is None:
                self._pending_at = asyncio.get_running_loop().call_later(self.confirm_delay_s, self._settle_pending)
        else:
            asyncio.get_running_loop().call_later(self.confirm_delay_s, self._settle, [token])

    def publish_many(self, bodies: Iterable[bytes], first_token: int) -> Handover:
        if not self.batches:
            return super().publish_many(bodies, first_token)
        burst = list(bodies)  # every body built before any is handed over
        self.bursts.append(len(burst))
        return super().publish_many(burst, first_token)

    def _settle(self, tokens: list[int]) -> None:
        """Settle those of `tokens` still in flight (a drop failed the rest), reported
        together per verdict, as one confirm covers several."""
        by_verdict: dict[str, tuple[int, SendError | None]] = {}
        for token in tokens:
            if token not in self._flying:
                continue
            self._flying.discard(token)
            error = self.verdict(token)
            key = "" if error is None else error.kind
            count, _ = by_verdict.get(key, (0, error))
            by_verdict[key] = (count + 1, error)
        for count, error in by_verdict.values():
            self.on_settled(count, error)

    def _settle_pending(self) -> None:
        """What came in since the last settlement, shuffled, in chunks of `settle_batch`."""
        self._pending_at = None
        tokens, self._pending = self._pending, []
        self._rng.shuffle(tokens)
        for start in range(0, len(tokens), self.settle_batch):
            chunk = tokens[start : start + self.settle_batch]
            self.settled_in.append(len(chunk))
            self._settle(chunk)

    def release(self, count: int) -> None:
        self._settle(self.held[:count])
        del self.held[:count]

    def drop(self) -> None:
        """The connection is lost: everything in flight is settled as unconfirmed, and each
        publish fails as disconnected until `restore()`."""
        self.dropped = True
        lost, self._pending, self.held = len(self._flying), [], []
        self._flying.clear()
        if lost:
            self.on_settled(lost, SendError("memory: closed before confirmed", retry=False, kind="unconfirmed"))

    def restore(self) -> None:
        self.dropped = False

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        self.on_messages = on_messages

    def deliver(self, batch: list[tuple[bytes, int]]) -> None:
        """Hand the receiver a burst of (body, arrival wall ns), as a library's thread would."""
        self.on_messages(batch)

    async def close(self) -> None:
        self.closed = True
