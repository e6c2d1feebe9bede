"""#17 item 5: paths that cross protocols, through a RabbitMQ node of the test's own with its MQTT
plugin on a port of its own (the shared node's would take Mosquitto's 1883), its AMQP 1.0 plugin
and its stream plugin. The measurement header travels in the body, so counts, loss and latency
come out the same whichever protocol took the message in and which gave it out. A stream is a
queue to AMQP 0-9-1 (#41): what the stream protocol wrote, an AMQP 0-9-1 consumer reads, and
the other way round. A NATS server of the test's own bridges MQTT: an MQTT topic's `/` is a
subject's `.`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.outage import check_latency_log
from support.private_nats import NatsServer, private_nats
from support.private_rabbitmq import RabbitNode, private_rabbitmq
from support.processes import Daemons
from support.runs import run_with

from coordinator import FixedRateTest

# Quiet: each path's p50 is held to 4 ms (0.6-1.4 ms measured alone); beside two other tests on
# 2 cores under load 5-8 (2026-11-29) three paths read 5.8 ms and more, and failed.
pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq, pytest.mark.nats, pytest.mark.quiet]


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitNode]:
    with private_rabbitmq(("rabbitmq_amqp1_0", "rabbitmq_mqtt", "rabbitmq_stream")) as node:
        yield node


@pytest.fixture(scope="module")
def nats_with_mqtt() -> Iterator[NatsServer]:
    with private_nats(mqtt=True) as server:
        yield server


def _run_path(daemons: Daemons, data_server: tuple[str, Path], send_url: str, receive_url: str) -> None:
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    test = FixedRateTest(send_url=send_url, receive_url=receive_url, rate=100, parallel=2, duration="4s")
    result = run_with(daemons, data_server[0], test, peers=2)
    assert result.passed, result.reason
    s = result.summary.to_json()
    # Exact: 2 clients x 100 msg/s x 4 s, every one received once.
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (800, 800, 0, 0), s
    assert s["foreign"] == {}
    # A sample per message, and each the message's own arrival less its intended time, as its
    # row in the receiver's rate file has them: the header crossed the protocols intact.
    assert s["latency_samples"] == 800
    assert check_latency_log(data_server[1] / result.test_id / "receiver" / "r1") == 800
    # Through a broker on loopback at 200 msg/s: about a millisecond, not a clamped 1 µs nor a
    # clock's skew (p50 0.6-1.4 ms and p99 under 10 ms measured here). The p50 bound is 4 ms: a
    # 5 ms added to every message's latency, consistently, fails it (it passed 100-20,000 µs).
    lat = s["latency_us"]
    assert 100 <= lat["p50"] <= 4_000 and lat["p99"] <= 200_000, lat


@pytest.mark.timeout(240)
def test_publish_over_mqtt_consume_over_amqp_0_9_1(
    rabbit: RabbitNode, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    # The MQTT plugin publishes to amq.topic, a topic's / becoming a routing key's dot.
    name = f"xp-{uuid.uuid4().hex[:8]}"
    send_url = f"mqtt://guest:guest@127.0.0.1:{rabbit.mqtt_port}/maestro/{name}?qos=1"
    receive_url = f"amqp://guest:guest@127.0.0.1:{rabbit.port}/{name}?exchange=amq.topic&routing_key=maestro.{name}"
    _run_path(daemons, data_server, send_url, receive_url)


@pytest.mark.timeout(240)
def test_publish_over_amqp_0_9_1_consume_over_amqp_1_0(
    rabbit: RabbitNode, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    queue = f"xp-{uuid.uuid4().hex[:8]}"
    # The receiver attaches first: the AMQP 1.0 plugin makes /queue/NAME a queue as the 0-9-1
    # side declares it (not durable), so the sender's declaration matches.
    send_url = f"amqp://guest:guest@127.0.0.1:{rabbit.port}/{queue}"
    receive_url = f"amqp10://guest:guest@127.0.0.1:{rabbit.port}//queue/{queue}"
    _run_path(daemons, data_server, send_url, receive_url)


@pytest.mark.timeout(240)
def test_publish_over_the_stream_protocol_consume_over_amqp_0_9_1(
    rabbit: RabbitNode, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    # The receiver declares the stream as an AMQP 0-9-1 queue of type stream (durable, as a stream
    # must be) and consumes it from the next offset, as an AMQP 0-9-1 consumer of a stream does.
    # Every consumer of a stream reads all of it: each of the two clients has a stream of its own
    # (%d), or each message would be received twice.
    stream = f"xp-{uuid.uuid4().hex[:8]}-%d?destinations=1-2"
    send_url = f"rabbitmq-stream://guest:guest@127.0.0.1:{rabbit.stream_port}/{stream}"
    receive_url = f"amqp://guest:guest@127.0.0.1:{rabbit.port}/{stream}&queue_type=stream"
    _run_path(daemons, data_server, send_url, receive_url)


@pytest.mark.timeout(240)
def test_publish_over_amqp_0_9_1_consume_over_the_stream_protocol(
    rabbit: RabbitNode, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    # RabbitMQ stores what AMQP 0-9-1 published to a stream as AMQP 1.0, its properties in
    # sections before the body: the stream driver reads the body from its Data section.
    stream = f"xp-{uuid.uuid4().hex[:8]}-%d?destinations=1-2"  # a stream per client, as above
    send_url = f"amqp://guest:guest@127.0.0.1:{rabbit.port}/{stream}&queue_type=stream"
    receive_url = f"rabbitmq-stream://guest:guest@127.0.0.1:{rabbit.stream_port}/{stream}"
    _run_path(daemons, data_server, send_url, receive_url)


@pytest.mark.timeout(240)
def test_publish_over_mqtt_consume_over_nats(
    nats_with_mqtt: NatsServer, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    # The two NATS clients share the subject as a queue group: each message once.
    name = f"xp-{uuid.uuid4().hex[:8]}"
    send_url = f"mqtt://127.0.0.1:{nats_with_mqtt.mqtt_port}/maestro/{name}?qos=1"
    receive_url = f"{nats_with_mqtt.url(f'maestro.{name}')}?queue=maestro"
    _run_path(daemons, data_server, send_url, receive_url)


@pytest.mark.timeout(240)
def test_publish_over_nats_jetstream_consume_over_mqtt(
    nats_with_mqtt: NatsServer, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    # Each MQTT client subscribes to every message of its topic: each of the two has a topic of
    # its own (%d). The JetStream streams the senders make go with the server.
    name = f"xp-{uuid.uuid4().hex[:8]}-%d"
    send_url = f"{nats_with_mqtt.url(f'maestro.{name}')}?jetstream=true&destinations=1-2"
    receive_url = f"mqtt://127.0.0.1:{nats_with_mqtt.mqtt_port}/maestro/{name}?qos=1&destinations=1-2"
    _run_path(daemons, data_server, send_url, receive_url)
