"""#17 item 5: paths that cross protocols, through a RabbitMQ node of the test's own with its MQTT
plugin on a port of its own (the shared node's would take Mosquitto's 1883) and its AMQP 1.0
plugin. The measurement header travels in the body, so counts, loss and latency come out the
same whichever protocol took the message in and which gave it out."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.private_rabbitmq import RabbitNode, private_rabbitmq
from support.processes import Daemons
from support.runs import run_with

from coordinator import FixedRateTest

pytestmark = [pytest.mark.mosquitto, pytest.mark.rabbitmq]


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitNode]:
    with private_rabbitmq(("rabbitmq_amqp1_0", "rabbitmq_mqtt")) as node:
        yield node


def _run_path(daemons: Daemons, data_server: str, send_url: str, receive_url: str) -> None:
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    test = FixedRateTest(send_url=send_url, receive_url=receive_url, rate=100, parallel=2, duration="4s")
    result = run_with(daemons, data_server, test, peers=2)
    assert result.passed, result.reason
    s = result.summary
    # Exact: 2 clients x 100 msg/s x 4 s, every one received once.
    assert (s["sent"], s["received"], s["lost"], s["duplicates"]) == (800, 800, 0, 0), s
    assert s["foreign"] == {}
    lat = s["latency_us"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"], lat


@pytest.mark.timeout(240)
def test_publish_over_mqtt_consume_over_amqp_0_9_1(
    rabbit: RabbitNode, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    # The MQTT plugin publishes to amq.topic, a topic's / becoming a routing key's dot.
    name = f"xp-{uuid.uuid4().hex[:8]}"
    send_url = f"mqtt://guest:guest@127.0.0.1:{rabbit.mqtt_port}/maestro/{name}?qos=1"
    receive_url = f"amqp://guest:guest@127.0.0.1:{rabbit.port}/{name}?exchange=amq.topic&routing_key=maestro.{name}"
    _run_path(daemons, data_server[0], send_url, receive_url)


@pytest.mark.timeout(240)
def test_publish_over_amqp_0_9_1_consume_over_amqp_1_0(
    rabbit: RabbitNode, daemons: Daemons, data_server: tuple[str, Path]
) -> None:
    queue = f"xp-{uuid.uuid4().hex[:8]}"
    # The receiver attaches first: the AMQP 1.0 plugin makes /queue/NAME a queue as the 0-9-1
    # side declares it (not durable), so the sender's declaration matches.
    send_url = f"amqp://guest:guest@127.0.0.1:{rabbit.port}/{queue}"
    receive_url = f"amqp10://guest:guest@127.0.0.1:{rabbit.port}//queue/{queue}"
    _run_path(daemons, data_server[0], send_url, receive_url)
