"""Wake-ups at a given `time.perf_counter_ns()`, to some tens of microseconds, on the event loop.

asyncio's own timers wake 1-2 ms late: epoll takes its timeout in whole milliseconds, rounded
up. A Linux timerfd armed at the absolute time wakes the loop's epoll when it expires, to the
kernel's timer precision, with no thread between: on this machine 60-75 µs late at the median
at 1,000-2,000 wake-ups/s and ~30 µs from 5,000/s, for 13 % of a core at 2,000/s and 27 % at
5,000/s. The thread this replaced (time.sleep, then a hop to the loop through its self-pipe,
the GIL changing hands both ways) cost 32 % and 64 % there, woke 135-185 µs late, and could not
keep 20,000/s (bench/HISTORY.md).

`perf_counter_ns` is CLOCK_MONOTONIC on Linux, the clock the timerfd is armed on. Elsewhere (no
timerfd) the loop's timers stand in, and are as late as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import logging
import os
import sys
import time

__all__ = ["PreciseTimer"]

log = logging.getLogger(__name__)

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _libc() -> ctypes.CDLL | None:
    """libc's timerfd calls, where there are some and perf_counter reads their clock."""
    if not sys.platform.startswith("linux"):
        return None
    if time.get_clock_info("perf_counter").implementation != "clock_gettime(CLOCK_MONOTONIC)":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.timerfd_settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class PreciseTimer:
    """One per loop, shared by every sleeper on it: a heap of who is due when, and the timerfd
    armed for the earliest. Those that fall due together wake in one turn of the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._armed_ns = 0  # when the timerfd fires next; 0: not armed
        self._spec = _Itimerspec()
        self._fd = -1
        if _LIBC is not None:
            fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                loop.add_reader(fd, self._fire)
            else:
                log.warning("no timerfd (%s): timing to the event loop's 1-2 ms", os.strerror(ctypes.get_errno()))

    async def sleep_until(self, due_ns: int) -> None:
        if self._fd < 0:
            await asyncio.sleep(max(0, due_ns - time.perf_counter_ns()) / 1e9)
            return
        future: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._due, (due_ns, next(self._order), future))
        if self._armed_ns == 0 or due_ns < self._armed_ns:
            self._arm(due_ns)
        await future

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _arm(self, due_ns: int) -> None:
        due_ns = max(due_ns, 1)  # 0 would disarm it; a time past fires at once
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(due_ns, 1_000_000_000)
        assert _LIBC is not None
        if _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            raise OSError(ctypes.get_errno(), f"timerfd_settime: {os.strerror(ctypes.get_errno())}")
        self._armed_ns = due_ns

    def _fire(self) -> None:
        with contextlib.suppress(BlockingIOError):  # re-armed since it expired
            os.read(self._fd, 8)  # the expiry count: read, or epoll reports the fd again
        self._armed_ns = 0
        now = time.perf_counter_ns()
        due = self._due
        while due and due[0][0] <= now:
            future = heapq.heappop(due)[2]
            if not future.done():  # a cancelled sleeper
                future.set_result(None)
        if due:
            self._arm(due[0][0])
