"""RabbitMQ Streams through rstream: `rabbitmq-stream://[user:pw@]host[:5552]/stream?offset=first&credit=10`.

The path names the stream; a sender or receiver that finds it missing creates it, with the
retention the URL gives (`max-length-bytes`, `max-segment-size-bytes`, `max-age`). rstream runs on
the event loop itself: no thread, no hop. A client asks the node in the URL where the stream's
leader (or a replica) is and connects to the address that one advertises; with
`load_balancer=true` every connection goes through the URL's host and port instead, until one
lands on the node wanted (rstream's load-balancer mode): a load balancer, or a fault proxy.

Messages are AMQP 1.0 bytes whose body is one Data section (`amqp10_bytes`), as RabbitMQ's own
stream clients write them: RabbitMQ converts only those for AMQP 0-9-1 consumers of the stream, so
a path may publish on one protocol and consume on the other. A body the receiver cannot read so
is decoded by rstream's AMQP codec, and counted as foreign if that fails too.

Publishing is confirmed. `publish_many` puts a burst in an outbox and returns; one writer task per
client hands everything the outbox holds to `send_batch` at once (a Publish frame for up to a
frame's worth), so a burst costs one frame and one wake-up, not one each. A client may have
10,000 messages unconfirmed (RabbitMQ's own stream client's default). rstream calls back once
per publishing id, confirmed or not; those of one PublishConfirm frame are settled together.
`Producer.send`, rstream's other way, buffers messages for a timer that flushes every 0.5 s: a
latency of its own, not the broker's.

A consumer starts at `offset` (default `next`: what is published from now on) with `credit`
chunks in hand (rstream's default, 10); rstream gives a credit back for each chunk delivered. A
stream is read whole by each consumer: two receiving clients on one stream each receive every
message (counted as duplicates). Give each client a stream of its own with `%d` and
`destinations` (README, SUT URLs).

Super streams are not driven: rstream 1.1.1 has them, but against RabbitMQ 3.10.8 (this lab's)
its Partitions request could not decode the broker's answer ("Could not decode
SuperStreamPartitions", the partitions' names left over), and the command that makes a super
stream came with RabbitMQ 3.13. Streams named with `%d` and
`destinations` give each client a partition of its own, routed by the client.

Reconnecting is this driver's, not rstream's: its recovery waits 1-9 s of random jitter before
each try (rstream.recovery), which a fault test would measure as the broker's outage. Here a
dropped publisher connection fails what was in flight (rstream settles it as unconfirmed), and
the driver declares the publisher again with the worker's backoff (0.05 s growing to 1 s); a
dropped consumer subscribes again from the offset after the last message it took.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, ClassVar, TypeVar

from rstream import (
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)
from rstream.client import Addr, Client, ClientPool
from rstream.exceptions import (
    AccessRefused,
    AuthenticationFailure,
    ClientError,
    PreconditionFailed,
    SASLAuthenticationFailureLoopback,
    ServerError,
    VirtualHostAccessFailure,
)
from rstream.recovery import BackOffRecoveryStrategy
from rstream.utils import OnClosedErrorInfo

from protocol.schemes import schemes_of
from protocol.sut_url import DRIVER_OPTIONS
from worker.drivers.amqp10_bytes import bare_data_bodies, body_bytes, data_body, data_head
from worker.drivers.base import (
    Burst,
    ConnectError,
    DisconnectedError,
    Driver,
    Endpoint,
    Handover,
    OnMessages,
    SendError,
    backoff_s,
    connect_cause,
    library_defaults,
    probe,
)
from worker.drivers.outbox import Outbox
from worker.drivers.tally import Tally

__all__ = ["RabbitStreamDriver"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_Entity = TypeVar("_Entity", Producer, Consumer)

# rstream's default (RabbitMQ's too): a Publish frame carries at most this many bytes.
_FRAME_MAX: int = library_defaults(Producer, "frame_max")["frame_max"]
# Chunks a consumer may be sent before it gives credit back: rstream's default unless `credit`.
_CREDIT: int = library_defaults(Consumer.subscribe, "initial_credit")["initial_credit"]
# A Publish frame's own bytes, and each message's (its publishing id and its length).
_FRAME_OVERHEAD, _MESSAGE_OVERHEAD = 13, 12
_OFFSET_TYPES = {
    "first": OffsetType.FIRST,
    "last": OffsetType.LAST,
    "next": OffsetType.NEXT,
    "offset": OffsetType.OFFSET,
    "timestamp": OffsetType.TIMESTAMP,
}
# The URL's retention options and the stream protocol's Create arguments they become: the segment
# size is `stream-max-segment-size-bytes` there (RabbitMQ 3.10 ignored `max-segment-size-bytes`).
_STREAM_ARGUMENTS = {
    "max-length-bytes": "max-length-bytes",
    "max-segment-size-bytes": "stream-max-segment-size-bytes",
    "max-age": "max-age",
}
# Refusals no retry can mend: credentials, permissions, arguments the broker will not take.
_REFUSED = (
    AuthenticationFailure,
    SASLAuthenticationFailureLoopback,
    VirtualHostAccessFailure,
    AccessRefused,
    PreconditionFailed,
)
# What rstream raises when the broker is away or going: the socket's errors, its frame waits'
# timeouts, a leader not yet elected, a stream or subscription it has not cleaned up yet.
_GONE = (OSError, ConnectionError, TimeoutError, ServerError, ClientError)


class RabbitStreamDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = schemes_of("worker.drivers.rabbit_stream:RabbitStreamDriver")
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]] = DRIVER_OPTIONS[
        "worker.drivers.rabbit_stream:RabbitStreamDriver"
    ]
    DESCRIPTION = "RabbitMQ Streams (rstream)"
    LIBRARY = "rstream"
    # publish_many puts a burst in the outbox in one call, and the writer hands it to rstream
    # whole: the sender builds its bodies at once, with one sent stamp.
    TAKES_BURSTS = True
    # RabbitMQ's own stream client's default (its Java client's maxUnconfirmedMessages): the
    # broker confirms a chunk once it is written, and a window of 1,000 kept about two frames in
    # flight (bench/HISTORY.md).
    DEFAULT_WINDOW = 10_000

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        self._name = f"maestro-{self.destination}-{client}-{uuid.uuid4().hex[:6]}"
        self._balanced = bool(endpoint.options.get("load_balancer", False))
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._reconnecting: asyncio.Task[None] | None = None
        # Sending: encoded messages not yet handed to rstream.
        self._publishing = False  # the publisher is declared and its connection up
        self._outbox: Outbox[bytes] = Outbox(self._write)
        # Confirmations of one frame, counted by rstream's callback and settled together.
        self._tally = Tally(self)  # rstream's confirmations, settled per frame
        # Receiving: what arrived since the last hand-over, and where to subscribe again.
        self._on_messages: OnMessages | None = None
        self._processing_delay_s = 0.0
        self._arrived: list[bytes] = []
        self._handing = False
        self._next_offset: int | None = None  # after the last message taken, once the connection dropped
        self._taken_any = False  # a message was handed over: there is an offset to go on from

    # --- connecting ------------------------------------------------------------------------------

    def _connection(self) -> dict[str, Any]:
        e = self.endpoint
        return {
            "host": e.host,
            "port": e.port,
            "username": e.username or "guest",
            "password": e.password or "guest",
            "vhost": e.options.get("vhost", "/"),
            "ssl_context": e.ssl_context(),
            "frame_max": _FRAME_MAX,  # rstream's default, given: the frames are cut to it (_frames)
        }

    def _made(self, entity: _Entity) -> _Entity:
        """A Producer or Consumer whose connections all close (`_Pool`), with the settings
        rstream gave its own pool (its defaults: heartbeat, max_retries)."""
        made = entity._pool
        entity._pool = _Pool(
            **self._connection(),
            heartbeat=made._heartbeat,
            load_balancer_mode=made.load_balancer_mode,
            max_retries=made.max_retries,
        )
        return entity

    def library_settings(self, sending: bool) -> dict[str, object]:
        """Read back from the Producer (sending) or Consumer rstream makes with this driver's
        options: its connections' pool, and what the driver does with it."""
        options = self._options()
        pool = self._made(Producer(**options))._pool if sending else self._made(Consumer(**options))._pool
        out: dict[str, object] = {
            "rstream frame_max": pool._frame_max,
            "rstream heartbeat": pool._heartbeat,
            "rstream max_retries": pool.max_retries,
            "rstream load_balancer_mode": pool.load_balancer_mode,
            "rstream recovery_strategy": "off: the driver reconnects (0.05 s growing to 1 s)",
        }
        if sending:
            out["rstream publish"] = "send_batch, a frame's worth at a time (no batching timer), each confirmed"
        else:
            kind, value = self.endpoint.options.get("offset", ("next", 0))
            out["rstream offset_specification"] = f"{kind} {value}" if kind in ("offset", "timestamp") else kind
            out["rstream initial_credit"] = self.endpoint.options.get("credit", _CREDIT)
        return out

    def _options(self) -> dict[str, Any]:
        """A Producer's or Consumer's: its connections' and this driver's."""
        return self._connection() | {
            "load_balancer_mode": self._balanced,
            "connection_name": self._name,
            # Disabled: reconnecting is the driver's (the module's docstring says why).
            "recovery_strategy": BackOffRecoveryStrategy(False),
        }

    def _stream_arguments(self) -> dict[str, Any]:
        o = self.endpoint.options
        return {argument: o[name] for name, argument in _STREAM_ARGUMENTS.items() if name in o}

    def acknowledges(self) -> bool:
        return True  # every publish is confirmed

    async def connect(self) -> None:
        await probe(self.endpoint)  # rstream's own connect says only "Could not connect" after 3 s
        self._loop = asyncio.get_running_loop()
        self._closing = False
        producer = self._producer = self._made(Producer(**self._options(), on_close_handler=self._publisher_lost))
        # Senders and receivers alike: a receiver that subscribes first must find the stream.
        arguments = self._stream_arguments()
        try:
            await self._call(producer.create_stream(self.destination, arguments, exists_ok=True))
        except ConnectError as exc:
            # RabbitMQ's refusal has no text: a stream that exists keeps the retention it was
            # made with, and a Create with other arguments (none included) is refused.
            if not isinstance(exc.__cause__, PreconditionFailed):
                raise
            if not arguments and await self._call(producer.stream_exists(self.destination)):
                return  # no retention asked for: the stream's own
            if not arguments:
                raise
            o = self.endpoint.options
            given = ", ".join(f"{name}={o[name]}" for name in _STREAM_ARGUMENTS if name in o)
            why = f"the stream {self.destination} exists with another retention than {given}"
            raise ConnectError(f"{self.endpoint}: {why}: drop those options or delete the stream", retry=False) from exc

    async def _call(self, step: Awaitable[_T]) -> _T:
        """Await one of rstream's steps, its errors translated: a refusal is final, the rest retry."""
        try:
            return await step
        except _REFUSED as exc:
            cause = "authentication failed" if isinstance(exc, AuthenticationFailure) else "refused"
            raise ConnectError(f"{self.endpoint}: {cause} ({type(exc).__name__}: {exc})", retry=False) from exc
        except _GONE as exc:
            why = connect_cause(exc)
            raise ConnectError(f"{self.endpoint}: {why} ({type(exc).__name__}: {exc})", retry=True) from exc

    # --- sending ---------------------------------------------------------------------------------

    async def start_sending(self) -> None:
        await self._declare_publisher()

    async def _declare_publisher(self) -> None:
        """The publisher and its connection to the stream's leader, before the first message
        (else the first frame pays for them, and a leader that cannot be reached shows only
        then). rstream 1.1.1 declares a publisher only inside a send: this is that step."""
        producer = self._producer
        assert producer is not None
        async with producer._lock:
            publisher = await self._call(producer._get_or_create_publisher(self.destination))
        if not publisher.client.is_connection_alive():  # the one that went, not yet cleaned up by rstream
            raise ConnectError(f"{self.endpoint}: the publisher's connection is closed", retry=True)
        self._publishing = True

    def publish(self, body: bytes, token: int) -> None:
        done = self.publish_many((body,), token)
        if done.down is not None:
            raise done.down
        if done.refused:
            raise SendError(f"{self.endpoint}: {len(body)} bytes do not fit a {_FRAME_MAX} B frame", retry=False)

    def publish_many(self, bodies: Iterable[bytes], first_token: int) -> Handover:
        """The burst, each as a Data section (`data_head`, made once per size), in the outbox."""
        if not self._publishing:
            next(iter(bodies), None)  # the one that met the closed connection, as publish() would
            return Handover(down=DisconnectedError(f"{self.endpoint}: not connected", retry=True))
        encoded: list[bytes] = []
        append, size, head, too_large = encoded.append, -1, b"", 0
        for body in bodies:
            if len(body) != size:
                size = len(body)
                head = data_head(size)
                if size + len(head) + _FRAME_OVERHEAD + _MESSAGE_OVERHEAD > _FRAME_MAX:
                    too_large += 1  # refused outright: its number is spent, nothing to settle
                    size = -1
                    continue
            append(head + body)
        self._outbox.put_many(encoded)
        done = Handover(handed=len(encoded) + too_large)
        if too_large:
            done.refused["failed"] = too_large
        return done

    async def _write(self, batch: list[bytes]) -> None:
        """What the outbox held, to rstream a frame's worth at a time, in the order published."""
        for frame in _frames(batch):
            await self._send(frame)

    async def _send(self, frame: list[bytes]) -> None:
        producer = self._producer
        assert producer is not None
        if not self._publishing:  # the connection went while this waited: not sent
            self._lost(len(frame), "disconnected before sent")
            return
        try:
            await producer.send_batch(self.destination, frame, on_publish_confirm=self._confirm)
        except _GONE as exc:
            # Raised while rstream declared the publisher again, before anything was sent.
            self._lost(len(frame), f"{type(exc).__name__}: {exc}")
            self._publisher_down()

    def _lost(self, count: int, why: str) -> None:
        self.on_settled(count, SendError(f"{self.endpoint}: {why}", retry=False, kind="unconfirmed"))

    def _confirm(self, status: ConfirmationStatus) -> None:
        """rstream's callback, once per publishing id: counted, settled with the frame's others."""
        if status.is_confirmed:
            self._tally.taken()
        elif status.response_code == -1:  # rstream's: the connection went before the broker answered
            self._tally.refused("disconnected before confirmed", "unconfirmed")
        else:
            self._tally.refused(f"refused (code {status.response_code})", "nacked")

    def _publisher_lost(self, info: OnClosedErrorInfo) -> None:
        """rstream's close handler: the connection went (or the stream moved: a metadata update).
        It fails what was in flight by itself (`_confirm`, code -1)."""
        log.info("%s: publisher connection lost (%s)", self.endpoint, info.reason)
        if self._publishing:
            self._publisher_down()

    def _publisher_down(self) -> None:
        self._publishing = False
        if not self._closing and (self._reconnecting is None or self._reconnecting.done()):
            self._reconnecting = asyncio.ensure_future(self._reconnect(self._declare_publisher))

    async def _reconnect(self, step: Callable[[], Awaitable[None]]) -> None:
        """`step` (declaring the publisher, or subscribing) again with the worker's backoff until
        it works or the driver closes."""
        attempt = 0
        while not self._closing:
            await asyncio.sleep(backoff_s(attempt))
            attempt += 1
            try:
                await step()
            except ConnectError as exc:
                log.debug("%s: not back yet: %s", self.endpoint, exc)
                continue
            self.reconnects_ns.append(time.time_ns())
            log.info("%s: back after %d tries", self.endpoint, attempt)
            return

    # --- receiving -------------------------------------------------------------------------------

    def _offset(self) -> ConsumerOffsetSpecification:
        if self._next_offset is not None:  # subscribing again: from the message after the last taken
            return ConsumerOffsetSpecification(OffsetType.OFFSET, self._next_offset)
        kind, value = self.endpoint.options.get("offset", ("next", 0))
        return ConsumerOffsetSpecification(_OFFSET_TYPES[kind], value if kind in ("offset", "timestamp") else None)

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        self._on_messages = on_messages
        self._processing_delay_s = processing_delay_s
        await self._subscribe()

    async def _subscribe(self) -> None:
        """A consumer of its own, subscribed: a try that failed leaves rstream's Consumer with
        a subscriber it made and never subscribed (a subscribe that timed out while the stream
        came back after a restart), which refuses every later try as already subscribed."""
        if self._consumer is not None:
            await _close(self._consumer, str(self.endpoint))
        consumer = self._consumer = self._made(Consumer(**self._options(), on_close_handler=self._consumer_lost))
        take = self._take_slowly if self._processing_delay_s else self._take
        await self._call(
            consumer.subscribe(
                self.destination,
                take,
                offset_specification=self._offset(),
                initial_credit=self.endpoint.options.get("credit", _CREDIT),
            )
        )

    def _take(self, message: bytes, _context: MessageContext) -> None:
        """rstream's callback, once per message of each chunk it delivers: kept until the
        hand-over. Where to subscribe again is read from rstream's subscriber when the
        connection drops (`_consumer_lost`), not kept here per message."""
        self._arrived.append(message)
        if not self._handing:
            self._handing = True
            assert self._loop is not None
            self._loop.call_soon(self._hand_over)

    async def _take_slowly(self, message: bytes, context: MessageContext) -> None:
        """A slow consumer: each message handed over alone, then its time taken before the next
        (rstream awaits this before it goes on with the chunk)."""
        assert self._on_messages is not None
        self._next_offset = context.offset + 1
        self._on_messages([(_body(message), time.time_ns())])
        await asyncio.sleep(self._processing_delay_s)

    def _hand_over(self) -> None:
        """What arrived since the last hand-over, stamped once it is all in hand: a stamp taken at
        the first message would be earlier than the sending of a later chunk in the same burst."""
        self._handing = False
        self._taken_any = True
        arrived, self._arrived = self._arrived, []
        if arrived and self._on_messages is not None:
            self._on_messages(Burst(bare_data_bodies(arrived, _body), time.time_ns()))

    def _consumer_lost(self, info: OnClosedErrorInfo) -> None:
        log.info("%s: consumer connection lost (%s)", self.endpoint, info.reason)
        consumer = self._consumer
        if consumer is not None and self._taken_any and not self._processing_delay_s:
            # rstream's subscriber, before rstream drops it (its own restart runs after this
            # handler): the offset after the last chunk delivered, whose every message was taken
            # (a chunk's callbacks run in one go). A slow consumer keeps its own (_take_slowly).
            for subscriber in consumer._subscribers.values():
                if subscriber.stream == self.destination:
                    self._next_offset = subscriber.offset
        if not self._closing and (self._reconnecting is None or self._reconnecting.done()):
            self._reconnecting = asyncio.ensure_future(self._reconnect(self._subscribe))

    # --- closing ---------------------------------------------------------------------------------

    async def close(self) -> None:
        self._closing = True
        self._publishing = False
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnecting
            self._reconnecting = None
        unsent = await self._outbox.close()
        if unsent:
            self._lost(len(unsent), "closed before sent")
        self._tally.settle()  # confirmations counted and not yet settled
        # What is still in flight now is never settled: the sender counts it as unconfirmed.
        for entity in (self._consumer, self._producer):
            if entity is not None:
                await _close(entity, str(self.endpoint))
        self._consumer = self._producer = None


async def _close(entity: Producer | Consumer, where: str) -> None:
    try:
        await entity.close()
    except _GONE as exc:
        log.warning("%s: %s did not close cleanly: %s", where, type(entity).__name__, exc)


def _frames(batch: list[bytes]) -> list[list[bytes]]:
    """`batch` in parts that each fit a Publish frame: rstream's `send_batch` puts a whole batch
    in one frame, and the broker closes a connection that sends a frame larger than it agreed."""
    if sum(map(len, batch)) + len(batch) * _MESSAGE_OVERHEAD + _FRAME_OVERHEAD <= _FRAME_MAX:
        return [batch]
    frames: list[list[bytes]] = [[]]
    room = _FRAME_MAX - _FRAME_OVERHEAD
    for message in batch:
        need = len(message) + _MESSAGE_OVERHEAD
        if need > room and frames[-1]:
            frames.append([])
            room = _FRAME_MAX - _FRAME_OVERHEAD
        frames[-1].append(message)
        room -= need
    return frames


def _body(message: bytes) -> bytes:
    """The body the sender wrote: its Data section read from the bytes, else what rstream's AMQP
    codec makes of the message (another client's), else nothing (counted as foreign)."""
    body = data_body(message)
    if body is not None:
        return body
    try:
        decoded = amqp_decoder(message)
    except Exception:  # whatever the codec raises on bytes that are not AMQP 1.0
        return b""
    # An AmqpValue body (a string, a number), else the Data section rstream's codec kept (the last).
    return body_bytes(decoded.value if decoded.value is not None else decoded.body)


# --- rstream 1.1.1's sockets, closed -----------------------------------------------------------
# rstream leaves a connection's socket open when the broker closed it first: `Client.close` skips
# the socket of a connection it found broken, and its pool drops a dead connection without closing
# it. A refused login (the broker closes after its answer) left two sockets that the contract
# suite's garbage collection reported; a broker restart leaves one per connection.


class _Client(Client):
    async def close(self) -> None:
        connection = self._conn
        await super().close()
        if connection is not None and self._conn is connection:  # rstream skipped it: broken
            with contextlib.suppress(OSError):
                await connection.close()
            self._conn = None


class _Pool(ClientPool):
    """rstream's pool of connections, making `_Client`s and closing the dead ones it drops."""

    async def get(self, *args: Any, **kwargs: Any) -> Client:
        for clients in self._clients.values():
            for client in clients:
                if not client.is_connection_alive():
                    await client.close()
        return await super().get(*args, **kwargs)

    async def new(
        self,
        connection_name: str | None,
        addr: Addr,
        connection_closed_handler: Any = None,
        sasl_configuration_mechanism: Any = None,
        max_clients_by_connections: int = 256,
    ) -> Client:
        """`ClientPool.new`, with a `_Client`."""
        client = _Client(
            host=addr.host,
            port=addr.port,
            ssl_context=self.ssl_context,
            frame_max=self._frame_max,
            heartbeat=self._heartbeat,
            connection_name=connection_name,
            connection_closed_handler=connection_closed_handler,
            sasl_configuration_mechanism=sasl_configuration_mechanism or self._sasl_configuration_mechanism,
            max_clients_by_connections=max_clients_by_connections,
        )
        try:
            await client.start()
            await client.authenticate(vhost=self.vhost, username=self.username, password=self.password)
        except BaseException:
            await client.close()
            raise
        return client
