"""SUT URLs: parsed once, every fault refused by name before any load starts. No broker needed."""

from __future__ import annotations

import asyncio

import pytest

from protocol.options import OptionError
from worker.drivers import driver_class, driver_for_client, parse_endpoint
from worker.drivers.amqp import AmqpDriver
from worker.drivers.amqp10 import Amqp10Driver
from worker.drivers.base import DriverError
from worker.drivers.kafka import KafkaDriver
from worker.drivers.mqtt import MqttDriver
from worker.drivers.nats import NatsDriver, _api_error, _stream_name
from worker.drivers.rabbit_stream import RabbitStreamDriver


@pytest.mark.parametrize(
    ("url", "cls"),
    [
        ("amqp://h/q", AmqpDriver),
        ("amqps://h/q", AmqpDriver),
        ("amqp10://h/addr", Amqp10Driver),
        ("kafka://h/topic", KafkaDriver),
        ("mqtts://h/topic", MqttDriver),
        ("rabbitmq-stream://h/s", RabbitStreamDriver),
        ("rabbitmq-stream+tls://h/s", RabbitStreamDriver),
        ("nats://h/subject", NatsDriver),
        ("nats+tls://h/subject", NatsDriver),
    ],
)
def test_the_scheme_chooses_the_driver(url: str, cls: type) -> None:
    assert driver_class(url) is cls


def test_a_full_url() -> None:
    _, e = parse_endpoint("amqps://maestro:s%3Acret@broker.lab/perf-q?prefetch=50&queue_type=quorum&confirms=false")
    assert (e.scheme, e.host, e.port, e.destination, e.tls) == ("amqps", "broker.lab", 5671, "perf-q", True)
    assert (e.username, e.password) == ("maestro", "s:cret")
    assert dict(e.options) == {"prefetch": 50, "queue_type": "quorum", "confirms": False}
    assert "s:cret" not in str(e) and "s:cret" not in repr(e)


def test_default_ports() -> None:
    urls = (
        "amqp://h/q",
        "amqp10://h/a",
        "kafka://h/t",
        "mqtt://h/t",
        "rabbitmq-stream://h/s",
        "rabbitmq-stream+tls://h/s",
        "nats://h/s",
        "nats+tls://h/s",
    )
    ports = {url: parse_endpoint(url)[1].port for url in urls}
    assert ports == {
        "amqp://h/q": 5672,
        "amqp10://h/a": 5672,
        "kafka://h/t": 9092,
        "mqtt://h/t": 1883,
        "rabbitmq-stream://h/s": 5552,  # RabbitMQ's stream port, and 5551 with TLS
        "rabbitmq-stream+tls://h/s": 5551,
        "nats://h/s": 4222,  # NATS serves TLS on its one port
        "nats+tls://h/s": 4222,
    }


@pytest.mark.parametrize(
    ("offset", "parsed"),
    [
        ("first", ("first", 0)),
        ("last", ("last", 0)),
        ("next", ("next", 0)),
        ("1234", ("offset", 1234)),
        ("2026-11-30T12:00:00Z", ("timestamp", 1_796_040_000_000)),
        ("2026-11-30T12:00:00", ("timestamp", 1_796_040_000_000)),  # no zone: UTC
        ("2026-11-30T13:00:00.250+01:00", ("timestamp", 1_796_040_000_250)),
    ],
)
def test_a_stream_consumer_starts_where_its_offset_says(offset: str, parsed: tuple[str, int]) -> None:
    _, e = parse_endpoint(f"rabbitmq-stream://h/s?offset={offset.replace('+', '%2B')}")
    assert e.options["offset"] == parsed


def test_a_stream_is_made_with_the_retention_the_url_gives() -> None:
    url = "rabbitmq-stream://h/s?max-length-bytes=2000000000&max-segment-size-bytes=500000000&max-age=7D&credit=3"
    _, e = parse_endpoint(url)
    assert dict(e.options) == {
        "max-length-bytes": 2_000_000_000,
        "max-segment-size-bytes": 500_000_000,
        "max-age": "7D",
        "credit": 3,
    }
    assert RabbitStreamDriver(e)._stream_arguments() == {  # the stream protocol's names
        "max-length-bytes": 2_000_000_000,
        "stream-max-segment-size-bytes": 500_000_000,
        "max-age": "7D",
    }


def test_one_slash_separates_host_and_destination() -> None:
    # RabbitMQ's AMQP 1.0 addresses start with a slash: amqp10://host//queue/q.
    assert parse_endpoint("amqp10://h//queue/q")[1].destination == "/queue/q"
    assert parse_endpoint("mqtt://h/a/b/c")[1].destination == "a/b/c"
    assert parse_endpoint("mqtt://h/$share/g/t")[1].destination == "$share/g/t"


def test_destinations_spread_clients_over_numbered_queues() -> None:
    _, e = parse_endpoint("amqp://h/perf-test-%d?destinations=1-100")
    assert [e.destination_for(c) for c in (0, 1, 99, 100, 250)] == [
        "perf-test-1",
        "perf-test-2",
        "perf-test-100",
        "perf-test-1",
        "perf-test-51",
    ]
    assert parse_endpoint("amqp://h/plain")[1].destination_for(7) == "plain"
    # Every %d is the number: a name that repeats it repeats the number.
    assert parse_endpoint("amqp://h/t%d-q%d?destinations=3-4")[1].destination_for(1) == "t4-q4"


def test_a_routing_keys_percent_d_is_the_clients_destination_number() -> None:
    """`routing_key=rk-%d` was sent literally: every client published with the key "rk-%d"."""
    url = "amqp://h/orders-%d?destinations=1-2&exchange=x&routing_key=rk-%d"
    keys = [(d.destination, d.routing_key) for d in (AmqpDriver(parse_endpoint(url)[1], c) for c in range(3))]
    assert keys == [("orders-1", "rk-1"), ("orders-2", "rk-2"), ("orders-1", "rk-1")]
    assert AmqpDriver(parse_endpoint("amqp://h/q?exchange=x&routing_key=k")[1], 5).routing_key == "k"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("amqp://h/q?prefetsh=5", "unknown option 'prefetsh' for amqp:// (known: "),
        ("amqp://h/q?prefetch=-1", "option 'prefetch': -1 is out of range (0 to 65535)"),
        ("amqp://h/q?ack=sometimes", "option 'ack': expected one of auto, manual"),
        ("kafka://h/t?acks=2", "option 'acks': expected one of 0, 1, all"),
        ("kafka://h/t?compression=brotli", "option 'compression'"),
        ("mqtt://h/t?qos=3", "option 'qos': 3 is out of range (0 to 2)"),
        ("mqtt://h/t?clean_session=maybe", "option 'clean_session': expected true or false"),
        ("amqp10://h/a?settle=sometimes", "option 'settle'"),
        ("rabbitmq-stream://h/s?offset=sometime", "option 'offset': expected first, last, next, an offset or an ISO"),
        ("rabbitmq-stream://h/s?max-age=7days", "option 'max-age': expected a whole number and a unit of Y, M, D"),
        ("rabbitmq-stream://h/s?max-age=0h", "option 'max-age'"),
        ("rabbitmq-stream://h/s?credit=0", "option 'credit': 0 is out of range (1 to 1000)"),
        ("rabbitmq-stream://h/s?max-segment-size-bytes=4000000000", "option 'max-segment-size-bytes'"),
        ("nats://h/s?jetstream=maybe", "option 'jetstream': expected true or false"),
        ("nats://h/s?deliver=sometimes", "option 'deliver': expected one of new, all, last"),
        ("nats://h/s?batch=0", "option 'batch': 0 is out of range (1 to 10000)"),
        ("nats://h/s?storage=tape", "option 'storage': expected one of file, memory"),
        ("amqp://h/q?destinations=9-1", "option 'destinations': expected a range such as 1-100"),
        ("amqp://h/perf-test-%d", "a %d in the destination and destinations=LOW-HIGH go together"),
        ("kafka://h/topic?destinations=1-10", "a %d in the destination (only %d is replaced) is missing"),
        ("amqp://h/q-%05d?destinations=1-10", "a %d in the destination (only %d is replaced) is missing"),
        ("amqp://h/q-%d", "go together; destinations=LOW-HIGH is missing"),
        ("amqp://h/q?exchange=x&routing_key=rk-%d", "routing_key's %d is the client's destination number"),
        ("mqtt://h/", "names no queue, topic or address"),
        ("mqtt:///t", "names no host"),
        ("mqtt://h:99999/t", "out of range"),
        ("http://h/q", "no driver"),
        ("stomp://h/q", "no driver"),
    ],
)
def test_faults_are_named(url: str, fragment: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_endpoint(url, "send_url")
    assert caught.value.name == "send_url"
    assert fragment in str(caught.value)


def test_a_password_never_shows_in_an_error() -> None:
    with pytest.raises(OptionError) as caught:
        parse_endpoint("amqp://u:hunter2@h/q?bogus=1", "receive_url")
    assert "hunter2" not in str(caught.value)
    assert "u:***@h" in str(caught.value)


def test_connect_failures_are_named_in_the_words_a_user_looks_for() -> None:
    import socket  # noqa: PLC0415

    from worker.drivers.base import connect_cause  # noqa: PLC0415

    assert connect_cause(ConnectionRefusedError(111, "Connect call failed")) == "connection refused"
    assert connect_cause(socket.gaierror(-2, "Name or service not known")) == "unknown host"
    assert connect_cause(TimeoutError()) == "no answer"
    assert connect_cause("amqp:unauthorized-access Authentication failed [mech=PLAIN]") == "authentication failed"
    assert connect_cause("Not authorized") == "authentication failed"
    assert connect_cause("proton.pythonio Connection refused to all addresses") == "connection refused"
    assert connect_cause("something else entirely") == "something else entirely"


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("mqtt://127.0.0.1:1883/t", r"request/reply needs MQTT 5 \(\?version=5\)"),
        ("rabbitmq-stream://127.0.0.1:5552/s", r"RabbitMQ Streams \(rstream\): request/reply is not supported"),
        ("nats://127.0.0.1:4222/s?jetstream=true", r"request/reply is core NATS's: drop jetstream=true"),
    ],
)
def test_a_driver_without_request_reply_refuses_it_by_name(url: str, refusal: str) -> None:
    """MQTT 3.1.1 has no response topic, a stream no reply address, and NATS's request/reply is
    its core's, not JetStream's: each says so instead of sending blind."""
    driver = driver_for_client([url], "send_url", 0)
    for call in (
        lambda: driver.serve(lambda batch: None),
        lambda: driver.open_replies(lambda batch: None),
    ):
        with pytest.raises(DriverError, match=refusal):
            asyncio.run(call())
    with pytest.raises(DriverError, match=refusal):
        driver.request(b"", 0, "1")


class _Message:
    """What `KafkaDriver._count_gaps` reads of a confluent-kafka Message."""

    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None


def _bursts(driver: KafkaDriver, *bursts: list[tuple[int, int]]) -> int:
    for burst in bursts:
        driver._count_gaps([_Message(p, o) for p, o in burst])
    return driver.skipped_by_sut


@pytest.mark.parametrize("assigned", [1, 2])  # one partition: counted per burst; several: per message
def test_kafka_offsets_a_fetch_passed_over_are_counted(assigned: int) -> None:
    _, endpoint = parse_endpoint("kafka://h/t")
    driver = KafkaDriver(endpoint)
    driver._assigned = assigned
    # 0-9 then 10-19: nothing skipped; 21-24 after 19: offset 20 was passed over.
    assert _bursts(driver, [(0, o) for o in range(10)], [(0, o) for o in range(10, 20)]) == 0
    assert _bursts(driver, [(0, o) for o in range(21, 25)]) == 1
    # A hole inside one burst (163 then 165), and a redelivery from before (no gap, no count).
    assert _bursts(driver, [(0, 25), (0, 26), (0, 28)]) == 2
    assert _bursts(driver, [(0, 20), (0, 21)]) == 2
    assert _bursts(driver, [(0, 29)]) == 2


def test_kafka_offsets_are_followed_per_partition_and_forgotten_at_a_rebalance() -> None:
    _, endpoint = parse_endpoint("kafka://h/t")
    driver = KafkaDriver(endpoint)
    driver._assigned = 2
    assert _bursts(driver, [(0, 0), (1, 0), (0, 1), (1, 1)]) == 0
    assert _bursts(driver, [(1, 3), (0, 2)]) == 1
    # After a rebalance a partition starts at its committed offset, past what this consumer saw.
    driver._next_offset.clear()
    assert _bursts(driver, [(0, 50), (0, 51)]) == 1


def test_kafka_a_reply_topic_the_broker_does_not_delete_in_time_is_told_and_the_close_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A requester's close deletes its reply topic; no answer to that (tansu under CI's load took
    over 15 s) must not fail the run whose figures are already written."""
    monkeypatch.setattr("worker.drivers.kafka._DELETE_TOPIC_S", 0.2)
    _, endpoint = parse_endpoint("kafka://127.0.0.1:1/requests")  # nothing listens on port 1
    driver = KafkaDriver(endpoint)
    with caplog.at_level("WARNING", logger="worker.drivers.kafka"):
        driver._delete_topic("maestro-replies-gone")
    assert "the reply topic maestro-replies-gone was not deleted: no answer within 0.2 s" in caplog.text


def test_a_jetstream_stream_the_nats_driver_makes_is_named_after_its_subject() -> None:
    # A stream's name has no `.`, `*` or `>`.
    assert _stream_name("orders.eu") == "maestro-orders_eu"
    assert _stream_name("orders.*.new") == "maestro-orders_any_new"
    assert _stream_name("orders.>") == "maestro-orders_all"


def test_a_jetstream_refusal_is_told_with_its_reason() -> None:
    answer = b'{"error":{"code":400,"err_code":10077,"description":"maximum messages exceeded"}}'
    assert _api_error(answer) == "JetStream refused it: maximum messages exceeded (code 10077)"
    assert _api_error(b'{"error"') == "JetStream refused it"
