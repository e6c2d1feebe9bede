"""Kafka through confluent-kafka: `kafka://host[:9092]/topic?acks=all&linger_ms=5&group=g1&...`.

librdkafka delivers reports and messages only from a blocking `poll()`, which runs on a
`PollThread`; results cross to the event loop with `call_in_loop`. A send completes when the
delivery report came back (after `acks` brokers took it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.concurrency import PollThread, call_in_loop
from worker.drivers.base import (
    ConnectError,
    DisconnectedError,
    Driver,
    Endpoint,
    OnMessage,
    SendError,
    choice,
    integer,
)

__all__ = ["KafkaDriver"]

_POLL_S = 0.05
_ASSIGN_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)
# Delivery reports that mean "no answer in time": the message may or may not have landed.
_TIMED_OUT = {KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT}


class KafkaDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = {"kafka": (False, 9092), "kafkas": (True, 9093)}
    OPTIONS: ClassVar[dict[str, Any]] = {
        "acks": choice("0", "1", "all"),
        "batch_size": integer(1, 2**31 - 1),
        "linger_ms": integer(0, 900_000),
        "compression": choice("none", "gzip", "snappy", "lz4", "zstd"),
        "partitions": integer(1, 100_000),  # create the topic with this many partitions
        "group": str,
        "auto_offset_reset": choice("earliest", "latest"),
        "session_timeout_ms": integer(1000, 3_600_000),
        "delivery_timeout_ms": integer(1000, 3_600_000),
    }
    DESCRIPTION = "Kafka (confluent-kafka / librdkafka)"

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._poller: PollThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_message: OnMessage | None = None
        self._paused = False
        self._tasks: set[asyncio.Future[None]] = set()

    def _common_config(self) -> dict[str, Any]:
        e = self.endpoint
        config: dict[str, Any] = {"bootstrap.servers": f"{e.host}:{e.port}", "client.id": f"maestro-{self.client}"}
        if e.username:
            config |= {
                "security.protocol": "SASL_SSL" if e.tls else "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": e.username,
                "sasl.password": e.password or "",
            }
        elif e.tls:
            config["security.protocol"] = "SSL"
        if e.tls and "ca" in e.options:
            config["ssl.ca.location"] = e.options["ca"]
        if e.tls and e.options.get("insecure"):
            config["enable.ssl.certificate.verification"] = False
        return config

    async def connect(self) -> None:
        self._loop = asyncio.get_running_loop()
        if "partitions" in self.endpoint.options:
            await asyncio.to_thread(self._create_topic)

    def _create_topic(self) -> None:
        admin = AdminClient(self._common_config())
        topic = NewTopic(self.destination, num_partitions=self.endpoint.options["partitions"], replication_factor=1)
        try:
            admin.create_topics([topic], operation_timeout=15)[self.destination].result(20)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                why = f"{self.endpoint}: cannot create the topic: {error.str()}"
                raise ConnectError(why, retry=error.retriable()) from exc

    def _producer_config(self) -> dict[str, Any]:
        o = self.endpoint.options
        config = self._common_config() | {
            "acks": o.get("acks", "all"),
            "linger.ms": o.get("linger_ms", 0),
            "compression.type": o.get("compression", "none"),
            "delivery.timeout.ms": o.get("delivery_timeout_ms", 30_000),
        }
        if "batch_size" in o:
            config["batch.size"] = o["batch_size"]
        return config

    async def send(self, body: bytes) -> None:
        if self._producer is None:
            self._producer = Producer(self._producer_config())
            producer = self._producer
            self._poller = PollThread(f"kafka-producer-{self.client}", lambda: producer.poll(_POLL_S))
        assert self._loop is not None
        future: asyncio.Future[None] = self._loop.create_future()
        loop = self._loop

        def delivered(error: KafkaError | None, _message: Message) -> None:
            call_in_loop(loop, _settle, future, error)

        try:
            self._producer.produce(self.destination, body, on_delivery=delivered)
        except BufferError as exc:
            raise SendError(f"{self.endpoint}: producer queue full", retry=True, kind="failed") from exc
        except KafkaException as exc:
            raise DisconnectedError(f"{self.endpoint}: {exc}", retry=True) from exc
        await future

    async def receive(self, on_message: OnMessage) -> None:
        o = self.endpoint.options
        self._on_message = on_message
        config = self._common_config() | {
            # One group per topic by default: the receivers of a test share the topic's partitions
            # as competing consumers (a queue's semantics), so each message is received once.
            "group.id": o.get("group", f"maestro-{self.destination}"),
            "auto.offset.reset": o.get("auto_offset_reset", "earliest"),
            "session.timeout.ms": o.get("session_timeout_ms", 6000),
            "enable.auto.commit": True,
        }
        consumer = Consumer(config)
        loop = asyncio.get_running_loop()
        assigned = asyncio.Event()
        consumer.subscribe([self.destination], on_assign=lambda _c, _parts: call_in_loop(loop, assigned.set))
        self._consumer = consumer
        self._poller = PollThread(f"kafka-consumer-{self.client}", self._consume_once)
        # Ready means in the group with partitions assigned, not merely subscribed: otherwise the
        # group's join time (seconds) would show as the SUT's latency of the first messages.
        try:
            await asyncio.wait_for(assigned.wait(), _ASSIGN_TIMEOUT_S)
        except TimeoutError:
            log.warning("%s: no partition assignment within %g s; consuming anyway", self.endpoint, _ASSIGN_TIMEOUT_S)

    def _consume_once(self) -> None:
        assert self._consumer is not None and self._loop is not None
        if self._paused:
            self._consumer.poll(_POLL_S)  # keeps group membership alive; paused partitions give nothing
            return
        message = self._consumer.poll(_POLL_S)
        if message is None or message.error() is not None:
            return
        call_in_loop(self._loop, self._deliver, message.value())

    def _deliver(self, body: bytes) -> None:
        if self._on_message is not None:
            task = asyncio.ensure_future(self._on_message(body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def pause(self) -> None:
        if self._consumer is not None:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True

    async def resume(self) -> None:
        if self._consumer is not None:
            self._consumer.resume(self._consumer.assignment())
            self._paused = False

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.stop()
        if self._producer is not None:
            await asyncio.to_thread(self._producer.flush, 10)
        if self._consumer is not None:
            await asyncio.to_thread(self._consumer.close)


def _settle(future: asyncio.Future[None], error: KafkaError | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        kind = "timed_out" if error.code() in _TIMED_OUT else "failed"
        future.set_exception(SendError(f"not delivered: {error.str()}", retry=False, kind=kind))
