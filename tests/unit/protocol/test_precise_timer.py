"""The loop's precise timer: every sleeper wakes, never before its time, in the order due; on
the timerfd here and on the loop's own timers where there is none."""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from protocol import precise_timer
from protocol.precise_timer import PreciseTimer


def _wake_order(count: int, spread_ns: int) -> list[tuple[int, int]]:
    woke: list[tuple[int, int]] = []

    async def sleeper(timer: PreciseTimer, due_ns: int) -> None:
        await timer.sleep_until(due_ns)
        woke.append((due_ns, time.perf_counter_ns()))

    async def scenario() -> None:
        timer = PreciseTimer(asyncio.get_running_loop())
        try:
            start = time.perf_counter_ns()
            rng = random.Random(7)
            # Registered in random order, some due at once, some in the past already.
            dues = [start + rng.randrange(-1_000_000, spread_ns) for _ in range(count)]
            await asyncio.wait_for(asyncio.gather(*(sleeper(timer, due) for due in dues)), 10)
        finally:
            timer.close()

    asyncio.run(scenario())
    return woke


def test_sleepers_wake_in_due_order_and_never_early() -> None:
    assert precise_timer._LIBC is not None  # Linux: the timerfd is what is tested here
    woke = _wake_order(60, 60_000_000)
    assert len(woke) == 60
    assert all(at >= due for due, at in woke)
    assert [due for due, _ in woke] == sorted(due for due, _ in woke)


@pytest.mark.quiet
def test_sleepers_wake_within_a_millisecond_of_their_time() -> None:
    # Never early is half of it: a timer that woke everyone 5 s late would pass that. 200
    # sleepers due every 5 ms over a second, with nothing else of the suite running (quiet). This
    # machine is shared with other jobs, which the suite cannot hold off: a second of theirs put
    # the p99 at 1.8-4 ms in 1 run of 2 (p50 40-60 µs). Noise only adds lateness, so the best of
    # three seconds is judged: a timer 2 ms late (p50 2,034 µs) fails all three.
    seen = []
    for _ in range(3):
        woke = _paced(200, 5_000_000)
        late_us = sorted((at - due) / 1000 for due, at in woke)
        assert len(late_us) == 200 and late_us[0] >= 0
        seen.append(f"p50 {late_us[100]:.0f} µs, p99 {late_us[198]:.0f} µs")
        if late_us[int(0.99 * len(late_us))] < 1000:
            return
    pytest.fail(f"lateness p99 over 1 ms in 3 tries: {'; '.join(seen)}")


def _paced(count: int, every_ns: int) -> list[tuple[int, int]]:
    woke: list[tuple[int, int]] = []

    async def scenario() -> None:
        timer = PreciseTimer(asyncio.get_running_loop())
        try:
            start = time.perf_counter_ns() + 10_000_000
            for n in range(count):
                due = start + n * every_ns
                await timer.sleep_until(due)
                woke.append((due, time.perf_counter_ns()))
        finally:
            timer.close()

    asyncio.run(scenario())
    return woke


def test_without_a_timerfd_the_loops_timers_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precise_timer, "_LIBC", None)
    woke = _wake_order(20, 30_000_000)
    assert len(woke) == 20
    assert all(at >= due for due, at in woke)


def test_a_sooner_sleeper_rearms_the_timer_and_a_cancelled_one_is_passed_over() -> None:
    async def scenario() -> tuple[float, bool]:
        timer = PreciseTimer(asyncio.get_running_loop())
        try:
            far = asyncio.ensure_future(timer.sleep_until(time.perf_counter_ns() + 2_000_000_000))
            gone = asyncio.ensure_future(timer.sleep_until(time.perf_counter_ns() + 5_000_000))
            await asyncio.sleep(0.001)  # armed for `gone`, then for `far` once it is cancelled
            gone.cancel()
            started = time.perf_counter()
            await asyncio.wait_for(timer.sleep_until(time.perf_counter_ns() + 10_000_000), 1.5)
            waited = time.perf_counter() - started
            far_done = far.done()
            far.cancel()
            return waited, far_done
        finally:
            timer.close()

    waited, far_done = asyncio.run(scenario())
    # Woken for the near one, not after the far one's 2 s (the bound is loose: a shared machine).
    assert waited < 1.0 and not far_done


def test_close_leaves_the_loop_watching_nothing() -> None:
    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        timer = PreciseTimer(loop)
        await timer.sleep_until(time.perf_counter_ns() + 1_000_000)
        fd = timer._fd
        timer.close()
        assert not loop.remove_reader(fd)  # already removed
        return fd

    fd = asyncio.run(scenario())
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
