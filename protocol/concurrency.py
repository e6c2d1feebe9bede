"""The one place where threads meet asyncio.

paho-mqtt, python-qpid-proton and confluent-kafka each run their own thread; their callbacks
hand work to an asyncio loop through `call_in_loop`, or, where it comes per message, through a
`LoopBatch` that crosses once per burst; blocking calls (systemctl, iptables) go off the
loop through `run_blocking`. Sync code that needs an asyncio service
(the embedded broker) runs it on a `BackgroundLoop`; work that waits outside the GIL (a rate
file's writes) runs beside its caller, in order, on a `SerialThread`. No other module starts threads.
`wait_event` is the loop's timed wait on an event, one that a cancellation always ends.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Generic, TypeVar

__all__ = [
    "BackgroundLoop",
    "LoopBatch",
    "LoopPoll",
    "PollThread",
    "SerialThread",
    "call_in_loop",
    "run_blocking",
    "wait_any",
    "wait_event",
]

_T = TypeVar("_T")

log = logging.getLogger(__name__)


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until `event` is set, for at most `timeout_s`; whether it is set.

    Not `asyncio.wait_for`: on Python 3.11 a cancellation that comes as the awaited thing
    finishes is lost there (CPython gh-86296), so a task that waits on it in a loop may never
    end when cancelled. A sender's client did that in CI, and the run hung. `asyncio.timeout`
    tells its own cancellation from another's."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout_s)):
            await event.wait()
    return event.is_set()


async def wait_any(events: Iterable[asyncio.Event], timeout_s: float) -> None:
    """Wait until one of `events` is set, for at most `timeout_s`; the caller looks at which.
    The waits left are cancelled however this ends, a cancellation of the caller included."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def call_in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Run `fn(*args)` on `loop` from any thread; dropped quietly once the loop has closed."""
    # RuntimeError: the loop closed while the library thread was still delivering; nobody listens.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


# Threads of their own for slow system calls: a systemctl that takes its 120 s must not hold the
# default executor's few threads, which the bus's connect and the uploads use.
_BLOCKING = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="maestro-blocking")


async def run_blocking(fn: Callable[..., _T], *args: Any) -> _T:
    """`fn(*args)` off the loop (systemctl, iptables, tc, git), awaited."""
    return await asyncio.get_running_loop().run_in_executor(_BLOCKING, functools.partial(fn, *args))


class LoopBatch(Generic[_T]):
    """Items put from a library's thread reach `handle(items)` on the loop, a burst at a time.

    One `call_soon_threadsafe` per message costs a wake-up of the loop each (a few µs and a
    pipe write); at tens of thousands of acknowledgements or messages a second that is the
    whole budget. A burst crosses once: the first item schedules the hand-over, the rest ride
    along until the loop takes them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, handle: Callable[[list[_T]], None]) -> None:
        self._loop = loop
        self._handle = handle
        self._items: list[_T] = []
        self._lock = threading.Lock()
        self._scheduled = False
        self._held: list[_T] = []  # the producing thread's, until release()

    def put(self, item: _T) -> None:
        self.put_many([item])

    def hold(self, item: _T) -> None:
        """Keep `item` until the producing thread calls `release()`, at the end of its library's
        round (one network read's events). A hand-over per round, not per burst the loop happens
        to catch: an AMQP 1.0 receiver whose loop woke for nearly every message spent its
        library's thread waiting for the GIL, and took 0.65 of a raw proton loop's rate.
        Only the one thread that holds may release."""
        self._held.append(item)

    def hold_many(self, items: list[_T]) -> None:
        self._held.extend(items)

    def release(self) -> None:
        if self._held:
            held, self._held = self._held, []
            self.put_many(held)

    def put_many(self, items: list[_T]) -> None:
        if not items:
            return
        with self._lock:
            self._items.extend(items)
            if self._scheduled:
                return
            self._scheduled = True
        call_in_loop(self._loop, self._flush)

    def _flush(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        if items:
            self._handle(items)


class LoopPoll:
    """`poll()` on the loop every `interval_s` for as long as it returns True, for a library that
    tells what it settled only when asked (paho's written QoS 0 messages, librdkafka's queue
    length), not by a callback per message. `start()` arms it when idle; `stop()` disarms it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float, poll: Callable[[], bool]) -> None:
        self._loop = loop
        self._interval_s = interval_s
        self._poll = poll
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if self._handle is None:
            self._handle = self._loop.call_later(self._interval_s, self._run)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _run(self) -> None:
        self._handle = None
        if self._poll():
            self.start()


class BackgroundLoop:
    """An asyncio loop on a daemon thread, for sync callers."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        future: concurrent.futures.Future[_T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout_s)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


class SerialThread:
    """Jobs run one after another, in the order given, on a thread of their own.

    For work that spends most of its time outside the GIL (a file's writes): done here, the
    caller's thread (an event loop) goes on meanwhile. Work that holds the GIL belongs on the
    caller's thread: here it took the GIL in turns with the caller, each hand-over costing more
    than the work (protocol.ratefile). The caller never waits for a job unless `backlog` of them
    are still queued (so memory stays bounded when the disk is slow) or it asks to with `wait`.
    A job that raised is raised to the caller at its next `submit`, `wait` or `join`: nothing
    fails unseen.
    """

    def __init__(self, name: str, backlog: int = 8) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._backlog = backlog
        self._queued: collections.deque[concurrent.futures.Future[None]] = collections.deque()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        while self._queued and (self._queued[0].done() or len(self._queued) >= self._backlog):
            self._queued.popleft().result()
        self._queued.append(self._pool.submit(fn, *args))

    def wait(self) -> None:
        """Until every job given so far has run."""
        while self._queued:
            self._queued.popleft().result()

    def join(self) -> None:
        """Run every job given, end the thread, then raise the first error if one raised (a
        failed write does not keep the jobs after it, a file's close, from running)."""
        self._pool.shutdown(wait=True)
        errors = [job.exception() for job in self._queued]
        self._queued.clear()
        first = next((error for error in errors if error is not None), None)
        if first is not None:
            raise first


class PollThread:
    """Calls `poll()` over and over on a daemon thread until stopped, or until it returns False.

    For libraries that deliver only from a blocking poll (confluent-kafka, proton's container):
    `poll` blocks for a short while itself and hands what it got to the event loop with
    `call_in_loop`.
    """

    def __init__(self, name: str, poll: Callable[[], Any]) -> None:
        self._poll = poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._poll() is False:
                    return
            except Exception:
                # A callback bug must not silently end delivery for the rest of the run.
                log.exception("%s: poll failed", self._thread.name)

    def join(self, timeout_s: float) -> bool:
        """Wait for `poll()` to end the thread by returning False; True if it did in time."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
