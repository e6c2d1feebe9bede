"""#41 item 4: stream and JetStream figures where the servers expose them. The `rabbitmq`
inspector reads RabbitMQ's stream publishers and consumers from its management API (the
`rabbitmq_stream_management` plugin), and the `nats` inspector a NATS server's monitoring port
(`/varz`, `/jsz`): a server of the test's own, since the shared one on 4222 runs without it.
Each sample is checked against what the test itself sent and read, to the message."""

from __future__ import annotations

import asyncio
import csv
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.private_nats import NatsServer, private_nats
from support.processes import Daemons
from support.rabbit_queues import delete_queue
from support.runs import run_with

from coordinator import FixedRateTest
from inspector.nats import NatsSource
from inspector.sources import RabbitMqSource, Rows
from worker.drivers import parse_endpoint
from worker.drivers.base import Driver, connect_within

pytestmark = [pytest.mark.rabbitmq, pytest.mark.nats]

N = 500


async def _send_and_read(url: str) -> tuple[Driver, Driver]:
    """A receiver and a sender on `url`, N messages sent, settled and read: both left open (a
    stream's publisher and consumer show in the management API while they are connected)."""
    cls, endpoint = parse_endpoint(url)
    receiver, sender = cls(endpoint, 0), cls(endpoint, 1)
    got: list[bytes] = []
    settled: list[int] = []
    await connect_within(receiver, 10)
    await receiver.receive(lambda batch: got.extend(body for body, _ in batch))
    await connect_within(sender, 10)
    sender.on_settled = lambda count, error: settled.append(count if error is None else 0)
    await sender.start_sending()
    for first in range(0, N, 100):
        sender.publish_many((bytes(64) for _ in range(100)), first)
        await asyncio.sleep(0.01)
    deadline = time.monotonic() + 20
    while (sum(settled) < N or len(got) < N) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    assert (sum(settled), len(got)) == (N, N)
    return receiver, sender


def _until(sample: Any, done: Any, timeout_s: float = 20) -> Rows:
    """Samples until `done(rows)`, for at most `timeout_s`: the management API refreshes its
    figures every 5 s by default."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = sample()
        if done(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


@pytest.mark.timeout(90)
@pytest.mark.usefixtures("rabbitmq", "rabbitmq_stream")
def test_the_rabbitmq_inspector_reads_each_stream_publisher_and_consumer() -> None:
    stream = f"maestro-insp-{uuid.uuid4().hex[:8]}"
    source = RabbitMqSource("http://guest:guest@127.0.0.1:15672")

    def ours(rows: Rows, data_set: str) -> list[dict[str, Any]]:
        return [row for row in rows.get(data_set, []) if row["stream"] == stream]

    def counted(rows: Rows) -> bool:
        publishers, consumers = ours(rows, "stream_publishers"), ours(rows, "stream_consumers")
        return bool(publishers and consumers) and publishers[0]["confirmed"] == N and consumers[0]["consumed"] == N

    async def scenario() -> Rows:
        receiver, sender = await _send_and_read(f"rabbitmq-stream://guest:guest@127.0.0.1:5552/{stream}")
        try:
            return await asyncio.to_thread(_until, source.sample, counted)
        finally:
            await sender.close()
            await receiver.close()

    try:
        rows = asyncio.run(scenario())
    finally:
        delete_queue(stream)
    (publisher,) = ours(rows, "stream_publishers")
    (consumer,) = ours(rows, "stream_consumers")
    assert (publisher["published"], publisher["confirmed"], publisher["errored"]) == (N, N, 0), publisher
    # The consumer started at `next`, offset 0: it read every message, and is N - 1 messages in.
    assert (consumer["consumed"], consumer["offset_lag"], consumer["credits"]) == (N, 0, 10), consumer
    assert consumer["vhost"] == "/" and "5552" in consumer["connection"]
    (queue,) = [q for q in rows["queues"] if q["queue"] == stream]
    assert queue["type"] == "stream"


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    with private_nats() as server:
        yield server


@pytest.mark.timeout(90)
def test_the_nats_inspector_reads_the_server_and_its_jetstream(nats_server: NatsServer) -> None:
    source = NatsSource(f"http://127.0.0.1:{nats_server.monitor_port}")
    first = source.sample()  # before any stream: the server, and JetStream empty
    assert (first["jetstream"][0]["streams"], first["streams"], first["consumers"]) == (0, [], [])
    assert first["server"][0]["in_msgs_per_s"] is None  # no rate before a second sample

    async def scenario() -> Rows:
        receiver, sender = await _send_and_read(f"{nats_server.url('maestro.insp')}?jetstream=true&stream=insp")
        try:
            return await asyncio.to_thread(source.sample)
        finally:
            await sender.close()
            await receiver.close()

    rows = asyncio.run(scenario())
    (server,) = rows["server"]
    assert server["connections"] == 2 and server["version"].startswith("2.")
    # N publishes and N acknowledgements at least went in, and out, in the span between samples.
    assert server["in_msgs"] >= 2 * N and server["in_msgs_per_s"] > 0
    (jetstream,) = rows["jetstream"]
    assert (jetstream["streams"], jetstream["consumers"], jetstream["messages"]) == (1, 1, N)
    (stream,) = rows["streams"]
    assert (stream["stream"], stream["messages"], stream["first_seq"], stream["last_seq"]) == ("insp", N, 1, N)
    (consumer,) = rows["consumers"]
    assert (consumer["consumer"], consumer["pending"], consumer["ack_pending"]) == ("maestro", 0, 0)
    assert consumer["delivered_seq"] == consumer["ack_floor_seq"] == N


@pytest.mark.mosquitto
@pytest.mark.timeout(180)
def test_a_nats_inspector_beside_a_jetstream_test(
    nats_server: NatsServer, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    """The inspector daemon during a 4 s JetStream test: a row a second in each data set, and the
    stream's last row holding every message the test sent."""
    url, root = data_server
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-inspector", "i1")
    test = FixedRateTest(
        send_url=f"{nats_server.url('maestro.insp')}?jetstream=true&stream=insp",
        rate=100,
        duration="4s",
        options={"inspector_interval_s": 1},
        inspectors=(f"nats=http://127.0.0.1:{nats_server.monitor_port}",),
    )
    result = run_with(daemons, url, test, peers=3)
    assert result.passed, result.reason
    assert result.summary.sent == result.summary.received == 400
    folder = root / result.test_id / "inspector" / "i1"
    with (folder / "nats-streams.csv").open() as f:
        streams = [row for row in csv.DictReader(f) if row["stream"] == "insp"]
    assert len(streams) >= 4 and int(streams[-1]["messages"]) == 400, streams
    assert {"nats-server.csv", "nats-jetstream.csv", "nats-consumers.csv"} <= {p.name for p in folder.iterdir()}
    info = json.loads((folder / "peer.json").read_text())
    assert info["inspectors"]["nats"]["errors"] == 0
