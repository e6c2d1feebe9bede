"""The RabbitMQ Streams driver's own options against the shared node's stream plugin: where a
consumer starts (first, last, next, an offset, a time), its credit, and the retention of a stream
it makes, each read back from the broker (its management API) or from what the consumer got; and
a consumer whose connection the broker closed going on from where it was. Every stream a test
makes is deleted after it."""

from __future__ import annotations

import asyncio
import base64
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from support.rabbit_queues import delete_queue

from inspector.sources import HttpJson
from worker.drivers import parse_endpoint
from worker.drivers.base import Driver, SendError, connect_within
from worker.payload import MessageHeader, make_body, read_header

pytestmark = [pytest.mark.rabbitmq, pytest.mark.usefixtures("rabbitmq", "rabbitmq_stream")]

MANAGEMENT = HttpJson("test", "http://guest:guest@127.0.0.1:15672", 10)
_GUEST_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


@pytest.fixture
def stream() -> Iterator[str]:
    name = f"maestro-stream-{uuid.uuid4().hex[:8]}"
    yield name
    delete_queue(name)  # a stream is a queue to AMQP 0-9-1


def _driver(url: str) -> Driver:
    cls, endpoint = parse_endpoint(url)
    return cls(endpoint)


async def _publish(url: str, sequences: range) -> None:
    """Messages numbered `sequences`, each confirmed before this returns."""
    sender = _driver(url)
    settled: list[SendError | None] = []
    sender.on_settled = lambda count, error: settled.extend([error] * count)
    await connect_within(sender, 10)
    await sender.start_sending()
    try:
        done = sender.publish_many((make_body(MessageHeader(1, 1, s, 0, 0), 64, bytes(64)) for s in sequences), 0)
        assert (done.handed, done.down) == (len(sequences), None)
        deadline = time.monotonic() + 10
        while len(settled) < len(sequences) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        assert settled == [None] * len(sequences)
    finally:
        await sender.close()


async def _consume(url: str, quiet_s: float = 1.5) -> tuple[Driver, list[int]]:
    """A consumer started at the URL's offset, and the sequence numbers it got until `quiet_s`
    passed without one; still consuming (the caller closes it)."""
    receiver = _driver(url)
    got: list[int] = []
    await connect_within(receiver, 10)
    await receiver.receive(lambda batch: got.extend(read_header(body).sequence for body, _ in batch))
    seen, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < quiet_s:
        if len(got) != seen:
            seen, quiet_since = len(got), time.monotonic()
        await asyncio.sleep(0.05)
    return receiver, got


@pytest.mark.timeout(120)
def test_a_consumer_starts_where_its_offset_says(stream: str) -> None:
    """Ten messages, a pause, ten more: `first` gets all twenty, an offset the ones from it, a
    time between the two bursts the second burst, `last` the last chunk (the tail of the second
    burst), and `next` only what is published after it subscribed."""
    url = f"rabbitmq-stream://guest:guest@127.0.0.1:5552/{stream}"

    async def scenario() -> dict[str, list[int]]:
        await _publish(url, range(10))
        await asyncio.sleep(1.1)  # the second burst in chunks of their own, with later timestamps
        between = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        await asyncio.sleep(0.1)
        await _publish(url, range(10, 20))
        got = {}
        for offset in ("first", "5", between, "last"):
            receiver, got[offset] = await _consume(f"{url}?offset={offset}")
            await receiver.close()
        receiver, before = await _consume(f"{url}?offset=next", quiet_s=1.0)
        await _publish(url, range(20, 25))
        got["next"] = await _wait_for(before, 5)
        await receiver.close()
        return {("time" if key == between else key): value for key, value in got.items()}

    got = asyncio.run(scenario())
    assert got["first"] == list(range(20))
    assert got["5"] == list(range(5, 20))
    assert got["time"] == list(range(10, 20))
    assert got["last"] and got["last"] == list(range(20 - len(got["last"]), 20)), got["last"]
    assert got["next"] == list(range(20, 25))


async def _wait_for(got: list[int], count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:  # noqa: ASYNC110 - the driver's callback fills it
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # one too many would come now
    return got


@pytest.mark.timeout(60)
def test_a_stream_made_by_the_driver_has_the_retention_the_url_gives(stream: str) -> None:
    url = (
        f"rabbitmq-stream://guest:guest@127.0.0.1:5552/{stream}"
        "?max-length-bytes=5000000&max-segment-size-bytes=1000000&max-age=2h"
    )

    async def connect() -> None:
        driver = _driver(url)
        await connect_within(driver, 10)
        await driver.close()

    asyncio.run(connect())
    queue = MANAGEMENT.request(f"/api/queues/%2F/{stream}")
    assert queue["type"] == "stream"
    assert queue["arguments"] == {
        "x-queue-type": "stream",
        "x-max-length-bytes": 5_000_000,
        "x-stream-max-segment-size-bytes": 1_000_000,
        "x-max-age": "2h",
    }


@pytest.mark.timeout(60)
def test_a_consumer_holds_the_credit_the_url_gives(stream: str) -> None:
    """The broker's view of two subscriptions, on two streams (its management API's stream
    consumers): the credit each was given, which rstream gives back a chunk at a time."""
    streams = {f"{stream}-a": 1, f"{stream}-b": 7}

    async def scenario() -> dict[str, int]:
        receivers = [
            (await _consume(f"rabbitmq-stream://guest:guest@127.0.0.1:5552/{name}?credit={credit}", quiet_s=0.1))[0]
            for name, credit in streams.items()
        ]
        try:
            held: dict[str, int] = {}
            deadline = time.monotonic() + 15  # the management API's view is refreshed every few seconds
            while len(held) < len(streams) and time.monotonic() < deadline:
                consumers = await asyncio.to_thread(MANAGEMENT.request, "/api/stream/consumers")
                held = {c["queue"]["name"]: c["credits"] for c in consumers if c["queue"]["name"] in streams}
                await asyncio.sleep(0.5)
            return held
        finally:
            for receiver in receivers:
                await receiver.close()

    try:
        assert asyncio.run(scenario()) == streams
    finally:
        for name in streams:
            delete_queue(name)


@pytest.mark.timeout(90)
def test_a_consumer_whose_connection_the_broker_closed_goes_on_from_where_it_was(stream: str) -> None:
    """100 messages read, the consumer's connection closed by the broker (its management API, as
    an operator would), 100 more: each of the 200 read once, none twice, none missed."""
    url = f"rabbitmq-stream://guest:guest@127.0.0.1:5552/{stream}"

    async def scenario() -> list[int]:
        receiver, got = await _consume(url, quiet_s=0.1)
        try:
            await _publish(url, range(100))
            await _wait_for(got, 100)
            await asyncio.to_thread(_close_connections, f"maestro-{stream}-0-")
            deadline = time.monotonic() + 20
            while not receiver.reconnects_ns and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            assert receiver.reconnects_ns, "the consumer did not come back"
            await _publish(url, range(100, 200))
            return await _wait_for(got, 200)
        finally:
            await receiver.close()

    assert asyncio.run(scenario()) == list(range(200))


def _close_connections(named: str) -> None:
    """Close, through the management API, the stream connections whose client-given name starts
    with `named` (the API lists a connection a few seconds after it opened)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        found = [
            c["name"]
            for c in MANAGEMENT.request("/api/stream/connections")
            if c.get("user_provided_name", "").startswith(named)
        ]
        if found:
            for name in found:
                where = f"http://127.0.0.1:15672/api/connections/{urllib.parse.quote(name, safe='')}"
                request = urllib.request.Request(where, method="DELETE", headers={"Authorization": _GUEST_AUTH})
                with urllib.request.urlopen(request, timeout=10) as answer:
                    assert answer.status == 204
            return
        time.sleep(0.5)
    raise AssertionError(f"no stream connection named {named}... in the management API")
