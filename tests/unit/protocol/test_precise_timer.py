"""The process's precise timer: every sleeper wakes, never before its time, in the order due."""

from __future__ import annotations

import asyncio
import random
import time

from protocol.concurrency import PreciseTimer


def test_sleepers_wake_in_due_order_and_never_early() -> None:
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
            dues = [start + rng.randrange(-1_000_000, 60_000_000) for _ in range(60)]
            await asyncio.wait_for(asyncio.gather(*(sleeper(timer, due) for due in dues)), 10)
        finally:
            timer.close()

    asyncio.run(scenario())
    assert len(woke) == 60
    assert all(at >= due for due, at in woke)
    assert [due for due, _ in woke] == sorted(due for due, _ in woke)


def test_a_sleeper_registered_while_the_thread_waits_for_a_later_one_is_not_held_up() -> None:
    async def scenario() -> float:
        timer = PreciseTimer(asyncio.get_running_loop())
        try:
            far = asyncio.ensure_future(timer.sleep_until(time.perf_counter_ns() + 2_000_000_000))
            await asyncio.sleep(0.05)  # the thread now waits for `far`
            started = time.perf_counter()
            await asyncio.wait_for(timer.sleep_until(time.perf_counter_ns() + 10_000_000), 1.5)
            far.cancel()
            return time.perf_counter() - started
        finally:
            timer.close()

    # Woken for the near one, not after the far one's 2 s (the bound is loose: a shared machine).
    assert asyncio.run(scenario()) < 1.0
