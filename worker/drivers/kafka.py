"""Kafka through confluent-kafka: `kafka://host[:9092]/topic?acks=all&linger_ms=5&group=g1&...`.

librdkafka delivers messages only from a blocking `poll()`, which runs on a `PollThread`; what
one poll brought crosses to the event loop at once. A message is settled when its delivery
report came back (after `acks` brokers took it); until then it waits in librdkafka's own queue,
which is also the worker's window (`queue.buffering.max.messages`).

The producer is the library's fastest way round, at about 1 µs a message: a burst goes in one
`produce_batch` call, and deliveries are settled by count, never one Python callback each. Only
failures come back as reports (`delivery.report.only.error`); every millisecond while messages
are in flight, the loop serves the reports with `poll(0)` and takes the queue's length, and what
left the queue without failing was delivered. A report and a Message object per message had held
the sender at 0.21-0.27 of a raw producer loop.

A topic that does not exist yet is created on connect (`partitions`, default 1), by senders and
receivers alike, so a receiver that subscribes first never waits out librdkafka's five-minute
metadata refresh for it; the consumer also refreshes its metadata every second.

A partition's offsets are contiguous in a plain topic, so a consumer that sees offset 165 right
after 163 was passed over 164 by the broker's fetch: the driver counts such gaps
(`skipped_by_sut`). tansu 0.6 does this: a produce advances the high watermark before it stores
its batch, so with two producers on one partition a fetch can see the second's batch and not yet
the first's. `partitioner=client` gives each client a partition of its own.

Request/reply: each requesting client makes a reply topic of its own, `<reply_to>-<random>`
(default base maestro-replies, one partition, read by assignment: no group to join), and names
it in each request's `reply_to` header beside a `correlation_id` header. Repliers share the
request topic as one consumer group and produce each answer to the topic the request names,
with its correlation. Reply topics are deleted when their requester closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, cast

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.concurrency import LoopPoll, PollThread, call_in_loop, wait_event
from protocol.schemes import schemes_of
from protocol.sut_url import DRIVER_OPTIONS
from worker.drivers.base import (
    FIRST_CONNECT_S,
    Burst,
    ConnectError,
    DisconnectedError,
    Driver,
    Endpoint,
    GroupShare,
    Handover,
    OnMessages,
    OnRequests,
    SendError,
    connect_cause,
    probe,
)
from worker.drivers.librdkafka_conf import in_effect

__all__ = ["KafkaDriver"]

_POLL_S = 0.05
# How often the loop settles what librdkafka delivered since, while messages are in flight: the
# window reopens this late at most.
_DELIVERY_POLL_S = 0.001
_BATCH = 1000  # messages one consume() call may return
_ASSIGN_TIMEOUT_S = 30.0
_CREATE_TOPIC_S = 20.0
_DELETE_TOPIC_S = 15.0
_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA, produce()'s default: its partitioner picks

log = logging.getLogger(__name__)
# Delivery reports that mean "no answer in time": the message may or may not have landed.
_TIMED_OUT = {KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT}


class KafkaDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = schemes_of("worker.drivers.kafka:KafkaDriver")
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]] = DRIVER_OPTIONS["worker.drivers.kafka:KafkaDriver"]
    DESCRIPTION = "Kafka (confluent-kafka / librdkafka)"
    LIBRARY = "confluent-kafka"
    DEFAULT_WINDOW = 100_000  # librdkafka's default queue.buffering.max.messages
    TAKES_BURSTS = True  # produce_batch

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._pollers: list[PollThread] = []  # the consumer's
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_messages: OnMessages | None = None
        self._processing_delay_s = 0.0
        self._paused = False
        self._rebalancing = False  # partitions revoked, the next assignment not yet come
        # Over the producer's life: messages librdkafka queued, and of those how many were settled
        # (delivered or failed). Failure reports wait in `_failures`, filled inside poll()/flush().
        self._queued = 0
        self._settled = 0
        self._failures: list[KafkaError] = []
        self._deliveries: LoopPoll | None = None  # made by connect(): settles what was delivered
        self._on_requests: OnRequests | None = None  # a replier's
        self._reply_topic = ""  # a requester's, once open_replies made it
        self._partition = _ANY_PARTITION  # partitioner=client: where this client produces
        self._next_offset: dict[int, int] = {}  # by partition: the offset the next message should have
        self._assigned = 0  # partitions this consumer has now
        self._owned: frozenset[int] = frozenset()  # which ones (the poll thread sets it)
        self._partitions: int | None = None  # the topic's, from connect()

    def window(self) -> int:
        return int(self.endpoint.options.get("queue_max_messages", self.DEFAULT_WINDOW))

    def acknowledges(self) -> bool:
        return str(self.endpoint.options.get("acks", "all")) != "0"

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
        self._deliveries = LoopPoll(self._loop, _DELIVERY_POLL_S, self._settle_deliveries)
        await probe(self.endpoint)  # librdkafka would only say "transport failure", after its timeout
        partitions = self._partitions = await asyncio.to_thread(self._ensure_topic)
        if self.endpoint.options.get("partitioner") == "client":
            self._partition = self.client % (partitions or 1)

    def _ensure_topic(self, topic: str = "", partitions: int | None = None) -> int | None:
        """Create the topic (default: the URL's) unless it exists; a broker that refuses is told
        of in the log only (the topic may be created by others, and the consumer refreshes its
        metadata), unless its partitions were asked for. Returns its partition count, if known."""
        topic = topic or self.destination
        admin = AdminClient(self._common_config())
        try:
            # Every topic's metadata, not this one's: a broker may auto-create a topic it is asked
            # about by name (tansu does, with 4 partitions), which would ignore `partitions`.
            known = admin.list_topics(timeout=FIRST_CONNECT_S).topics
        except KafkaException as exc:
            error = exc.args[0]
            auth = error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
            cause = "authentication failed" if auth else connect_cause(error.str())
            raise ConnectError(f"{self.endpoint}: {cause} ({error.str()})", retry=not auth) from exc
        existing = known.get(topic)
        if existing is not None and existing.error is None:
            return len(existing.partitions)
        asked = partitions is not None or "partitions" in self.endpoint.options
        count = partitions or self.endpoint.options.get("partitions", 1)
        try:
            admin.create_topics([NewTopic(topic, num_partitions=count, replication_factor=1)], operation_timeout=15)[
                topic
            ].result(_CREATE_TOPIC_S)
            log.info("%s: created the topic %s with %d partition(s)", self.endpoint, topic, count)
            return int(count)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:  # another client made it meanwhile
                found = admin.list_topics(timeout=FIRST_CONNECT_S).topics.get(topic)
                return len(found.partitions) if found is not None and found.partitions else None
            if asked:  # asked for by name: not having it is an error
                why = f"{self.endpoint}: cannot create the topic {topic}: {error.str()}"
                raise ConnectError(why, retry=error.retriable()) from exc
            log.warning("%s: the topic does not exist and could not be created: %s", self.endpoint, error.str())
            return None
        except TimeoutError as exc:  # a broker under load; the future's own error says nothing
            why = f"{self.endpoint}: no answer to creating the topic {topic} within {_CREATE_TOPIC_S:g} s"
            raise ConnectError(why, retry=True) from exc

    def settings(self, sending: bool) -> dict[str, str]:
        """The base's, and the librdkafka configuration this driver builds from the URL (the
        producer's or the consumer's), the password left out; then the settings that move the
        figures which it leaves to librdkafka, at the library's own defaults as it reports them
        (linger.ms among them: 5 ms)."""
        base = super().settings(sending)
        config = self._producer_config() if sending else self._consumer_config(self._group())
        shown = {
            f"librdkafka {key}": str(value)
            for key, value in sorted(config.items())
            if not callable(value) and key not in ("sasl.password", "client.id")
        }
        shown |= {
            f"librdkafka {key}": f"{value} (librdkafka's default)"
            for key, value in in_effect(config, sending).items()
            if key not in config
        }
        library = f"{base.pop('library')} (librdkafka {confluent_kafka.libversion()[0]})"
        rest = {"everything else": f"librdkafka's defaults; {base.pop('everything else')}"}
        return {"library": library} | base | shown | rest

    def _producer_config(self) -> dict[str, Any]:
        o = self.endpoint.options
        config = self._common_config() | {
            "acks": o.get("acks", "all"),
            "compression.type": o.get("compression", "none"),
            # librdkafka's is 5 min: a message no broker takes fails within the worker's 60 s
            # reconnect budget instead (reasoned, not measured: docs/sut-urls.md).
            "delivery.timeout.ms": o.get("delivery_timeout_ms", 30_000),
            "queue.buffering.max.messages": self.window(),
            # Deliveries are counted from the queue's length (_settle_deliveries): a report is
            # only wanted for a failure.
            "delivery.report.only.error": True,
            "on_delivery": self._on_failed,
        }
        # librdkafka's own linger (5 ms since 1.5, as the Java producer's since Kafka 4.0) unless
        # the URL says: a linger of 0 moved 142 k msg/s unbounded through tansu where a raw
        # producer with 5 ms moved 351 k (#40); a test of latency at a low rate may ask for 0.
        if "linger_ms" in o:
            config["linger.ms"] = o["linger_ms"]
        if "batch_size" in o:
            config["batch.size"] = o["batch_size"]
        return config

    def publish(self, body: bytes, token: int) -> None:
        self._produce(self.destination, body, None)

    def publish_many(self, bodies: Iterable[bytes], first_token: int) -> Handover:
        producer = self._producer or self._start_producer()
        messages = [{"value": body} for body in bodies]
        done = Handover(handed=len(messages))
        try:
            queued = producer.produce_batch(self.destination, messages, partition=self._partition)
        except (KafkaException, BufferError, TypeError) as exc:  # raised before anything was queued
            log.warning("%s: a burst of %d refused: %s", self.endpoint, len(messages), exc)
            done.refused["failed"] = len(messages)
            return done
        if queued < len(messages):  # the rest carry their reason (queue full: the window prevents it)
            done.refused["failed"] = len(messages) - queued
            why = next((m["_error"] for m in messages if "_error" in m), "no reason given")
            log.warning(
                "%s: %d of a burst of %d refused: %s", self.endpoint, len(messages) - queued, len(messages), why
            )
        self._queued += queued
        self._watch_deliveries()
        return done

    def _start_producer(self) -> Producer:
        producer = self._producer = Producer(self._producer_config())
        return producer

    def _produce(self, topic: str, body: bytes, headers: list[tuple[str, str | bytes | None]] | None) -> None:
        producer = self._producer or self._start_producer()
        partition = self._partition if topic == self.destination else _ANY_PARTITION  # replies: any
        try:
            producer.produce(topic, body, partition=partition, headers=headers)
        except BufferError as exc:  # the window keeps below the queue's bound: not expected
            raise SendError(f"{self.endpoint}: producer queue full", retry=False, kind="failed") from exc
        except KafkaException as exc:
            raise DisconnectedError(f"{self.endpoint}: {exc}", retry=True) from exc
        self._queued += 1
        self._watch_deliveries()

    def _watch_deliveries(self) -> None:
        if self._deliveries is not None:
            self._deliveries.start()

    def _on_failed(self, error: KafkaError, _message: Message) -> None:
        self._failures.append(error)  # inside poll() or flush(), on the thread that called it

    def _settle_deliveries(self) -> bool:
        """On the loop: settle the failures reported and, by count, the messages that left
        librdkafka's queue without one; whether any are still in flight."""
        producer = self._producer
        if producer is None:
            return False
        producer.poll(0)  # serves the reports: failures reach _on_failed, deliveries only leave the queue
        failures, self._failures = self._failures, []
        for error in failures:
            kind = "timed_out" if error.code() in _TIMED_OUT else "failed"
            self.on_settled(1, SendError(f"not delivered: {error.str()}", retry=False, kind=kind))
        self._settled += len(failures)
        # Queued and not yet settled, less what is still in the queue (or its report not yet
        # served): delivered. Other events in the queue only hold a count back until served.
        delivered = self._queued - self._settled - len(producer)
        if delivered > 0:
            self._settled += delivered
            self.on_settled(delivered, None)
        return self._settled < self._queued

    def _consumer_config(self, group: str) -> dict[str, Any]:
        o = self.endpoint.options
        config = self._common_config() | {
            "group.id": group,
            # librdkafka's latest missed, 10 times in 10 on tansu, a message sent as soon as the
            # group held its partition: a new group looks its position up after the assignment.
            "auto.offset.reset": o.get("auto_offset_reset", "earliest"),
            # A killed member's partitions went to the survivor 9.0 s later with 6 s, 69 s with
            # librdkafka's 45 s (tansu, docs/sut-urls.md).
            "session.timeout.ms": o.get("session_timeout_ms", 6000),
            "enable.auto.commit": True,
            # A topic created after we subscribed is seen within a second, not librdkafka's 5 min.
            "topic.metadata.refresh.interval.ms": 1000,
            # Once its local queue holds queued.min.messages, librdkafka stops fetching for this
            # long (1 s by default): a consumer that fell behind read the queue dry and stood
            # idle for 0.9 s (tests/integration/test_kafka_backlog.py).
            "fetch.queue.backoff.ms": 10,
        }
        if "fetch_wait_max_ms" in o:
            config["fetch.wait.max.ms"] = o["fetch_wait_max_ms"]
        if "fetch_min_bytes" in o:
            config["fetch.min.bytes"] = o["fetch_min_bytes"]
        return config

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        self._on_messages = on_messages
        self._processing_delay_s = processing_delay_s
        # One group per topic by default: the receivers of a test share the topic's partitions
        # as competing consumers (a queue's semantics), so each message is received once.
        await self._subscribe(self._group())

    def _group(self) -> str:
        return str(self.endpoint.options.get("group", f"maestro-{self.destination}"))

    async def _subscribe(self, group: str) -> None:
        consumer = Consumer(self._consumer_config(group))
        loop = asyncio.get_running_loop()
        assigned = asyncio.Event()

        def on_assign(_consumer: Consumer, partitions: list[Any]) -> None:
            # A partition starts again at its committed offset, which may be past what this
            # consumer saw of it (another took it meanwhile): no gap to count there.
            self._next_offset.clear()
            self._assigned = len(partitions)
            self._owned = frozenset(p.partition for p in partitions)
            self._rebalancing = False
            call_in_loop(loop, assigned.set)
            if self._on_messages is not None:
                call_in_loop(loop, self._on_messages, [])

        def on_revoke(_consumer: Consumer, _partitions: list[Any]) -> None:
            self._owned = frozenset()
            self._rebalancing = True

        consumer.subscribe([self.destination], on_assign=on_assign, on_revoke=on_revoke)
        self._consumer = consumer
        self._pollers.append(PollThread(f"kafka-consumer-{self.client}", self._consume_once))
        # Ready means in the group with partitions assigned, not merely subscribed: otherwise the
        # group's join time (seconds) would show as the SUT's latency of the first messages.
        if not await wait_event(assigned, _ASSIGN_TIMEOUT_S):
            log.warning("%s: no partition assignment within %g s; consuming anyway", self.endpoint, _ASSIGN_TIMEOUT_S)

    def group_share(self) -> GroupShare | None:
        # A receiver's consumer and a replier's are in a group; a requester reads its reply
        # topic by assignment, and a sender consumes nothing.
        if self._consumer is None or self._reply_topic:
            return None
        return GroupShare(self._owned, self._partitions, self._rebalancing)

    def _consume_once(self) -> None:
        assert self._consumer is not None and self._loop is not None
        if self._on_requests is not None:
            self._serve_once()
            return
        assert self._on_messages is not None
        if self._paused:
            # Polling keeps the group membership alive; paused partitions give nothing, so a
            # message here is from a partition a rebalance assigned since: counted, not dropped.
            message = self._consumer.poll(_POLL_S)
            if message is not None and message.error() is None:
                self._count_gaps([message])
                call_in_loop(self._loop, self._on_messages, [(message.value() or b"", time.time_ns())])
                self._consumer.pause(self._consumer.assignment())
            return
        # Wait for one message, then take whatever else has arrived (consume() alone would wait
        # for a whole batch or its timeout): a burst crosses to the loop in one hand-over.
        first = self._consumer.poll(_POLL_S)
        if first is None:
            if self._rebalancing:
                # Between a revoke and the next assignment nothing arrives however much waits:
                # an empty hand-over tells the receiver this is not idle time, so a drain (idle
                # for 2 s) does not end in the middle of a rebalance and leave the tail unread.
                call_in_loop(self._loop, self._on_messages, [])
            return
        messages = [first, *self._consumer.consume(_BATCH, 0)]
        # Stamped once all of them are in hand: a fetch that landed during consume() brings
        # messages sent after poll() returned, and a stamp taken before it read their latency as
        # negative (clamped to 1 µs: 2 of 4,000 in a CI run).
        arrived = time.time_ns()
        self._count_gaps(messages)
        if self._processing_delay_s:
            for message in messages:  # a slow consumer: each message takes its time before the next
                if message.error() is None:
                    call_in_loop(self._loop, self._on_messages, [(message.value() or b"", time.time_ns())])
                    time.sleep(self._processing_delay_s)
            return
        # One error check over the burst (a C call a message, no Python frame), then the values.
        bodies: list[bytes]
        if any(map(Message.error, messages)):
            bodies = [m.value() or b"" for m in messages if m.error() is None]
        else:
            values = list(map(Message.value, messages))
            # A null value (a tombstone) becomes an empty body, counted as foreign.
            bodies = cast("list[bytes]", values) if all(values) else [value or b"" for value in values]
        if bodies:
            call_in_loop(self._loop, self._on_messages, Burst(bodies, arrived))

    def _count_gaps(self, messages: list[Message]) -> None:
        """Offsets the broker's fetches passed over (`skipped_by_sut`), from a burst in the
        consumer's thread: per burst when it is one partition's run without a hole (the usual),
        per message otherwise."""
        first, last = messages[0], messages[-1]
        low, high, partition = first.offset(), last.offset(), first.partition()
        if (
            self._assigned == 1
            and low is not None
            and high is not None
            and partition is not None
            and high - low + 1 == len(messages)
            and first.error() is None
            and last.error() is None
        ):
            self._advance(partition, low, high)
            return
        for message in messages:
            offset, partition = message.offset(), message.partition()
            if message.error() is None and offset is not None and partition is not None:
                self._advance(partition, offset, offset)

    def _advance(self, partition: int, low: int, high: int) -> None:
        expected = self._next_offset.get(partition)
        if expected is not None and low > expected:
            self.skipped_by_sut += low - expected
        if expected is None or high >= expected:
            self._next_offset[partition] = high + 1

    # --- request/reply: a reply topic per requesting client, named in a request header ---------

    async def open_replies(self, on_replies: OnMessages) -> None:
        base = self.endpoint.options.get("reply_to", "maestro-replies")
        topic = f"{base}-{uuid.uuid4().hex[:12]}"
        await asyncio.to_thread(self._ensure_topic, topic, 1)
        self._reply_topic = topic
        self._on_messages = on_replies
        # Read by assignment from the start: no group to join, nothing missed. Every partition
        # the broker reports, should it have made more than the one asked for.
        consumer = Consumer(self._consumer_config(f"maestro-requester-{topic}"))
        partitions = await asyncio.to_thread(self._partitions_of, consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self._consumer = consumer
        self._pollers.append(PollThread(f"kafka-replies-{self.client}", self._consume_once))

    def _partitions_of(self, consumer: Consumer, topic: str) -> list[int]:
        try:
            found = consumer.list_topics(timeout=FIRST_CONNECT_S).topics.get(topic)
        except KafkaException as exc:
            raise ConnectError(f"{self.endpoint}: no metadata for the reply topic {topic}: {exc}", retry=True) from exc
        return sorted(found.partitions) if found is not None and found.partitions else [0]

    def request(self, body: bytes, token: int, correlation: str) -> None:
        assert self._reply_topic, "open_replies() first"
        headers: list[tuple[str, str | bytes | None]] = [
            ("reply_to", self._reply_topic.encode()),
            ("correlation_id", correlation.encode()),
        ]
        self._produce(self.destination, body, headers)

    async def serve(self, on_requests: OnRequests) -> None:
        self._on_requests = on_requests
        # The repliers of a test share the request topic as one group: each request answered once.
        await self._subscribe(self.endpoint.options.get("group", f"maestro-repliers-{self.destination}"))

    def _serve_once(self) -> None:
        assert self._consumer is not None and self._loop is not None and self._on_requests is not None
        first = self._consumer.poll(_POLL_S)
        if first is None:
            return
        messages = [first, *self._consumer.consume(_BATCH, 0)]
        arrived = time.time_ns()  # once all are in hand, as in _consume_once
        batch = [(m.value() or b"", arrived, _reply_address(m)) for m in messages if not m.error()]
        self._count_gaps(messages)
        if batch:
            call_in_loop(self._loop, self._on_requests, batch)

    def reply(self, address: Any, body: bytes, token: int) -> None:
        topic, correlation = address
        if not topic:
            self.on_settled(1, SendError(f"{self.endpoint}: a request without a reply_to header", retry=False))
            return
        self._produce(topic, body, [("correlation_id", correlation)] if correlation else None)

    async def pause(self) -> None:
        if self._consumer is not None:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True

    async def resume(self) -> None:
        if self._consumer is not None:
            self._consumer.resume(self._consumer.assignment())
            self._paused = False

    async def close(self) -> None:
        for poller in self._pollers:
            await asyncio.to_thread(poller.stop)
        if self._producer is not None:
            if self._deliveries is not None:
                self._deliveries.stop()
            await asyncio.to_thread(self._producer.flush, 10)
            # What flush() settled (its failure reports came on its thread); what is still queued
            # after it is told as unconfirmed by the sender, which counts what never settled.
            self._settle_deliveries()
            self._producer = None  # librdkafka's client goes with the last reference (no close())
        if self._consumer is not None:
            await asyncio.to_thread(self._consumer.close)
        if self._reply_topic:
            await asyncio.to_thread(self._delete_topic, self._reply_topic)

    def _delete_topic(self, topic: str) -> None:
        """A requester's reply topic goes with it; a broker that keeps it only costs a topic, so a
        broker slow to answer (tansu took over 15 s under CI's load) is told in the log and the
        close goes on: the run's figures are already written."""
        admin = AdminClient(self._common_config())  # held: a client freed at once fails its futures
        try:
            admin.delete_topics([topic], operation_timeout=10)[topic].result(_DELETE_TOPIC_S)
        except (KafkaException, ValueError) as exc:
            log.warning("%s: the reply topic %s was not deleted: %s", self.endpoint, topic, exc)
        except TimeoutError:
            log.warning(
                "%s: the reply topic %s was not deleted: no answer within %g s", self.endpoint, topic, _DELETE_TOPIC_S
            )


def _reply_address(message: Message) -> tuple[str, bytes | None]:
    """Where a request's reply goes, and its correlation: the headers the requester set."""
    headers: dict[str, object] = dict(message.headers() or ())
    reply_to, correlation = headers.get("reply_to"), headers.get("correlation_id")
    topic = reply_to.decode(errors="replace") if isinstance(reply_to, bytes) else str(reply_to or "")
    return topic, correlation if isinstance(correlation, bytes) else None
