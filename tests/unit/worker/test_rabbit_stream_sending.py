"""A stream sender's burst in its outbox, and the outbox in Publish frames: rstream puts a whole
`send_batch` in one frame, and RabbitMQ closes a connection whose frame is larger than agreed
(1 MiB). No broker needed."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from worker.drivers import parse_endpoint
from worker.drivers.amqp10_bytes import data_body
from worker.drivers.base import DisconnectedError, Handover
from worker.drivers.rabbit_stream import _FRAME_MAX, _FRAME_OVERHEAD, _MESSAGE_OVERHEAD, RabbitStreamDriver, _frames


def _frame_bytes(frame: list[bytes]) -> int:
    return _FRAME_OVERHEAD + sum(len(message) + _MESSAGE_OVERHEAD for message in frame)


def test_a_burst_that_fits_goes_in_one_frame() -> None:
    batch = [bytes(261)] * 1000
    assert _frames(batch) == [batch]


@pytest.mark.parametrize("size", [1000, 70_000, 400_000, _FRAME_MAX - _FRAME_OVERHEAD - _MESSAGE_OVERHEAD])
def test_a_larger_one_is_cut_into_frames_that_fit_in_order(size: int) -> None:
    count = max(3, 3 * _FRAME_MAX // size)  # three frames' worth and more
    batch = [bytes([n % 256]) * size for n in range(count)]
    frames = _frames(batch)
    assert len(frames) > 1
    assert [message for frame in frames for message in frame] == batch
    assert all(_frame_bytes(frame) <= _FRAME_MAX for frame in frames)
    # Full frames: no frame could have taken the next one's first message.
    assert all(_frame_bytes([*frame, after[0]]) > _FRAME_MAX for frame, after in itertools.pairwise(frames))


def _publish_many(bodies: list[bytes], connected: bool) -> tuple[Handover, list[bytes], list[bytes]]:
    """What publish_many did, what reached the outbox, and what of `bodies` it took."""
    driver = RabbitStreamDriver(parse_endpoint("rabbitmq-stream://h/s")[1])
    driver._publishing = connected
    taken: list[bytes] = []

    def given() -> Iterator[bytes]:
        for body in bodies:
            taken.append(body)
            yield body

    async def scenario() -> tuple[Handover, list[bytes]]:
        done = driver.publish_many(given(), 0)
        return done, await driver._outbox.close()

    done, outbox = asyncio.run(scenario())
    return done, outbox, taken


def test_a_burst_goes_to_the_outbox_as_data_sections_and_one_too_large_is_refused_alone() -> None:
    large = bytes(_FRAME_MAX)
    done, outbox, _ = _publish_many([b"a" * 10, large, b"b" * 300, b"c" * 300], connected=True)
    assert (done.handed, dict(done.refused), done.down) == (4, {"failed": 1}, None)
    assert [data_body(message) for message in outbox] == [b"a" * 10, b"b" * 300, b"c" * 300]


def test_a_burst_that_finds_the_connection_down_hands_over_nothing() -> None:
    done, outbox, taken = _publish_many([b"a", b"b"], connected=False)
    assert (done.handed, isinstance(done.down, DisconnectedError), outbox) == (0, True, [])
    assert taken == [b"a"]  # the one that met the closed connection, built, as publish() would have
