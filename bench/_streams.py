"""The raw loops of rstream (RabbitMQ Streams) and nats-py (NATS, JetStream) for load_engine.py,
each the library used as its own documentation shows, as fast as it goes, with the streams they
write to made and deleted around each measurement.

Needs RabbitMQ's stream plugin on 5552 and NATS with JetStream on 4222.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from rstream import ConfirmationStatus, Consumer, ConsumerOffsetSpecification, MessageContext, OffsetType, Producer

from worker.drivers.nats import NatsDriver
from worker.drivers.rabbit_stream import RabbitStreamDriver

__all__ = [
    "NATS",
    "STREAM",
    "jetstream",
    "nats_url",
    "rabbit_stream",
    "raw_jetstream_receive",
    "raw_jetstream_send",
    "raw_nats_receive",
    "raw_nats_send",
    "raw_stream_receive",
    "raw_stream_send",
    "stream_url",
]

STREAM = ("127.0.0.1", 5552)
NATS = "nats://127.0.0.1:4222"


def stream_url(stream: str, options: str = "") -> str:
    return f"rabbitmq-stream://guest:guest@{STREAM[0]}:{STREAM[1]}/{stream}{options}"


def nats_url(subject: str, options: str = "") -> str:
    return f"{NATS}/{subject}{options}"


@contextlib.asynccontextmanager
async def rabbit_stream(prefix: str) -> AsyncIterator[str]:
    """A stream of its own for one measurement, deleted after."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    producer = Producer(STREAM[0], STREAM[1], username="guest", password="guest")
    await producer.create_stream(name)
    try:
        yield name
    finally:
        await producer.delete_stream(name, missing_ok=True)
        await producer.close()


@contextlib.asynccontextmanager
async def jetstream(prefix: str) -> AsyncIterator[tuple[str, str]]:
    """(stream, subject) of a JetStream stream of its own for one measurement, deleted after."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    subject = name.replace("-", ".")
    nc = await nats.connect(NATS)
    try:
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[subject]))
        yield name, subject
    finally:
        await nc.jetstream().delete_stream(name)
        await nc.close()


# --- sending: from the first message handed over until every one was settled --------------------


async def raw_stream_send(stream: str, n: int, body: bytes) -> float:
    """rstream's own confirmed send: `send_batch` of 100 at a time, with a confirmation callback,
    at most the worker's window in flight (the driver's default: rstream has no bound of its
    own); one message confirmed first, so the publisher is declared and connected before the
    clock starts, as the worker's is."""
    producer = Producer(STREAM[0], STREAM[1], username="guest", password="guest")
    confirmed = 0
    room = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        nonlocal confirmed
        confirmed += 1
        room.set()

    try:
        await producer.send_wait(stream, body)
        started, sent = time.perf_counter(), 0
        while sent < n:
            while sent - confirmed >= RabbitStreamDriver.DEFAULT_WINDOW:
                room.clear()
                await room.wait()
            batch = min(100, n - sent)
            await producer.send_batch(stream, [body] * batch, on_publish_confirm=on_confirm)
            sent += batch
        while confirmed < n:
            room.clear()
            await room.wait()
        return n / (time.perf_counter() - started)
    finally:
        await producer.close()


async def raw_nats_send(subject: str, n: int, body: bytes) -> float:
    """nats-py's core publish, one `await` a message, until the server answered a flush."""
    nc = await nats.connect(NATS)
    try:
        started = time.perf_counter()
        for _ in range(n):
            await nc.publish(subject, body)
        await nc.flush()
        return n / (time.perf_counter() - started)
    finally:
        await nc.close()


async def raw_jetstream_send(subject: str, n: int, body: bytes) -> float:
    """nats-py's own pipelined JetStream publish, `publish_async` (a future each, at most the
    worker's window pending: the driver's default), until every acknowledgement came."""
    nc = await nats.connect(NATS)
    js = nc.jetstream(publish_async_max_pending=NatsDriver.DEFAULT_WINDOW)
    try:
        await js.publish(subject, body)  # the reply subscription made before the clock starts
        started = time.perf_counter()
        for _ in range(n):
            await js.publish_async(subject, body)
        await js.publish_async_completed()
        return n / (time.perf_counter() - started)
    finally:
        await nc.close()


# --- receiving: from the first arrival to the last --------------------------------------------


def _span(arrivals: list[float]) -> float:
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0


async def raw_stream_receive(stream: str, n: int) -> float:
    """rstream's consumer callback over a stream already holding `n` messages, from its first."""
    arrivals: list[float] = []
    done = asyncio.Event()

    def on_message(_message: bytes, _context: MessageContext) -> None:
        arrivals.append(time.perf_counter())
        if len(arrivals) == n:
            done.set()

    consumer = Consumer(STREAM[0], STREAM[1], username="guest", password="guest")
    try:
        first = ConsumerOffsetSpecification(OffsetType.FIRST)
        await consumer.subscribe(stream, on_message, offset_specification=first)
        await asyncio.wait_for(done.wait(), 120)
    finally:
        await consumer.close()
    return _span(arrivals)


async def raw_nats_receive(subject: str, n: int, publish: Callable[[], Awaitable[object]]) -> float:
    """nats-py's subscription callback while `publish` (another process) sends: core NATS keeps
    nothing for a subscriber that is not there."""
    arrivals: list[float] = []

    async def on_message(_msg: object) -> None:
        arrivals.append(time.perf_counter())

    nc = await nats.connect(NATS)
    try:
        await nc.subscribe(subject, cb=on_message)
        await nc.flush()
        await publish()
        deadline = time.monotonic() + 60
        while len(arrivals) < n and time.monotonic() < deadline:  # noqa: ASYNC110 - the callback fills it
            await asyncio.sleep(0.01)
    finally:
        await nc.close()
    return _span(arrivals)


async def raw_jetstream_receive(stream: str, subject: str, n: int) -> float:
    """nats-py's pull consumer, `fetch` of 100 at a time, each message acknowledged, over a stream
    already holding `n` messages: a consumer of its own from the first."""
    nc = await nats.connect(NATS)
    js = nc.jetstream()
    name = f"raw-{uuid.uuid4().hex[:6]}"
    config = ConsumerConfig(
        durable_name=name, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, filter_subject=subject
    )
    arrivals: list[float] = []
    try:
        await js.add_consumer(stream, config)
        pull = await js.pull_subscribe_bind(name, stream)
        deadline = time.monotonic() + 120
        while len(arrivals) < n and time.monotonic() < deadline:
            try:
                msgs = await pull.fetch(100, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:
                arrivals.append(time.perf_counter())
                await msg.ack()
        await js.delete_consumer(stream, name)
    finally:
        await nc.close()
    return _span(arrivals)
