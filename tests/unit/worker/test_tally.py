"""Settlements counted one at a time and handed over once per turn of the loop. No broker needed."""

from __future__ import annotations

import asyncio

from worker.drivers import parse_endpoint
from worker.drivers.base import SendError
from worker.drivers.rabbit_stream import RabbitStreamDriver
from worker.drivers.tally import Tally


def test_a_turns_settlements_reach_on_settled_in_one_call_each_kind() -> None:
    driver = RabbitStreamDriver(parse_endpoint("rabbitmq-stream://h/s")[1])
    settled: list[tuple[int, SendError | None]] = []
    driver.on_settled = lambda count, error: settled.append((count, error))
    tally = Tally(driver)

    async def scenario() -> list[list[tuple[int, str | None]]]:
        turns = []
        for _ in range(3):
            tally.taken()
        tally.refused("refused (code 2)", "nacked")
        tally.refused("disconnected before confirmed", "unconfirmed", 4)
        tally.refused("refused (code 2)", "nacked")
        assert settled == []  # nothing before the loop's turn
        await asyncio.sleep(0)
        turns.append([(count, error and f"{error.kind}: {error}") for count, error in settled])
        settled.clear()
        tally.taken()
        await asyncio.sleep(0)
        turns.append([(count, error and error.kind) for count, error in settled])
        return turns

    first, second = asyncio.run(scenario())
    assert first == [
        (3, None),
        (2, "nacked: rabbitmq-stream://h:5552/s: refused (code 2)"),
        (4, "unconfirmed: rabbitmq-stream://h:5552/s: disconnected before confirmed"),
    ]
    assert second == [(1, None)]
