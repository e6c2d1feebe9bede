"""What a real run's peer.json says of each worker's client library and settings (#40 item 9):
the library's settings in effect, its defaults included, for every protocol besides Kafka's
(tests/integration/test_cli_runs.py -k demo_needs has Kafka's); and for AMQP 0-9-1, RabbitMQ's
own view of a client's connection and channel agrees with what is listed."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.jetstream import delete_stream
from support.processes import BIN
from support.rabbit_queues import declare_queue, delete_queue

from worker.drivers import parse_endpoint

_MANAGEMENT = "http://127.0.0.1:15672/api"


def _urls(protocol: str, name: str) -> str:
    return {
        "amqp": f"amqp://guest:guest@127.0.0.1:5672/{name}",
        "amqp10": f"amqp10://guest:guest@127.0.0.1:5672//queue/{name}",
        "mqtt": f"mqtt://127.0.0.1:1883/maestro/{name}",
        "nats-jetstream": f"nats://127.0.0.1:4222/maestro.{name}?jetstream=true&stream={name}",
        "rabbitmq-stream": f"rabbitmq-stream://guest:guest@127.0.0.1:5552/{name}",
    }[protocol]


# What each protocol's sender and receiver must list, as the drivers' defaults leave them.
_EXPECTED: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "amqp": (
        {"aio-pika publisher_confirms": "true", "aio-pika mandatory": "true", "aiormq heartbeat": "60"},
        {"aio-pika prefetch_count": "100", "aio-pika no_ack": "false", "aio-pika reconnect_interval": "5"},
    ),
    "amqp10": (
        {"proton heartbeat": "none", "proton sender snd_settle_mode": "unsettled"},
        {"proton prefetch": "0: the driver gives credit, 100, one back per message", "proton auto_accept": "true"},
    ),
    "mqtt": (
        {"paho keepalive": "60", "paho max_inflight_messages": "1000", "paho qos": "1"},
        {"paho keepalive": "60", "paho clean_session": "true", "paho protocol": "MQTTv311"},
    ),
    "nats-jetstream": (
        {"nats-py reconnect_time_wait": "0.5", "nats-py ping_interval": "120"},
        {"jetstream pull batch": "100", "nats-py subscribe pending_msgs_limit": "524288"},
    ),
    "rabbitmq-stream": (
        {"rstream frame_max": "1048576", "rstream heartbeat": "60"},
        {"rstream initial_credit": "10", "rstream offset_specification": "next"},
    ),
}


@pytest.mark.rabbitmq
@pytest.mark.nats
@pytest.mark.mosquitto
@pytest.mark.embedded_broker
@pytest.mark.parametrize("protocol", list(_EXPECTED))
def test_a_real_runs_peer_json_lists_the_librarys_settings_in_effect(tmp_path: Path, protocol: str) -> None:
    name = f"settings-{uuid.uuid4().hex[:8]}"
    url = _urls(protocol, name)
    if protocol == "amqp10":
        declare_queue(name)  # RabbitMQ's /queue/NAME address needs the queue
    argv = ["--local", "--send-url", url, "--rate", "20", "--duration", "2s", "--quiet", "--no-report"]
    try:
        run = subprocess.run(
            [str(BIN / "maestro"), "test", "fixed-rate", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
    finally:
        if protocol in ("amqp", "amqp10", "rabbitmq-stream"):
            delete_queue(name)
        elif protocol == "nats-jetstream":
            delete_stream(name)
    assert run.returncode == 0, run.stdout + run.stderr
    (test_dir,) = [d for d in (tmp_path / "results").iterdir() if d.is_dir() and not d.name.startswith(".")]
    sending, receiving = _EXPECTED[protocol]
    for role, expected in (("sender", sending), ("receiver", receiving)):
        listed = json.loads(next(test_dir.glob(f"{role}/*/peer.json")).read_text())["client_settings"]
        assert {key: listed.get(key) for key in expected} == expected, (role, listed)
        # What the driver lists for the URL, every key and value, is what the run recorded.
        cls, endpoint = parse_endpoint(url, "send_url")
        assert listed == cls(endpoint, 0).settings(role == "sender"), role


def _management(path: str) -> Any:
    request = urllib.request.Request(f"{_MANAGEMENT}/{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer)


@pytest.mark.rabbitmq
def test_rabbitmq_sees_the_heartbeat_and_prefetch_an_amqp_client_lists() -> None:
    """The heartbeat aiormq asks for, and the prefetch and acks the driver's consumer takes, as
    RabbitMQ's management API shows a connected receiver's connection and consumer."""
    name = f"settings-{uuid.uuid4().hex[:8]}"
    cls, endpoint = parse_endpoint(f"amqp://guest:guest@127.0.0.1:5672/{name}", "receive_url")
    driver = cls(endpoint, 0)
    listed = driver.settings(False)

    async def seen() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        await driver.connect()
        try:
            await driver.receive(lambda burst: None)
            deadline = time.monotonic() + 15  # the management API's figures lag by seconds
            while True:
                connections = [
                    c
                    for c in _management("connections")
                    if c.get("client_properties", {}).get("connection_name") == f"maestro-{name}-0"
                ]
                consumers = [c for c in _management("consumers") if c["queue"]["name"] == name]
                if (connections and consumers) or time.monotonic() > deadline:
                    return connections, consumers
                await asyncio.sleep(0.5)
        finally:
            await driver.close()

    try:
        connections, consumers = asyncio.run(seen())
    finally:
        delete_queue(name)
    assert len(connections) == 1 and len(consumers) == 1, (connections, consumers)
    assert str(connections[0]["timeout"]) == listed["aiormq heartbeat"]
    assert str(consumers[0]["prefetch_count"]) == listed["aio-pika prefetch_count"]
    assert str(not consumers[0]["ack_required"]).lower() == listed["aio-pika no_ack"]
