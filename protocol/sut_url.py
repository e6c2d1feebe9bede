"""A SUT URL, `scheme://[user:pw@]host[:port]/destination?option=value&...`, parsed and checked
in one place: the scheme against `protocol.schemes`, each query option against what its driver
understands. The coordinator refuses a bad URL before any daemon tries it; the worker's drivers
read the parsed `Endpoint`."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from protocol.parsing import boolean, choice, integer, number_range, text
from protocol.schemes import SUT_SCHEMES
from protocol.secrets import redact_text

__all__ = [
    "COMMON_OPTIONS",
    "DRIVER_OPTIONS",
    "Endpoint",
    "SutUrlError",
    "parse_sut_url",
    "split_urls",
    "stream_max_age",
    "stream_offset",
]


class SutUrlError(ValueError):
    pass


# Options every driver understands.
COMMON_OPTIONS: dict[str, Callable[[Any], Any]] = {"ca": text, "insecure": boolean, "destinations": number_range}


def stream_offset(value: Any) -> tuple[str, int]:
    """Where a stream consumer starts: `first`, `last`, `next`, an offset (a whole number) or a
    time (ISO 8601, `2026-11-30T12:00:00Z`; without a zone, UTC): (`first`|`last`|`next`, 0),
    (`offset`, the offset) or (`timestamp`, ms since the epoch)."""
    word = text(value).strip()
    if word in ("first", "last", "next"):
        return word, 0
    if word.isdigit():
        return "offset", int(word)
    try:
        moment = datetime.fromisoformat(word)
    except ValueError as exc:
        raise ValueError(f"expected first, last, next, an offset or an ISO 8601 time, got {value!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return "timestamp", int(moment.timestamp() * 1000)


def stream_max_age(value: Any) -> str:
    """A stream's `max-age` as RabbitMQ reads it: a whole number and a unit, Y M D h m s (`7D`, `12h`)."""
    word = text(value).strip()
    if not re.fullmatch(r"[1-9]\d*[YMDhms]", word):
        raise ValueError(f"expected a whole number and a unit of Y, M, D, h, m or s (7D, 12h), got {value!r}")
    return word


# What each driver understands in the query string: name -> parser.
DRIVER_OPTIONS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "worker.drivers.amqp:AmqpDriver": {
        "vhost": text,
        "exchange": text,
        "exchange_type": choice("direct", "fanout", "topic", "headers"),
        "routing_key": text,
        "queue_type": choice("classic", "quorum", "stream"),
        "max_length": integer(1, 2**31),
        # What a full queue does (RabbitMQ's x-overflow): drops its oldest message (RabbitMQ's
        # default), or refuses the new one (a nack with confirms).
        "overflow": choice("drop-head", "reject-publish", "reject-publish-dlx"),
        "lazy": boolean,
        "durable": boolean,  # the queue survives a broker restart
        "persistent": boolean,  # delivery mode 2
        "confirms": boolean,
        "confirm_timeout_s": integer(1, 3600),
        "ack": choice("auto", "manual"),
        "prefetch": integer(0, 65535),
        "reply_to": text,  # a requester's reply address: amq.rabbitmq.reply-to, a queue name, or none
    },
    "worker.drivers.amqp10:Amqp10Driver": {
        "settle": choice("presettled", "at-least-once"),
        "credit": integer(1, 1_000_000),  # the receiver's credit window (prefetch)
        "durable": boolean,  # durable messages; a durable subscription on receive
        "reply_to": text,  # a requester's reply address base; none: /queue/maestro-replies
    },
    "worker.drivers.kafka:KafkaDriver": {
        "acks": choice("0", "1", "all"),
        "batch_size": integer(1, 2**31 - 1),
        "linger_ms": integer(0, 900_000),
        "compression": choice("none", "gzip", "snappy", "lz4", "zstd"),
        "partitions": integer(1, 100_000),  # a topic that does not exist is created with this many
        # library: librdkafka's partitioner (keyless: a random partition per message); client:
        # client i produces to partition i mod the topic's partitions, one producer a partition.
        "partitioner": choice("library", "client"),
        "group": text,
        "auto_offset_reset": choice("earliest", "latest"),
        "session_timeout_ms": integer(1000, 3_600_000),
        "delivery_timeout_ms": integer(1000, 3_600_000),
        "queue_max_messages": integer(1, 10_000_000),  # librdkafka's producer queue: the window
        # How long the broker may hold a fetch for fetch_min_bytes to arrive. A broker that does
        # not answer a waiting fetch when data comes (tansu) adds up to this to every latency.
        "fetch_wait_max_ms": integer(0, 300_000),
        "fetch_min_bytes": integer(1, 100_000_000),
        "reply_to": text,  # a requester's reply topic base; none: maestro-replies
    },
    "worker.drivers.mqtt:MqttDriver": {
        "qos": integer(0, 2),
        "clean_session": boolean,
        "keepalive_s": integer(5, 3600),
        "max_inflight": integer(1, 65535),  # QoS 1/2 messages awaiting their acknowledgement
        "version": choice("3.1.1", "5"),  # MQTT 5 carries request/reply's response topic
        "reply_to": text,  # a requester's reply topic base (MQTT 5); none: maestro/replies
    },
    "worker.drivers.rabbit_stream:RabbitStreamDriver": {
        "vhost": text,
        "offset": stream_offset,  # where a consumer starts; default next: what is published from now on
        "credit": integer(1, 1000),  # chunks the broker may send a consumer before it gives credit back
        # Every connection through the URL's host and port (a load balancer, a proxy), not to the
        # address the stream's leader or replica advertises.
        "load_balancer": boolean,
        # The stream's retention, RabbitMQ's argument names, given when the driver creates it (a
        # stream that exists keeps its own).
        "max-length-bytes": integer(1, 2**63 - 1),
        "max-segment-size-bytes": integer(1, 3_000_000_000),  # RabbitMQ's bound: 3 GB
        "max-age": stream_max_age,
    },
    "worker.drivers.nats:NatsDriver": {
        "jetstream": boolean,  # published with JetStream's acknowledgement, read through a pull consumer
        "stream": text,  # JetStream: the stream; none: the one that takes the subject, else one made
        "consumer": text,  # JetStream: the durable pull consumer receivers share; made if missing
        "deliver": choice("new", "all", "last"),  # where a consumer the driver makes starts
        "batch": integer(1, 10_000),  # JetStream: messages one pull request asks for
        "storage": choice("file", "memory"),  # JetStream: a stream the driver makes
        "queue": text,  # core NATS: receivers share the messages as this queue group
        "reply_to": text,  # a requester's reply subject base; none: an inbox of its own
    },
}


@dataclass(frozen=True)
class Endpoint:
    """A SUT URL, parsed: `scheme://[user:pw@]host[:port]/destination?option=value&...`."""

    url: str
    scheme: str
    host: str
    port: int
    destination: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        """The URL without its password, for logs and errors."""
        user = f"{self.username}:***@" if self.username else ""
        return f"{self.scheme}://{user}{self.host}:{self.port}/{self.destination}"

    def destination_for(self, client: int) -> str:
        """The destination of client number `client`: `perf-test-%d` with `destinations=1-100`
        spreads clients over perf-test-1 .. perf-test-100 (seed 002's 100 queues)."""
        return self.numbered(self.destination, client)

    def numbered(self, text: str, client: int) -> str:
        """`text` with every %d in it the number of client `client`'s destination (`orders-%d`
        and `routing_key=rk-%d` with `destinations=1-2`: client 1 sends to orders-2 by rk-2)."""
        if "%d" not in text:
            return text
        low, high = self.options["destinations"]  # parse_sut_url refuses a %d without them
        return text.replace("%d", str(low + client % (high - low + 1)))

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.options.get("ca"))
        if self.options.get("insecure"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def split_urls(value: str | Sequence[str]) -> list[str]:
    """A test's URLs: one, a comma-separated list (cluster nodes, round robin), or a list of
    either. A list whose one element held `U1,U2` (a repeatable flag given once) was taken whole
    as one URL, and its second URL, password and all, became the name of a queue."""
    items = [value] if isinstance(value, str) else list(value)
    return [url.strip() for item in items for url in item.split(",") if url.strip()]


def parse_sut_url(url: str) -> Endpoint:
    """Parse and check a SUT URL; SutUrlError says what is wrong (without the password)."""
    parts = urlsplit(url)
    safe = redact_text(url)
    scheme = SUT_SCHEMES.get(parts.scheme)
    if scheme is None:
        raise SutUrlError(f"{safe}: the scheme must be one of {', '.join(sorted(SUT_SCHEMES))}")
    try:
        port = parts.port or scheme.default_port
    except ValueError as exc:
        raise SutUrlError(f"{safe}: {exc}") from exc
    if not parts.hostname:
        raise SutUrlError(f"{safe} names no host")
    # One slash separates host and destination; more belong to the destination, as
    # RabbitMQ's AMQP 1.0 addresses need: amqp10://host//queue/q is the address /queue/q.
    destination = unquote(parts.path[1:])
    if not destination:
        raise SutUrlError(f"{safe} names no queue, topic or address (the URL path)")
    known = {**COMMON_OPTIONS, **DRIVER_OPTIONS[scheme.driver]}
    options: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        parser = known.get(key)
        if parser is None:
            raise SutUrlError(
                f"{safe}: unknown option {key!r} for {parts.scheme}:// (known: {', '.join(sorted(known))})"
            )
        try:
            options[key] = parser(value)
        except ValueError as exc:
            # The value may hold a URL's password itself (`destinations=1-2,amqp://u:pw@…`).
            raise SutUrlError(f"{safe}: option {key!r}: {redact_text(str(exc))}") from exc
    # Either half alone was one destination, silently: `%d` read literally, or a range unused.
    if ("%d" in destination) != ("destinations" in options):
        missing = "destinations=LOW-HIGH" if "%d" in destination else "a %d in the destination (only %d is replaced)"
        raise SutUrlError(
            f"{safe}: a %d in the destination and destinations=LOW-HIGH go together; {missing} is missing "
            "(perf-test-%d?destinations=1-100 spreads the clients over perf-test-1 .. perf-test-100)"
        )
    if "%d" in str(options.get("routing_key", "")) and "destinations" not in options:
        raise SutUrlError(
            f"{safe}: routing_key's %d is the client's destination number: it needs a %d in the destination "
            "and destinations=LOW-HIGH (orders-%d?destinations=1-4&exchange=x&routing_key=rk-%d)"
        )
    return Endpoint(
        url=url,
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        destination=destination,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        tls=scheme.tls,
        options=options,
    )
