"""AMQP 1.0 through python-qpid-proton: `amqp10://[user:pw@]host[:5672]/address?settle=at-least-once&credit=100`.

Proton's container runs on its own `PollThread`; sends reach it through an outbox and one
`EventInjector` wake-up per burst, and dispositions and messages come back a burst at a time
(`LoopBatch`). A message is settled when the peer's disposition comes (at-least-once) or when
it went out on the link (presettled); the link's credit holds the rest in the outbox, within the
worker's window. Messages carry their body as a Data section, so AMQP 0-9-1 consumers of the
same broker read the same bytes.

Request/reply: a requesting client receives its replies on an address of its own,
`<reply_to>-<random>` (the reply URL's address: `//queue/replies` gives `/queue/replies-…` on
RabbitMQ), set as each request's `reply_to` with its `correlation_id`. A replier answers to the
request's `reply_to` over a sender link per reply address, opened on first use (RabbitMQ's AMQP
1.0 plugin has no anonymous relay), with the request's correlation.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, cast

from proton import Delivery, Event, Message, SSLDomain
from proton import Endpoint as ProtonEndpoint
from proton._reactor import delay_iter  # the backoff of proton's reconnect, not re-exported
from proton.handlers import IncomingMessageHandler, MessagingHandler
from proton.reactor import ApplicationEvent, AtMostOnce, Container, DurableSubscription, EventInjector

from protocol.concurrency import LoopBatch, PollThread, call_in_loop
from protocol.schemes import schemes_of
from protocol.sut_url import DRIVER_OPTIONS
from worker.drivers.amqp10_bytes import DATA_SHORT, body_bytes, data_body, encode_data_message
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
    probe,
)

__all__ = ["Amqp10Driver"]

_CONNECT_TIMEOUT_S = 15.0
# How long one round of proton's container waits for its sockets when nothing comes: the poll
# thread looks at its stop flag between rounds (protocol.concurrency.PollThread), and a send
# wakes it at once through the injector, so this bounds only how late a stop is seen.
_ROUND_S = 0.05
# Credit a receiving link is given and kept topped up, where proton's MessagingHandler would
# keep 10: one receiver drained 40,000 messages from RabbitMQ at 4,185-5,044 msg/s with 10 and
# 8,806-11,096 with 100 (bench/driver_defaults.py, 3 rounds, 2026-11-28).
_CREDIT = 100


def data_sections(durable: bool) -> bytes:
    """What proton writes before a message's Data section (its header and properties sections,
    empty but for `durable`), taken from proton's own encoding of an empty message; the Data
    section after them is `amqp10_bytes`'s."""
    empty = Message(body=b"", durable=durable)
    empty.inferred = True
    encoded = bytes(empty.encode())
    if not encoded.endswith(DATA_SHORT + b"\x00"):
        raise ConnectError(f"proton encodes an empty message as {encoded!r}: not a Data section last", retry=False)
    return encoded[: -len(DATA_SHORT) - 1]


class Amqp10Driver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = schemes_of("worker.drivers.amqp10:Amqp10Driver")
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]] = DRIVER_OPTIONS["worker.drivers.amqp10:Amqp10Driver"]
    DESCRIPTION = "AMQP 1.0 (python-qpid-proton)"
    LIBRARY = "python-qpid-proton"

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        self.presettled = endpoint.options.get("settle", "at-least-once") == "presettled"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handler: _Handler | None = None
        self._container: Container | None = None
        self._poller: PollThread | None = None
        self._injector = EventInjector()
        self.reply_address = ""  # a requester's, once open_replies made it

    def acknowledges(self) -> bool:
        return not self.presettled

    def _credit(self) -> int:
        return int(self.endpoint.options.get("credit", _CREDIT))

    def connect_options(self) -> dict[str, object]:
        """What `Container.connect` is given besides the URL, the SSL domain and the
        credentials: nothing, proton's own for all. (It was heartbeat=10 and allowed_mechs="PLAIN
        ANONYMOUS", for no reason written; RabbitMQ takes proton's own choice of mechanism with a
        password, refuses a wrong one and lets a client without one in, as before.)"""
        return {}

    def library_settings(self, sending: bool) -> dict[str, object]:
        """What the driver hands proton, and the defaults it leaves to proton, read from proton:
        `Container.connect`'s (reconnect None: proton's backoff; heartbeat None: no idle
        timeout asked), `delay_iter`'s backoff, and the MessagingHandler's."""
        connect = library_defaults(Container.connect, "reconnect", "heartbeat")
        connect |= self.connect_options()
        backoff = library_defaults(delay_iter, "initial", "factor", "max_delay")
        reconnect = (
            f"proton's backoff: 0, then {backoff['initial']:g} s, x{backoff['factor']:g}, to {backoff['max_delay']:g} s"
            if connect["reconnect"] is None
            else connect["reconnect"]
        )
        handler = library_defaults(MessagingHandler, "auto_accept", "auto_settle")
        out: dict[str, object] = {
            "proton heartbeat": connect["heartbeat"],
            "proton reconnect": reconnect,
            "proton allowed_mechs": connect.get("allowed_mechs") or "proton's choice among the broker's",
            "proton container timeout (s)": _ROUND_S,
        }
        if sending:
            out["proton sender snd_settle_mode"] = "settled (AtMostOnce)" if self.presettled else "unsettled"
            out["proton auto_settle"] = handler["auto_settle"]
            out["proton message durable"] = bool(self.endpoint.options.get("durable"))
        else:
            out["proton prefetch"] = f"0: the driver gives credit, {self._credit()}, one back per message"
            out["proton auto_accept"] = handler["auto_accept"]
            out["proton DurableSubscription"] = bool(self.endpoint.options.get("durable"))
        return out

    def _url(self) -> str:
        """Without the credentials: proton logs the URL it connects to (they go as arguments)."""
        e = self.endpoint
        return f"{'amqps' if e.tls else 'amqp'}://{e.host}:{e.port}"

    async def connect(self) -> None:
        # Proton retries a refused or unresolvable address in the background, saying nothing.
        await probe(self.endpoint)
        self._loop = asyncio.get_running_loop()
        opened: asyncio.Future[None] = self._loop.create_future()
        self._handler = _Handler(self, opened, LoopBatch(self._loop, self._settle))
        container = Container(self._handler)
        container.selectable(self._injector)
        container.timeout = _ROUND_S
        container.start()
        self._container = container
        self._poller = PollThread(f"proton-{self.client}", self._process)
        await self._wait(opened, "no connection")

    def _process(self) -> bool:
        """One round of proton's container (wait for the socket, read, dispatch every event),
        then what the round produced crosses to the loop at once."""
        handler = self._handler
        assert self._container is not None and handler is not None
        going = self._container.process()
        for batch in (handler.verdicts, handler.messages, handler.replies, handler.requests):
            if batch is not None:
                batch.release()
        return bool(going)

    @property
    def container(self) -> Container:
        assert self._container is not None
        return self._container

    async def _wait(self, future: asyncio.Future[None], what: str) -> None:
        try:
            await asyncio.wait_for(future, _CONNECT_TIMEOUT_S)
        except TimeoutError as exc:
            reason = self._handler.error if self._handler else ""
            await self.close()
            raise ConnectError(f"{self.endpoint}: {what} within {_CONNECT_TIMEOUT_S:g} s {reason}", retry=True) from exc

    async def _open_link(self, role: str) -> _Handler:
        handler = self._handler
        assert handler is not None and self._loop is not None
        handler.link_ready = self._loop.create_future()
        handler.role = role
        self._injector.trigger(ApplicationEvent("open_link"))
        await self._wait(handler.link_ready, f"no {role} link")
        return handler

    async def start_sending(self) -> None:
        await self._open_link("sender")

    def publish(self, body: bytes, token: int) -> None:
        self._send(body, token, None)

    def _send(self, body: bytes, token: int, correlation: str | None) -> None:
        handler = self._handler
        assert handler is not None
        if not handler.link_up:
            raise DisconnectedError(f"{self.endpoint}: link down", retry=True)
        handler.outbox.append((body, token, correlation))
        if not handler.flush_pending:  # one wake-up of proton's thread per burst, not per message
            handler.flush_pending = True
            # With the link as its context, the engine knows which connection has work to write.
            self._injector.trigger(ApplicationEvent("flush", link=handler.link))

    def _settle(self, verdicts: list[tuple[int, SendError | None]]) -> None:
        settled, taken = self.on_settled, 0
        for _token, error in verdicts:
            if error is None:
                taken += 1
            else:
                settled(1, error)
        if taken:
            settled(taken, None)

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        assert self._handler is not None and self._loop is not None
        self._handler.messages = LoopBatch(self._loop, on_messages)
        self._handler.processing_delay_s = processing_delay_s
        await self._open_link("receiver")

    # --- request/reply ---------------------------------------------------------------------------

    async def open_replies(self, on_replies: OnMessages) -> None:
        assert self._handler is not None and self._loop is not None
        base = self.endpoint.options.get("reply_to", "/queue/maestro-replies")
        self.reply_address = f"{base}-{uuid.uuid4().hex[:12]}"
        self._handler.replies = LoopBatch(self._loop, on_replies)
        await self._open_link("replies")

    def request(self, body: bytes, token: int, correlation: str) -> None:
        assert self.reply_address, "open_replies() first"
        self._send(body, token, correlation)

    async def serve(self, on_requests: OnRequests) -> None:
        assert self._handler is not None and self._loop is not None
        self._handler.requests = LoopBatch(self._loop, on_requests)
        await self._open_link("receiver")

    def reply(self, address: Any, body: bytes, token: int) -> None:
        reply_to, correlation = address
        if not reply_to:
            self.on_settled(1, SendError(f"{self.endpoint}: a request without reply_to", retry=False))
            return
        handler = self._handler
        assert handler is not None
        handler.reply_outbox.append((reply_to, body, token, correlation))
        self._injector.trigger(ApplicationEvent("flush_replies"))

    async def pause(self) -> None:
        self._injector.trigger(ApplicationEvent("pause"))

    async def resume(self) -> None:
        self._injector.trigger(ApplicationEvent("resume"))

    async def close(self) -> None:
        if self._handler is not None:
            self._injector.trigger(ApplicationEvent("close"))
        if self._poller is not None:
            # The container ends its own loop once the close went out: stopping the thread first
            # could leave the connection open, and the broker would go on handing a closed
            # receiver its credit's worth of messages, lost to the next test on the queue.
            if not await asyncio.to_thread(self._poller.join, 5.0):
                await asyncio.to_thread(self._poller.stop)
            self._poller = None
        if self._handler is not None:
            self._handler.fail_all("closed before settled")


class _Handler(MessagingHandler):
    """Runs on proton's thread, except where it hands results to the loop."""

    def __init__(
        self,
        driver: Amqp10Driver,
        opened: asyncio.Future[None],
        verdicts: LoopBatch[tuple[int, SendError | None]],
    ) -> None:
        super().__init__(prefetch=0, auto_accept=True)
        # proton's handler of incoming messages, but for ours (a list: MessagingHandler made it)
        self.handlers = [
            _Incoming(self) if isinstance(h, IncomingMessageHandler) else h for h in cast(list[Any], self.handlers)
        ]
        self.driver = driver
        self.opened = opened
        self.verdicts = verdicts
        self.messages: LoopBatch[tuple[bytes, int]] | None = None  # set when receiving
        self.replies: LoopBatch[tuple[bytes, int]] | None = None  # a requester's
        self.reply_link: Any = None  # a requester's receiver of its replies
        self.requests: LoopBatch[tuple[bytes, int, Any]] | None = None  # a replier's
        self.reply_outbox: collections.deque[tuple[str, bytes, int, Any]] = collections.deque()
        self.reply_senders: dict[str, Any] = {}  # a replier's sender link per reply address
        self.processing_delay_s = 0.0
        self.flush_pending = False
        self.closing = False
        self.role = ""
        self.link_ready: asyncio.Future[None] | None = None
        # (body, token, correlation): a request's correlation, None for a plain message
        self.outbox: collections.deque[tuple[bytes, int, str | None]] = collections.deque()
        self.unsettled: dict[str, int] = {}  # delivery tag -> token
        self.link_up = False
        self.paused = False
        self.error = ""
        self.connection: Any = None
        self.link: Any = None
        self.durable = bool(driver.endpoint.options.get("durable"))
        self.sections = data_sections(self.durable)  # a plain message's bytes before its body

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self.driver._loop is not None
        return self.driver._loop

    def on_start(self, event: Any) -> None:
        e = self.driver.endpoint
        ssl_domain = None
        if e.tls:
            ssl_domain = SSLDomain(SSLDomain.MODE_CLIENT)
            if "ca" in e.options:
                ssl_domain.set_trusted_ca_db(e.options["ca"])
            if not e.options.get("insecure"):
                ssl_domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        credentials = {"user": e.username, "password": e.password or ""} if e.username else {}
        self.connection = event.container.connect(
            self.driver._url(), ssl_domain=ssl_domain, **self.driver.connect_options(), **credentials
        )

    def on_connection_opened(self, _event: Any) -> None:
        call_in_loop(self.loop, _resolve, self.opened)

    def on_open_link(self, _event: Any) -> None:
        e = self.driver.endpoint
        name = f"maestro-{uuid.uuid4().hex[:8]}"
        if self.role == "sender":
            options: list[Any] = [AtMostOnce()] if self.driver.presettled else []
            self.link = self.driver.container.create_sender(
                self.connection, self.driver.destination, name=name, options=options
            )
        elif self.role == "replies":
            self.reply_link = self.driver.container.create_receiver(
                self.connection, self.driver.reply_address, name=name
            )
            self.reply_link.flow(self.driver._credit())
        else:
            options = [DurableSubscription()] if e.options.get("durable") else []
            self.link = self.driver.container.create_receiver(
                self.connection, self.driver.destination, name=name, options=options
            )
            self.link.flow(self.driver._credit())

    def on_link_opened(self, _event: Any) -> None:
        self.link_up = True
        if self.link_ready is not None:
            call_in_loop(self.loop, _resolve, self.link_ready)

    def on_sendable(self, event: Any) -> None:
        self.on_flush(event)
        if self.reply_outbox:
            self.on_flush_replies(event)

    def on_flush(self, _event: Any) -> None:
        # Cleared before the outbox is read: a message added from now on asks for a flush again.
        self.flush_pending = False
        link = self.link
        sent: list[tuple[int, SendError | None]] = []
        count = 0
        while self.outbox and link is not None and link.credit > 0:
            body, token, correlation = self.outbox.popleft()
            if correlation is None:
                count += self._send_body(link, body, token, sent)
                continue
            message = Message(body=body, durable=self.durable)
            message.reply_to, message.correlation_id = self.driver.reply_address, correlation
            count += self._send(link, message, token, sent)
        self.verdicts.hold_many(sent)
        if count:
            self._wrote()

    def _send(self, link: Any, message: Message, token: int, sent: list[tuple[int, SendError | None]]) -> int:
        message.inferred = True  # a Data section: the bytes themselves, readable over AMQP 0-9-1
        return self._track(link.send(message), token, sent)

    def _send_body(self, link: Any, body: bytes, token: int, sent: list[tuple[int, SendError | None]]) -> int:
        """`_send` of a plain message: what Message.send does, with the message's bytes made here."""
        delivery = link.delivery(link.delivery_tag())
        link.stream(encode_data_message(self.sections, body))
        link.advance()
        if self.driver.presettled:
            delivery.settle()
        return self._track(delivery, token, sent)

    def _track(self, delivery: Delivery, token: int, sent: list[tuple[int, SendError | None]]) -> int:
        if self.driver.presettled:
            sent.append((token, None))
        else:
            # By tag: proton wraps the same delivery in a new Python object for each event.
            self.unsettled[delivery.tag] = token
        return 1

    def _wrote(self) -> None:
        if self.connection is not None and self.connection.transport is not None:
            # Work done in an injected event is not noticed by proton's IO handler until some
            # other engine event comes: tell it the transport has output now.
            self.driver.container.push_event(self.connection.transport, Event.TRANSPORT)

    def on_flush_replies(self, _event: Any) -> None:
        """Each waiting reply over its address's sender link, opened on first use; a reply whose
        link has no credit yet waits for on_sendable."""
        waiting: collections.deque[tuple[str, bytes, int, Any]] = collections.deque()
        sent: list[tuple[int, SendError | None]] = []
        count = 0
        while self.reply_outbox:
            reply_to, body, token, correlation = item = self.reply_outbox.popleft()
            link = self.reply_senders.get(reply_to)
            if link is None:
                options: list[Any] = [AtMostOnce()] if self.driver.presettled else []
                link = self.reply_senders[reply_to] = self.driver.container.create_sender(
                    self.connection, reply_to, name=f"maestro-reply-{uuid.uuid4().hex[:8]}", options=options
                )
            if link.credit <= 0:
                waiting.append(item)
                continue
            count += self._send(link, Message(body=body, correlation_id=correlation), token, sent)
        self.reply_outbox = waiting
        self.verdicts.hold_many(sent)
        if count:
            self._wrote()

    def on_accepted(self, event: Any) -> None:
        self._settle(event.delivery, None)

    def on_rejected(self, event: Any) -> None:
        self._settle(event.delivery, SendError(f"{self.driver.endpoint}: rejected", retry=False, kind="nacked"))

    def on_released(self, event: Any) -> None:
        self._settle(event.delivery, SendError(f"{self.driver.endpoint}: released", retry=False, kind="nacked"))

    def _settle(self, delivery: Delivery, error: SendError | None) -> None:
        token = self.unsettled.pop(delivery.tag, None)
        if token is not None:
            self.verdicts.hold((token, error))

    def on_message(self, event: Any) -> None:
        """A message proton decoded: a request, a reply, or a message `_Incoming` left to it."""
        message = event.message
        body = body_bytes(message.body)
        if self.replies is not None and event.receiver == self.reply_link:
            self.replies.hold((body, time.time_ns()))
        elif self.requests is not None:
            self.requests.hold((body, time.time_ns(), (message.reply_to or "", message.correlation_id)))
        elif self.messages is not None:
            self.messages.hold((body, time.time_ns()))
        self.took(event.receiver)

    def took(self, receiver: Any) -> None:
        """A message was taken from `receiver`: a slow consumer's time over it, then its credit back."""
        if self.processing_delay_s:
            time.sleep(self.processing_delay_s)  # a slow consumer: the credit comes back after it
        # Keep the credit window full: one credit back for each message taken, unless paused.
        if not self.paused:
            receiver.flow(1)

    def on_pause(self, _event: Any) -> None:
        # No more credit is given back: the broker spends what it holds (at most the window),
        # then the backlog builds in the broker.
        self.paused = True

    def on_resume(self, _event: Any) -> None:
        self.paused = False
        if self.link is not None:
            self.link.flow(max(0, self.driver._credit() - self.link.credit))

    def on_connection_error(self, event: Any) -> None:
        self._refused(f"connection refused: {event.connection.remote_condition}")

    def on_session_error(self, event: Any) -> None:
        self._refused(f"session refused: {event.session.remote_condition}")

    def on_link_error(self, event: Any) -> None:
        self._refused(f"link refused: {event.link.remote_condition}")

    def _refused(self, why: str) -> None:
        """The peer said no (unknown address, bad credentials): fail the waits now, not at a timeout."""
        self.error = why
        self.link_up = False
        error = ConnectError(f"{self.driver.endpoint}: {why}", retry=False)
        for future in (self.opened, self.link_ready):
            if future is not None:
                call_in_loop(self.loop, _resolve, future, error)
        self.fail_all(why)

    def on_transport_error(self, event: Any) -> None:
        self.error = f"({event.transport.condition})"
        if not self.opened.done():  # never connected: say why now, not at the timeout
            condition = event.transport.condition
            why = connect_cause(f"{condition.name} {condition.description}" if condition else "")
            error = ConnectError(f"{self.driver.endpoint}: {why} {self.error}", retry=why != "authentication failed")
            call_in_loop(self.loop, _resolve, self.opened, error)
        self.link_up = False
        self.fail_all(f"transport error: {event.transport.condition}")

    def on_disconnected(self, _event: Any) -> None:
        if self.closing:
            self.driver.container.stop()
        self.link_up = False
        self.fail_all("disconnected")

    def on_close(self, _event: Any) -> None:
        # The container stops once the peer answered the close (or the socket went): stopping
        # it here would end the loop before the close was even written.
        self.closing = True
        if self.connection is not None and self.connection.transport is not None:
            self.connection.close()
        else:
            self.driver.container.stop()

    def on_connection_closed(self, _event: Any) -> None:
        if self.closing:
            self.driver.container.stop()

    def on_transport_closed(self, _event: Any) -> None:
        if self.closing:
            self.driver.container.stop()

    def fail_all(self, why: str) -> None:
        pending = list(self.unsettled.values()) + [item[1] for item in self.outbox]
        self.unsettled.clear()
        self.outbox.clear()
        error = SendError(f"{self.driver.endpoint}: {why}", retry=False, kind="unconfirmed")
        self.verdicts.put_many([(token, error) for token in pending])


class _Incoming(IncomingMessageHandler):
    """proton's handler of incoming deliveries, but for a plain receiver's messages: their body
    is read from their bytes (`data_body`), and proton decodes only those it cannot read, into
    the `Message` that `on_message` takes. A proton `Message` per message held a receiver at
    0.84-0.91 of a raw proton loop's rate (bench/HISTORY.md)."""

    def __init__(self, handler: _Handler) -> None:
        super().__init__(auto_accept=True, delegate=weakref.proxy(handler))
        self.handler = weakref.proxy(handler)

    def on_delivery(self, event: Any) -> None:
        handler, delivery = self.handler, event.delivery
        link = delivery.link
        if (
            handler.messages is None
            or handler.requests is not None
            or handler.replies is not None
            or not link.is_receiver
            or delivery.aborted
            or not delivery.readable
            or delivery.partial
            or link.state & ProtonEndpoint.LOCAL_CLOSED
        ):
            super().on_delivery(event)  # proton's own: requests, replies, aborts, a closing link
            return
        encoded = link.recv(delivery.pending)
        link.advance()
        body = data_body(encoded)
        if body is None:
            message = Message()
            message.decode(encoded)
            body = body_bytes(message.body)
        handler.messages.hold((body, time.time_ns()))
        handler.took(link)
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()


def _resolve(future: asyncio.Future[None], error: Exception | None = None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
