"""AMQP 0-9-1 through aio-pika: `amqp://[user:pw@]host[:5672]/queue?confirms=true&ack=manual&...`.

The path names the queue (a `%d` in it and `destinations=1-100` spread clients over many
queues). Messages go to `exchange` (default: the default exchange) with `routing_key`
(default: the queue name). aio-pika's robust connection reconnects and re-declares by itself.
"""

from __future__ import annotations

import time
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

from worker.drivers.base import (
    ConnectError,
    DisconnectedError,
    Driver,
    Endpoint,
    OnMessage,
    SendError,
    boolean,
    choice,
    integer,
)

__all__ = ["AmqpDriver"]

_DISCONNECTS = (
    aio_pika.exceptions.AMQPConnectionError,
    aio_pika.exceptions.ChannelInvalidStateError,
    aio_pika.exceptions.ChannelClosed,
    aiormq.exceptions.ConnectionClosed,
    ConnectionError,
)


class AmqpDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = {"amqp": (False, 5672), "amqps": (True, 5671)}
    OPTIONS: ClassVar[dict[str, Any]] = {
        "vhost": str,
        "exchange": str,
        "exchange_type": choice("direct", "fanout", "topic", "headers"),
        "routing_key": str,
        "queue_type": choice("classic", "quorum", "stream"),
        "max_length": integer(1, 2**31),
        "lazy": boolean,
        "durable": boolean,  # the queue survives a broker restart
        "persistent": boolean,  # delivery mode 2
        "confirms": boolean,
        "confirm_timeout_s": integer(1, 3600),
        "ack": choice("auto", "manual"),
        "prefetch": integer(0, 65535),
    }
    DESCRIPTION = "AMQP 0-9-1 (aio-pika)"

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        o = endpoint.options
        self.confirms: bool = o.get("confirms", True)
        self.manual_ack = o.get("ack", "manual") == "manual"
        self.delivery_mode = (
            aio_pika.DeliveryMode.PERSISTENT if o.get("persistent", False) else aio_pika.DeliveryMode.NOT_PERSISTENT
        )
        self.routing_key: str = o.get("routing_key", self.destination)
        self._connection: AbstractRobustConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._queue: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self._on_message: OnMessage | None = None

    def _queue_arguments(self) -> dict[str, Any]:
        o = self.endpoint.options
        arguments: dict[str, Any] = {}
        if "queue_type" in o:
            arguments["x-queue-type"] = o["queue_type"]
        if "max_length" in o:
            arguments["x-max-length"] = o["max_length"]
        if o.get("lazy"):
            arguments["x-queue-mode"] = "lazy"
        return arguments

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
                timeout=15,
                client_properties={"connection_name": f"maestro-{self.destination}-{self.client}"},
            )
            self._connection.reconnect_callbacks.add(self._reconnected)
            self._channel = await self._connection.channel(publisher_confirms=self.confirms)
            await self._channel.set_qos(prefetch_count=e.options.get("prefetch", 100))
            self._queue = await self._channel.declare_queue(
                self.destination,
                durable=e.options.get("durable", False) or e.options.get("queue_type") in ("quorum", "stream"),
                arguments=self._queue_arguments(),
            )
            exchange_name = e.options.get("exchange", "")
            if exchange_name:
                self._exchange = await self._channel.declare_exchange(
                    exchange_name, e.options.get("exchange_type", "direct"), durable=e.options.get("durable", False)
                )
                await self._queue.bind(self._exchange, routing_key=self.routing_key)
            else:
                self._exchange = self._channel.default_exchange
        except aio_pika.exceptions.ProbableAuthenticationError as exc:
            raise ConnectError(f"{e}: the broker refused our credentials", retry=False) from exc
        except aio_pika.exceptions.ChannelPreconditionFailed as exc:
            raise ConnectError(f"{e}: the queue exists with other arguments: {exc}", retry=False) from exc
        except (*_DISCONNECTS, OSError, TimeoutError) as exc:
            raise ConnectError(f"{e}: {exc or type(exc).__name__}", retry=True) from exc

    def _reconnected(self, *_: Any) -> None:
        self.reconnects_ns.append(time.time_ns())

    async def send(self, body: bytes) -> None:
        assert self._exchange is not None
        message = aio_pika.Message(body, delivery_mode=self.delivery_mode)
        try:
            result = await self._exchange.publish(
                message,
                routing_key=self.routing_key,
                mandatory=self.confirms,
                timeout=self.endpoint.options.get("confirm_timeout_s", 30) if self.confirms else None,
            )
        except aio_pika.exceptions.DeliveryError as exc:
            raise SendError(f"{self.endpoint}: nacked", retry=True, kind="nacked") from exc
        except aio_pika.exceptions.PublishError as exc:
            raise SendError(f"{self.endpoint}: returned (unroutable)", retry=False, kind="returned") from exc
        except TimeoutError as exc:
            raise SendError(f"{self.endpoint}: no confirm in time", retry=True, kind="timed_out") from exc
        except _DISCONNECTS as exc:
            raise DisconnectedError(f"{self.endpoint}: {exc or type(exc).__name__}", retry=True) from exc
        if self.confirms and isinstance(result, Basic.Nack):
            raise SendError(f"{self.endpoint}: nacked", retry=True, kind="nacked")
        if self.confirms and result is not None and not isinstance(result, Basic.Ack):
            raise SendError(f"{self.endpoint}: returned (unroutable)", retry=False, kind="returned")

    async def receive(self, on_message: OnMessage) -> None:
        assert self._queue is not None
        self._on_message = on_message
        await self.resume()

    async def _deliver(self, message: AbstractIncomingMessage) -> None:
        assert self._on_message is not None
        await self._on_message(message.body)
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
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
