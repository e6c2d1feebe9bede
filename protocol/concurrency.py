"""The one place where threads meet asyncio.

paho-mqtt, python-qpid-proton and confluent-kafka each run their own thread; their callbacks
hand work to an asyncio loop through `call_in_loop`. Sync code that needs an asyncio service
(the embedded broker) runs it on a `BackgroundLoop`. No other module starts threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["BackgroundLoop", "call_in_loop"]

_T = TypeVar("_T")


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
