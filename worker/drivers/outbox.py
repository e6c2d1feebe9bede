"""What a driver was handed on the loop's turn, written by one task of its own, in order.

For a client library whose send is a coroutine (rstream, nats-py): `publish` must return at
once, so it puts the message here; the writer wakes once per burst and hands the library
everything that came meanwhile. A task per message would cost its creation and a turn of the
loop each; one writer costs a wake-up per burst.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["Outbox"]

_T = TypeVar("_T")


class Outbox(Generic[_T]):
    """Items `put` on the loop reach `write(items)` on the writer task, all that came since its
    last write at once. `write` settles what it wrote and catches its library's errors: one it
    lets through ends the writer. `close()` ends the writer and returns what it had not taken;
    a burst it had taken is settled by nobody then, and the sender counts it as unconfirmed."""

    def __init__(self, write: Callable[[list[_T]], Awaitable[None]]) -> None:
        self._write = write
        self._items: list[_T] = []
        self._filled = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    def put(self, item: _T) -> None:
        self._items.append(item)
        self._wake()

    def put_many(self, items: list[_T]) -> None:
        self._items.extend(items)
        self._wake()

    def _wake(self) -> None:
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._run())
        self._filled.set()

    async def _run(self) -> None:
        while True:
            await self._filled.wait()
            self._filled.clear()
            while self._items:
                items, self._items = self._items, []
                await self._write(items)

    async def close(self) -> list[_T]:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        left, self._items = self._items, []
        return left
