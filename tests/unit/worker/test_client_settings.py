"""What a worker records of its client library and settings (peer.json `client_settings`, the
report's table): the URL's options, the library configuration a driver builds from them, and
what is left to defaults named, never a password."""

from __future__ import annotations

import re

from protocol.results import PeerRecord
from worker.drivers import parse_endpoint


def _settings(url: str, sending: bool = True) -> dict[str, str]:
    cls, endpoint = parse_endpoint(url, "send_url")
    return cls(endpoint, 0).settings(sending)


def test_kafka_leaves_linger_to_librdkafka_unless_the_url_sets_it() -> None:
    default = _settings("kafka://user:s3cret@127.0.0.1:9092/t?acks=1")
    assert "librdkafka linger.ms" not in default and default["librdkafka acks"] == "1"
    assert default["librdkafka sasl.username"] == "user" and "s3cret" not in repr(default)
    assert re.fullmatch(r"confluent-kafka [\d.]+ \(librdkafka [\d.]+\)", default["library"]), default
    assert default["everything else"].startswith("librdkafka's defaults")
    asked = _settings("kafka://127.0.0.1:9092/t?linger_ms=20")
    assert (asked["url linger_ms"], asked["librdkafka linger.ms"]) == ("20", "20")


def test_a_kafka_receiver_records_its_consumer_settings() -> None:
    consumer = _settings("kafka://127.0.0.1:9092/t?group=g1&fetch_wait_max_ms=2", sending=False)
    assert (consumer["librdkafka group.id"], consumer["librdkafka fetch.wait.max.ms"]) == ("g1", "2")
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
