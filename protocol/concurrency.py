"""The one place where threads meet asyncio.

paho-mqtt, python-qpid-proton and confluent-kafka each run their own thread; their callbacks
hand work to an asyncio loop through `call_in_loop`. Sync code that needs an asyncio service
(the embedded broker) runs it on a `BackgroundLoop`. No other module starts threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["BackgroundLoop", "PollThread", "call_in_loop"]

_T = TypeVar("_T")

log = logging.getLogger(__name__)


def call_in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Run `fn(*args)` on `loop` from any thread; dropped quietly once the loop has closed."""
    # RuntimeError: the loop closed while the library thread was still delivering; nobody listens.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


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

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
