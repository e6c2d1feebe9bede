"""LoopBatch: items from a library's thread reach the loop a burst at a time; held ones only at
the end of the thread's round, in one hand-over.
LoopPoll: a poll on the loop, repeated while it says something is left."""

from __future__ import annotations

import asyncio
import threading

from protocol.concurrency import LoopBatch, LoopPoll


def test_held_items_cross_only_at_release_and_in_one_hand_over() -> None:
    handed: list[list[int]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        batch: LoopBatch[int] = LoopBatch(loop, handed.append)
        held = threading.Event()
        released = threading.Event()

        def library_round() -> None:
            for i in range(5):
                batch.hold(i)
            batch.hold_many([5, 6])
            held.set()
            released.wait(5)
            batch.release()
            batch.release()  # nothing held: nothing crosses

        thread = threading.Thread(target=library_round)
        thread.start()
        await asyncio.to_thread(held.wait, 5)
        await asyncio.sleep(0.05)  # the loop is free: anything scheduled would have run by now
        assert handed == []
        released.set()
        await asyncio.to_thread(thread.join, 5)
        for _ in range(100):
            if handed:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert handed == [[0, 1, 2, 3, 4, 5, 6]]


def test_put_items_cross_without_a_release() -> None:
    handed: list[list[int]] = []

    async def scenario() -> None:
        batch: LoopBatch[int] = LoopBatch(asyncio.get_running_loop(), handed.append)
        await asyncio.to_thread(batch.put_many, [1, 2])
        await asyncio.to_thread(batch.put, 3)
        for _ in range(100):
            if sum(len(h) for h in handed) == 3:
                break
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert [item for burst in handed for item in burst] == [1, 2, 3]


def test_a_loop_poll_polls_while_it_is_asked_to_and_once_at_a_time() -> None:
    polls: list[int] = []

    async def scenario() -> None:
        left = [3]

        def poll() -> bool:
            polls.append(left[0])
            left[0] -= 1
            return left[0] > 0

        loop_poll = LoopPoll(asyncio.get_running_loop(), 0.01, poll)
        loop_poll.start()
        loop_poll.start()  # armed already: still one poll at a time
        await asyncio.sleep(0.2)
        assert polls == [3, 2, 1]  # until poll() said nothing is left
        left[0] = 5
        loop_poll.start()
        loop_poll.stop()
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert polls == [3, 2, 1]  # stopped before its next poll
