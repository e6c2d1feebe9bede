"""AMQP 0-9-1 through aio-pika: `amqp://[user:pw@]host[:5672]/queue?confirms=true&ack=manual&...`.

The path names the queue (a `%d` in it and `destinations=1-100` spread clients over many
queues). Messages go to `exchange` (default: the default exchange) with `routing_key`
(default: the queue name). aio-pika's robust connection reconnects and re-declares by itself.

Request/reply: a request carries `reply_to` and `correlation_id`; the replier publishes its
answer to the default exchange with the request's `reply_to` as routing key. `?reply_to=` on the
requester's URL picks the reply address: none gives each client an exclusive server-named queue,
`amq.rabbitmq.reply-to` RabbitMQ's direct reply-to (no queue; consumed without acks on the
publishing channel, as it must be), any other name a queue of that name per client
(`<name>-<client>-<random>`, deleted when the client goes).

aio-pika publishes from a coroutine. With confirms each message is a task of its own that the
worker does not wait for, settled when the broker's Basic.Ack (or Nack, or a Return) comes;
`confirm_window` (default 1000) bounds the tasks in flight. Without confirms a message is settled
once written, and aio-pika writes one publish at a time anyway (a channel lock and a drain per
frame set), so one writer task per client takes them from a queue in turn: a task per message
would only add its creation and the lock's contention (0.7 of aio-pika's own loop, measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

import aio_pika
import aiormq.exceptions
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)
from pamqp.commands import Basic

from protocol.concurrency import LoopPoll
from protocol.schemes import schemes_of
from protocol.sut_url import DRIVER_OPTIONS
from worker.drivers.base import (
    ConnectError,
    DisconnectedError,
    Driver,
    Endpoint,
    OnMessages,
    OnRequests,
    SendError,
    connect_cause,
    library_defaults,
)

__all__ = ["DIRECT_REPLY_TO", "AmqpDriver"]

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"

# aio-pika waits for a connection without end by default: a broker that takes the TCP connection
# and never answers (a fault proxy's paused upstream) would hang the connect, not fail it.
_CONNECT_TIMEOUT_S = 15
_SWEEP_S = 0.25  # how often overdue confirms are looked for: a timeout fires this late at most

_DISCONNECTS = (
    aio_pika.exceptions.AMQPConnectionError,
    aio_pika.exceptions.ChannelInvalidStateError,
    aio_pika.exceptions.ChannelClosed,
    aiormq.exceptions.ConnectionClosed,
    ConnectionError,
)


def _aiormq_heartbeat_s() -> int:
    """aiormq's heartbeat, asked in connection.tune-ok, for a URL that sets none (as ours): read
    from an aiormq connection made and never opened, on a loop of its own (it takes one)."""
    loop = asyncio.new_event_loop()
    try:
        return int(aiormq.Connection("amqp://localhost/", loop=loop).heartbeat_timeout)
    finally:
        loop.close()


class AmqpDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = schemes_of("worker.drivers.amqp:AmqpDriver")
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]] = DRIVER_OPTIONS["worker.drivers.amqp:AmqpDriver"]
    DESCRIPTION = "AMQP 0-9-1 (aio-pika)"
    LIBRARY = "aio-pika"

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        o = endpoint.options
        self.confirms: bool = o.get("confirms", True)
        self.manual_ack = o.get("ack", "manual") == "manual"
        self.delivery_mode = (
            aio_pika.DeliveryMode.PERSISTENT if o.get("persistent", False) else aio_pika.DeliveryMode.NOT_PERSISTENT
        )
        self.routing_key: str = endpoint.numbered(o.get("routing_key", self.destination), client)
        self._connection: AbstractRobustConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._queue: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self._on_messages: OnMessages | None = None
        self._on_requests: OnRequests | None = None
        self._reply_to = ""  # a requester's reply address, once open_replies made it
        self._processing_delay_s = 0.0
        # Confirmed publishes in flight, in the order they went, each with the loop time its
        # confirm is due by: held here until done (the loop keeps weak references to tasks).
        self._publishing: dict[asyncio.Task[Any], float] = {}
        self._timed_out: set[asyncio.Task[Any]] = set()  # cancelled by _time_out, not by close
        self._confirm_timeout_s: float = o.get("confirm_timeout_s", 30)
        self._sweep: LoopPoll | None = None
        # Without confirms: (exchange, message, routing key) for the writer, in order.
        self._outbox: deque[tuple[AbstractExchange, aio_pika.Message, str]] = deque()
        self._outbox_filled = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    def acknowledges(self) -> bool:
        return self.confirms

    def _queue_arguments(self) -> dict[str, object]:
        o = self.endpoint.options
        arguments: dict[str, object] = {}
        if "queue_type" in o:
            arguments["x-queue-type"] = o["queue_type"]
        if "max_length" in o:
            arguments["x-max-length"] = o["max_length"]
        if "overflow" in o:
            arguments["x-overflow"] = o["overflow"]
        if o.get("lazy"):
            arguments["x-queue-mode"] = "lazy"
        return arguments

    def _prefetch(self) -> int:
        """basic.qos's prefetch_count. Without one (aio-pika sets none: RabbitMQ's default is no
        bound) a consumer with manual acks holds every message the queue has, so a slow one
        (processing_delay_s) or a paused one takes the backlog out of the broker; 100 keeps it
        there. It costs no rate: one consumer drained 40,000 messages at 4,261-6,816 msg/s
        without a bound and 3,950-7,899 with 100 (bench/driver_defaults.py, 3 rounds, 2026-11-28)."""
        return int(self.endpoint.options.get("prefetch", 100))

    def _durable(self) -> bool:
        o = self.endpoint.options
        return bool(o.get("durable", False) or o.get("queue_type") in ("quorum", "stream"))

    def library_settings(self, sending: bool) -> dict[str, object]:
        """What connect() hands aio-pika, and the defaults it leaves to aio-pika and aiormq,
        read from them: the robust connection's parameters, and aiormq's own for the URL."""
        robust = {p.name: p.parse(p.default) for p in aio_pika.RobustConnection.PARAMETERS if p.default is not None}
        heartbeat = _aiormq_heartbeat_s()
        mandatory = library_defaults(aio_pika.Exchange.publish, "mandatory")["mandatory"] if self.confirms else False
        o = self.endpoint.options
        return {
            "aio-pika connection_class": "RobustConnection",
            "aio-pika timeout (connect, s)": _CONNECT_TIMEOUT_S,
            "aio-pika reconnect_interval": robust["reconnect_interval"],
            "aio-pika fail_fast": robust["fail_fast"],
            "aiormq heartbeat": heartbeat,
            "aio-pika publisher_confirms": self.confirms,
            "aio-pika mandatory": mandatory,
            "aio-pika delivery_mode": self.delivery_mode.name,
            "aio-pika prefetch_count": self._prefetch(),
            "aio-pika no_ack": not self.manual_ack,
            "aio-pika queue durable": self._durable(),
            "aio-pika queue arguments": self._queue_arguments() or "none",
            "aio-pika exchange": o.get("exchange", "") or "(the default exchange)",
        }

    async def connect(self) -> None:
        e = self.endpoint
        try:
            self._connection = await aio_pika.connect_robust(
                host=e.host,
                port=e.port,
                login=e.username or "guest",
                password=e.password or "guest",
                virtualhost=e.options.get("vhost", "/"),
                ssl=e.tls,
                ssl_context=e.ssl_context(),
                timeout=_CONNECT_TIMEOUT_S,
                client_properties={"connection_name": f"maestro-{self.destination}-{self.client}"},
            )
            self._connection.reconnect_callbacks.add(self._reconnected)
            self._channel = await self._connection.channel(publisher_confirms=self.confirms)
            await self._channel.set_qos(prefetch_count=self._prefetch())
            self._queue = await self._channel.declare_queue(
                self.destination, durable=self._durable(), arguments=self._queue_arguments()
            )
            exchange_name = e.options.get("exchange", "")
            if exchange_name.startswith("amq."):
                # The broker's own (amq.topic, where RabbitMQ's MQTT plugin publishes): always
                # there, and declaring one is refused, so it is only looked up.
                self._exchange = await self._channel.get_exchange(exchange_name)
                await self._queue.bind(self._exchange, routing_key=self.routing_key)
            elif exchange_name:
                self._exchange = await self._channel.declare_exchange(
                    exchange_name, e.options.get("exchange_type", "direct"), durable=e.options.get("durable", False)
                )
                await self._queue.bind(self._exchange, routing_key=self.routing_key)
            else:
                self._exchange = self._channel.default_exchange
        except aio_pika.exceptions.ProbableAuthenticationError as exc:
            raise ConnectError(f"{e}: authentication failed (the broker refused our credentials)", retry=False) from exc
        except aio_pika.exceptions.ChannelPreconditionFailed as exc:
            raise ConnectError(f"{e}: the queue exists with other arguments: {exc}", retry=False) from exc
        except (*_DISCONNECTS, OSError, TimeoutError) as exc:
            raise ConnectError(f"{e}: {connect_cause(exc)} ({exc or type(exc).__name__})", retry=True) from exc

    def _reconnected(self, *_: Any) -> None:
        self.reconnects_ns.append(time.time_ns())

    def publish(self, body: bytes, token: int) -> None:
        assert self._exchange is not None
        self._publish(self._exchange, aio_pika.Message(body, delivery_mode=self.delivery_mode), self.routing_key)

    def _publish(self, exchange: AbstractExchange, message: aio_pika.Message, routing_key: str) -> None:
        channel = self._channel
        assert channel is not None
        if channel.is_closed:
            raise DisconnectedError(f"{self.endpoint}: channel closed", retry=True)
        if not self.confirms:
            self._outbox.append((exchange, message, routing_key))
            self._outbox_filled.set()
            if self._writer is None:
                self._writer = asyncio.ensure_future(self._write_in_turn())
            return
        # No timeout= here: aio-pika's is a timer per publish, set and cancelled; one sweep
        # over the oldest in flight does the same (a confirmed sender kept 0.88 of aio-pika's
        # own loop with the timer per publish, 0.99 with the sweep: bench/HISTORY.md).
        task = asyncio.ensure_future(exchange.publish(message, routing_key=routing_key, mandatory=True))
        loop = task.get_loop()
        self._publishing[task] = loop.time() + self._confirm_timeout_s
        task.add_done_callback(self._published)
        sweep = self._sweep
        if sweep is None:
            sweep = self._sweep = LoopPoll(loop, min(_SWEEP_S, self._confirm_timeout_s / 4), self._time_out)
        sweep.start()

    def _time_out(self) -> bool:
        """Cancel the publishes whose confirm is overdue (settled as timed out by _published);
        whether any are still in flight."""
        now = asyncio.get_running_loop().time()
        overdue = []
        for task, deadline in self._publishing.items():
            if deadline > now:  # in the order they went: the rest are due later
                break
            overdue.append(task)
        for task in overdue:
            self._timed_out.add(task)
            task.cancel()
        return bool(self._publishing)

    async def _write_in_turn(self) -> None:
        outbox = self._outbox
        while True:
            await self._outbox_filled.wait()
            self._outbox_filled.clear()
            while outbox:
                exchange, message, routing_key = outbox[0]
                try:  # a cancel (close) leaves this one in the outbox, settled there with the rest
                    # Not mandatory, where aio-pika's default is: without confirms nothing waits
                    # for a Basic.Return, and aio-pika would log each one returned.
                    await exchange.publish(message, routing_key=routing_key, mandatory=False)
                except Exception as exc:
                    outbox.popleft()
                    self.on_settled(1, self._verdict_of(exc))
                    continue
                outbox.popleft()
                self.on_settled(1, None)

    async def open_replies(self, on_replies: OnMessages) -> None:
        channel = self._channel
        assert channel is not None
        name = self.endpoint.options.get("reply_to", "")
        if name == DIRECT_REPLY_TO:
            queue = await channel.get_queue(DIRECT_REPLY_TO, ensure=False)
        elif name:
            queue = await channel.declare_queue(f"{name}-{self.client}-{secrets.token_hex(3)}", auto_delete=True)
        else:
            queue = await channel.declare_queue("", exclusive=True, auto_delete=True)
        self._reply_to = queue.name

        async def deliver(message: AbstractIncomingMessage) -> None:
            on_replies([(message.body, time.time_ns())])

        # Replies are taken without acks: direct reply-to allows nothing else, and a reply lost
        # with its requester's connection would be late by then anyway.
        await queue.consume(deliver, no_ack=True)

    def request(self, body: bytes, token: int, correlation: str) -> None:
        assert self._exchange is not None and self._reply_to, "open_replies() first"
        message = aio_pika.Message(
            body, delivery_mode=self.delivery_mode, reply_to=self._reply_to, correlation_id=correlation
        )
        self._publish(self._exchange, message, self.routing_key)

    async def serve(self, on_requests: OnRequests) -> None:
        assert self._queue is not None
        self._on_requests = on_requests
        await self.resume()

    def reply(self, address: Any, body: bytes, token: int) -> None:
        reply_to, correlation = address
        if not reply_to:
            self.on_settled(1, SendError(f"{self.endpoint}: a request without reply_to", retry=False))
            return
        assert self._channel is not None
        message = aio_pika.Message(body, delivery_mode=self.delivery_mode, correlation_id=correlation)
        self._publish(self._channel.default_exchange, message, reply_to)

    def _published(self, task: asyncio.Task[Any]) -> None:
        self._publishing.pop(task, None)
        overdue = False
        if self._timed_out:  # also forgotten where the confirm won the race against the cancel
            overdue = task in self._timed_out
            self._timed_out.discard(task)
        self.on_settled(1, self._verdict(task, overdue))

    def _verdict(self, task: asyncio.Task[Any], overdue: bool = False) -> SendError | None:
        if task.cancelled():
            if overdue:
                return SendError(f"{self.endpoint}: no confirm in time", retry=False, kind="timed_out")
            return self._closed_before_settled()
        error = task.exception()
        if error is not None:
            return self._verdict_of(error)
        result = task.result()
        if self.confirms and isinstance(result, Basic.Nack):
            return SendError(f"{self.endpoint}: nacked", retry=False, kind="nacked")
        if self.confirms and result is not None and not isinstance(result, Basic.Ack):
            return SendError(f"{self.endpoint}: returned (unroutable)", retry=False, kind="returned")
        return None

    def _closed_before_settled(self) -> SendError:
        return SendError(f"{self.endpoint}: closed before confirmed", retry=False, kind="unconfirmed")

    def _verdict_of(self, error: BaseException) -> SendError:
        if isinstance(error, aio_pika.exceptions.DeliveryError):
            return SendError(f"{self.endpoint}: nacked", retry=False, kind="nacked")
        if isinstance(error, aio_pika.exceptions.PublishError):
            return SendError(f"{self.endpoint}: returned (unroutable)", retry=False, kind="returned")
        if isinstance(error, TimeoutError):
            return SendError(f"{self.endpoint}: no confirm in time", retry=False, kind="timed_out")
        if isinstance(error, _DISCONNECTS):
            # Written or not, its fate is unknown: the receivers tell whether it arrived.
            return SendError(f"{self.endpoint}: {error or type(error).__name__}", retry=False, kind="unconfirmed")
        return SendError(f"{self.endpoint}: {type(error).__name__}: {error}", retry=False, kind="failed")

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        assert self._queue is not None
        self._on_messages = on_messages
        self._processing_delay_s = processing_delay_s
        await self.resume()

    async def _deliver(self, message: AbstractIncomingMessage) -> None:
        if self._on_requests is not None:
            self._on_requests([(message.body, time.time_ns(), (message.reply_to, message.correlation_id))])
        else:
            assert self._on_messages is not None
            self._on_messages([(message.body, time.time_ns())])
        if self._processing_delay_s:
            await asyncio.sleep(self._processing_delay_s)  # with manual ack, prefetch bounds the backlog
        if self.manual_ack:
            await message.ack()

    async def pause(self) -> None:
        if self._queue is not None and self._consumer_tag is not None:
            await self._queue.cancel(self._consumer_tag)
            self._consumer_tag = None

    async def resume(self) -> None:
        assert self._queue is not None
        if self._consumer_tag is None:
            self._consumer_tag = await self._queue.consume(self._deliver, no_ack=not self.manual_ack)

    async def close(self) -> None:
        if self._sweep is not None:
            self._sweep.stop()
        for task in list(self._publishing):
            task.cancel()  # settles each as unconfirmed through _published
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        while self._outbox:
            self._outbox.popleft()
            self.on_settled(1, self._closed_before_settled())
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
