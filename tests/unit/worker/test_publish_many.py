"""`Driver.publish_many`'s own loop, for drivers whose library takes one message a call: it hands
the burst over in order, counts a refused message's number as spent, stops at a closed
connection, and builds no message past the one that met it."""

from __future__ import annotations

from collections.abc import Iterator

from worker.drivers.base import DisconnectedError
from worker.drivers.memory import MemoryDriver


def test_a_burst_goes_in_order_and_stops_where_the_connection_is_down() -> None:
    built: list[int] = []

    def bodies() -> Iterator[bytes]:
        for i in range(10):
            built.append(i)
            yield bytes([i])

    driver = MemoryDriver(
        confirm_delay_s=None,
        refuse=lambda token: token == 102,
        down_for=lambda token, _attempt: token == 105,
    )
    done = driver.publish_many(bodies(), 100)
    assert done.handed == 5  # 100..104: the refused 102 among them, its number spent
    assert dict(done.refused) == {"refused": 1}
    assert isinstance(done.down, DisconnectedError)
    assert driver.tokens == [100, 101, 103, 104]
    assert driver.bodies == [bytes([0]), bytes([1]), bytes([3]), bytes([4])]
    assert built == [0, 1, 2, 3, 4, 5]  # the sixth met the closed connection; none built after it


def test_a_whole_burst_goes_when_nothing_stops_it() -> None:
    driver = MemoryDriver(confirm_delay_s=None)
    done = driver.publish_many((bytes([i]) for i in range(7)), 0)
    assert (done.handed, dict(done.refused), done.down) == (7, {}, None)
    assert driver.tokens == list(range(7))
