"""`wait_event`: a wait with a timeout that a cancellation always ends, even one that comes as the
event is set (where Python 3.11's `asyncio.wait_for` returns as if nothing had been asked)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest

from protocol.concurrency import wait_any, wait_event


async def _with_wait_for(event: asyncio.Event, timeout_s: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
    return event.is_set()


def _cancelled_as_the_event_is_set(wait: Callable[[asyncio.Event, float], Awaitable[bool]]) -> bool:
    """Whether a task that waits on `wait` in a loop (as a sender's client waits for room in its
    window) ends when cancelled in the same turn of the loop as its event is set."""

    async def scenario() -> bool:
        event = asyncio.Event()

        async def client() -> None:
            while True:
                event.clear()
                await wait(event, 0.5)
                await asyncio.sleep(0)  # a burst sent; the loop goes round

        task = asyncio.create_task(client())
        await asyncio.sleep(0.01)
        event.set()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        if not done:
            task.cancel()  # a second request: the first was lost; end it for the test's sake
            await asyncio.wait({task}, timeout=2)
        return bool(done)

    return asyncio.run(scenario())


def test_a_cancellation_as_the_event_is_set_ends_the_waiting_task() -> None:
    assert _cancelled_as_the_event_is_set(wait_event)


def test_asyncio_wait_for_loses_that_cancellation_on_this_python() -> None:
    """Why `wait_event` exists: if a Python fixes wait_for, this says so (and the helper may go)."""
    assert not _cancelled_as_the_event_is_set(_with_wait_for)


@pytest.mark.parametrize("already", [False, True])
def test_it_says_whether_the_event_was_set_and_waits_no_longer_than_asked(already: bool) -> None:
    async def scenario() -> tuple[bool, float, bool, float]:
        event = asyncio.Event()
        if already:
            event.set()
        start = time.monotonic()
        first = await wait_event(event, 0.05)
        waited = time.monotonic() - start
        asyncio.get_running_loop().call_later(0.01, event.set)
        start = time.monotonic()
        second = await wait_event(event, 5)
        return first, waited, second, time.monotonic() - start

    first, waited, second, until_set = asyncio.run(scenario())
    assert first is already and (waited < 0.01 if already else 0.05 <= waited < 1)
    assert second and until_set < 1


def test_wait_any_ends_at_the_first_event_or_the_timeout_and_leaves_no_wait_behind() -> None:
    async def scenario() -> tuple[bool, float, int]:
        loop = asyncio.get_running_loop()
        first, second = asyncio.Event(), asyncio.Event()
        loop.call_later(0.05, second.set)
        await wait_any((first, second), 5)
        at_the_event = second.is_set() and not first.is_set()
        second.clear()
        started = loop.time()
        await wait_any((first, second), 0.1)
        waited = loop.time() - started
        waiter = asyncio.ensure_future(wait_any((first, second), 5))
        await asyncio.sleep(0.01)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await asyncio.sleep(0)  # the cancelled waits finish their cancellation
        return at_the_event, waited, len(first._waiters or ()) + len(second._waiters or ())  # type: ignore[attr-defined]

    at_the_event, waited, left = asyncio.run(scenario())
    assert at_the_event
    assert 0.09 <= waited < 1.0
    assert left == 0
