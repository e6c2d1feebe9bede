"""What a worker records of its client library and settings (peer.json `client_settings`, the
report's table): the URL's options, the library configuration a driver builds from them, and
what is left to defaults named, never a password."""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any, cast

import aio_pika
import aiormq
import nats.aio.client as nats_client
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from proton.reactor import Container
from rstream import Consumer, Producer

from protocol.results import PeerRecord
from worker.drivers import parse_endpoint
from worker.drivers.amqp10 import Amqp10Driver
from worker.drivers.base import shown
from worker.drivers.mqtt import MqttDriver
from worker.drivers.nats import NatsDriver


def _settings(url: str, sending: bool = True) -> dict[str, str]:
    cls, endpoint = parse_endpoint(url, "send_url")
    return cls(endpoint, 0).settings(sending)


def test_kafka_leaves_linger_to_librdkafka_unless_the_url_sets_it() -> None:
    default = _settings("kafka://user:s3cret@127.0.0.1:9092/t?acks=1")
    assert default["librdkafka acks"] == "1"
    # #40: "every client setting in effect, defaults included": librdkafka's own, as it reports
    # them (its CONFIGURATION.md: linger 5 ms since 1.5, 10,000 a batch, 300 s to deliver).
    assert default["librdkafka linger.ms"] == "5 (librdkafka's default)"
    assert default["librdkafka batch.num.messages"] == "10000 (librdkafka's default)"
    assert default["librdkafka enable.idempotence"] == "false (librdkafka's default)"
    assert default["librdkafka sasl.username"] == "user" and "s3cret" not in repr(default)
    assert re.fullmatch(r"confluent-kafka [\d.]+ \(librdkafka [\d.]+\)", default["library"]), default
    assert default["everything else"].startswith("librdkafka's defaults")
    asked = _settings("kafka://127.0.0.1:9092/t?linger_ms=20")
    assert (asked["url linger_ms"], asked["librdkafka linger.ms"]) == ("20", "20")


def test_a_kafka_receiver_records_its_consumer_settings() -> None:
    consumer = _settings("kafka://127.0.0.1:9092/t?group=g1&fetch_wait_max_ms=2", sending=False)
    assert (consumer["librdkafka group.id"], consumer["librdkafka fetch.wait.max.ms"]) == ("g1", "2")
    assert consumer["librdkafka fetch.min.bytes"] == "1 (librdkafka's default)"
    assert consumer["librdkafka queued.min.messages"] == "100000 (librdkafka's default)"
    assert "librdkafka linger.ms" not in consumer
    assert "librdkafka acks" not in consumer and "librdkafka on_delivery" not in consumer
    # Without group=, the group its consumers join: the topic's (it read "?" at first).
    assert _settings("kafka://127.0.0.1:9092/t", sending=False)["librdkafka group.id"] == "maestro-t"


def test_other_drivers_record_their_library_and_the_urls_options() -> None:
    amqp = _settings("amqp://guest:guest@127.0.0.1:5672/q?prefetch=5")
    assert re.fullmatch(r"aio-pika [\d.]+", amqp["library"]) and amqp["url prefetch"] == "5"
    assert "guest" not in repr(amqp)
    mqtt = _settings("mqtt://127.0.0.1:1883/a/b?qos=1")
    assert mqtt["library"].startswith("paho-mqtt ") and mqtt["url qos"] == "1"


def test_peer_json_keeps_the_settings_and_an_older_one_has_none() -> None:
    record = PeerRecord("s1", "sender", client_settings={"library": "aio-pika 10.2.1", "url prefetch": "5"})
    assert record.to_json()["client_settings"] == {"library": "aio-pika 10.2.1", "url prefetch": "5"}
    assert PeerRecord.from_json(record.to_json()).client_settings == record.client_settings
    assert "client_settings" not in PeerRecord("s1", "sender").to_json()


# --- each driver lists its library's settings in effect, read from what it hands the library ---


@pytest.mark.parametrize(
    "url",
    [
        "amqp://user:s3cret@127.0.0.1:5672/q",
        "amqp10://user:s3cret@127.0.0.1:5672//queue/q",
        "mqtt://user:s3cret@127.0.0.1:1883/a/b",
        "nats://user:s3cret@127.0.0.1:4222/a.b?jetstream=true",
        "rabbitmq-stream://user:s3cret@127.0.0.1:5552/s",
    ],
)
@pytest.mark.parametrize("sending", [True, False])
def test_each_driver_lists_its_librarys_settings_and_never_the_password(url: str, sending: bool) -> None:
    settings = _settings(url, sending)
    prefix = settings["library"].split()[0].removeprefix("python-qpid-").removesuffix("-mqtt")
    listed = [key for key in settings if key.startswith(("aio-pika ", "aiormq ", prefix))]
    assert len(listed) >= 5, settings
    assert "s3cret" not in repr(settings)


def test_mqtt_lists_what_its_paho_client_holds_and_connects_with() -> None:
    cls, endpoint = parse_endpoint("mqtt://127.0.0.1:1883/a/b", "send_url")
    driver = cast(MqttDriver, cls(endpoint, 0))
    settings = driver.settings(True)
    client = driver._client
    paho_own = mqtt.Client(CallbackAPIVersion.VERSION2)
    # paho's own keepalive (60 s) unless the URL sets one; the worker's window as paho's bound.
    assert settings["paho keepalive"] == str(client.keepalive) == str(paho_own.keepalive)
    assert settings["paho max_inflight_messages"] == str(client.max_inflight_messages) == str(driver.window())
    assert settings["paho max_queued_messages"] == str(paho_own.max_queued_messages)
    assert (settings["paho protocol"], settings["paho clean_session"], settings["paho qos"]) == (
        "MQTTv311",
        "true",
        "1",
    )
    # The keepalive listed is the one CONNECT carries.
    connected: list[tuple[Any, ...]] = []
    client.connect = lambda *args, **kwargs: connected.append(args)  # type: ignore[method-assign]
    driver._open()
    assert connected == [("127.0.0.1", 1883, client.keepalive)]
    asked = cast(MqttDriver, cls(parse_endpoint("mqtt://h/t?keepalive_s=10&max_inflight=7", "send_url")[1], 0))
    assert (asked._client.keepalive, asked._client.max_inflight_messages) == (10, 7)
    assert (asked.settings(True)["paho keepalive"], asked.settings(True)["paho max_inflight_messages"]) == ("10", "7")
    v5 = _settings("mqtt://h/t?version=5")
    assert (v5["paho protocol"], v5["paho clean_start"]) == ("MQTTv5", "first connect only")


def test_amqp_lists_aio_pikas_and_aiormqs_defaults_as_their_objects_hold_them() -> None:
    async def unconnected() -> tuple[Any, Any, int]:  # built, never connected: their defaults
        robust = aio_pika.RobustConnection("amqp://127.0.0.1/")
        return robust.reconnect_interval, robust.fail_fast, aiormq.Connection("amqp://127.0.0.1/").heartbeat_timeout

    reconnect_interval, fail_fast, heartbeat = asyncio.run(unconnected())
    settings = _settings("amqp://127.0.0.1:5672/q")
    assert (settings["aio-pika reconnect_interval"], settings["aio-pika fail_fast"]) == (
        shown(reconnect_interval),
        shown(fail_fast),
    )
    assert settings["aiormq heartbeat"] == str(heartbeat)
    assert (settings["aio-pika publisher_confirms"], settings["aio-pika mandatory"]) == ("true", "true")
    assert settings["aio-pika prefetch_count"] == "100" and settings["aio-pika no_ack"] == "false"
    unconfirmed = _settings("amqp://127.0.0.1:5672/q?confirms=false&prefetch=0&ack=auto&persistent=true")
    assert (unconfirmed["aio-pika publisher_confirms"], unconfirmed["aio-pika mandatory"]) == ("false", "false")
    assert (unconfirmed["aio-pika prefetch_count"], unconfirmed["aio-pika no_ack"]) == ("0", "true")
    assert unconfirmed["aio-pika delivery_mode"] == aio_pika.DeliveryMode.PERSISTENT.name


def test_amqp10_leaves_heartbeat_and_reconnect_to_proton_and_lists_its_credit() -> None:
    cls, endpoint = parse_endpoint("amqp10://127.0.0.1:5672//queue/q", "send_url")
    driver = cast(Amqp10Driver, cls(endpoint, 0))
    assert driver.connect_options() == {}  # what on_start hands Container.connect beside the URL
    sending = driver.settings(True)
    assert (
        sending["proton heartbeat"] == "none"
        and inspect.signature(Container.connect).parameters["heartbeat"].default is None
    )
    assert sending["proton reconnect"].startswith("proton's backoff: 0, then 0.1 s")
    assert sending["proton sender snd_settle_mode"] == "unsettled"
    receiving = driver.settings(False)
    assert receiving["proton prefetch"] == f"0: the driver gives credit, {driver._credit()}, one back per message"
    assert driver._credit() == 100 and "proton sender snd_settle_mode" not in receiving
    presettled = _settings("amqp10://h//queue/q?settle=presettled&credit=7", sending=True)
    assert presettled["proton sender snd_settle_mode"] == "settled (AtMostOnce)"
    assert _settings("amqp10://h//queue/q?credit=7", sending=False)["proton prefetch"].startswith(
        "0: the driver gives credit, 7,"
    )


def test_nats_lists_the_connect_arguments_it_hands_nats_py_and_nats_pys_defaults() -> None:
    cls, endpoint = parse_endpoint("nats://127.0.0.1:4222/a.b", "send_url")
    driver = cast(NatsDriver, cls(endpoint, 0))
    settings = driver.settings(True)
    given = driver.connect_options()
    assert settings["nats-py reconnect_time_wait"] == shown(given["reconnect_time_wait"]) == "0.5"
    assert settings["nats-py connect_timeout"] == str(given["connect_timeout"])
    assert settings["nats-py max_reconnect_attempts"] == "-1" and "nats-py subscribe pending_msgs_limit" not in settings
    assert settings["nats-py ping_interval"] == str(nats_client.DEFAULT_PING_INTERVAL)
    assert settings["nats-py pending_size"] == str(nats_client.DEFAULT_PENDING_SIZE)
    receiving = _settings("nats://127.0.0.1:4222/a.b?jetstream=true&batch=10", sending=False)
    assert receiving["jetstream pull batch"] == "10" and receiving["nats-py subscribe pending_msgs_limit"].isdigit()


def test_rabbit_stream_lists_rstreams_own_defaults_and_keeps_them_in_its_pool() -> None:
    frame_max = inspect.signature(Producer).parameters["frame_max"].default
    heartbeat = inspect.signature(Producer).parameters["heartbeat"].default
    sending = _settings("rabbitmq-stream://127.0.0.1:5552/s")
    assert (sending["rstream frame_max"], sending["rstream heartbeat"]) == (str(frame_max), str(heartbeat))
    assert sending["rstream recovery_strategy"].startswith("off")
    receiving = _settings("rabbitmq-stream://127.0.0.1:5552/s?offset=first", sending=False)
    credit = inspect.signature(Consumer.subscribe).parameters["initial_credit"].default
    assert (receiving["rstream initial_credit"], receiving["rstream offset_specification"]) == (str(credit), "first")
