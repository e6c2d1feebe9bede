"""NATS through nats-py: `nats://[user:pw@]host[:4222]/subject[?jetstream=true&stream=S&consumer=C]`.

nats-py runs on the event loop itself: no thread, no hop. Its publish is a coroutine that only
adds the message to the connection's buffer (a flusher task writes it), so `publish` puts the
message in an outbox (`outbox.Outbox`) and one writer task hands over each burst.

Core NATS is at most once: a message is settled once handed to the client's buffer, presettled.
Receivers subscribe to the subject, each receiving every message, or share them as a queue
group (`queue=NAME`).

With `jetstream=true` each message is published with a reply subject, and JetStream answers on
it once the stream stored the message (or with an error, or "no responders" when no stream
takes the subject): the acknowledgement. Every message of a connection names the same reply
subject and the acknowledgements are counted, not matched: JetStream answers a connection's
publishes in order, one each. nats-py's `publish_async` was not used: it makes a future, a
random token and a reply subject per message and decodes each answer's JSON. The reply subject
carries a number that changes when the connection drops, so an answer to a message from before
(nats-py sends what sat in its buffer after it reconnects) is not counted twice: what was in
flight at the drop is settled as unconfirmed then.

A JetStream receiver reads through a durable pull consumer (`consumer`, default `maestro`): it
asks for `batch` messages at a time (default 100), asks again whenever half of them have come,
and acknowledges each as it takes it. Its messages reach the receiver as they come, not when the
batch is complete: nats-py's `fetch`, which waits for the rest of a batch until its timeout once
the first message came, held messages up to that timeout (a two-client `maestro demo` read p50
1.8 ms and p99 731 ms with fetch's timeout at 1 s).

The stream is the one named (`stream`), else the one whose subjects take the subject, else one
the driver makes (`maestro-<subject>`, `storage=file|memory`); a consumer that does not exist is
made (durable, explicit acks, from `deliver=new|all|last`, default `new`, filtered to the
subject). A test's receivers share that consumer, so each message is received once.

Request/reply is core NATS's: a request names the requester's reply subject (an inbox of its
own, or `<reply_to>.<random>`), and a replier publishes its answer there. NATS has no
correlation field; the request's number travels in its body, as the worker's header. Repliers
share the requests as the queue group `maestro-repliers`, so each request is answered once.

nats-py reconnects by itself (every 0.5 s here, its default 2 s: `_RECONNECT_WAIT_S` says why);
while it is away `publish` says so (DisconnectedError), and subscriptions come back with the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from protocol.schemes import schemes_of
from protocol.sut_url import DRIVER_OPTIONS
from worker.drivers.base import (
    FIRST_CONNECT_S,
    Burst,
    ConnectError,
    DisconnectedError,
    Driver,
    DriverError,
    Endpoint,
    Handover,
    OnMessages,
    OnRequests,
    SendError,
    connect_cause,
    library_defaults,
    probe,
)
from worker.drivers.outbox import Outbox
from worker.drivers.tally import Tally

__all__ = ["NatsDriver", "subject_matches"]

log = logging.getLogger(__name__)

# Between reconnect tries, where nats-py waits 2 s: the wait is part of what a fault test
# measures (the time back to the old rate), and up to 2 s of it would be nats-py's, not the SUT's.
_RECONNECT_WAIT_S = 0.5
# From the first connect on nats-py reconnects by itself, for as long as it takes (nats-py's own:
# 60 tries): the worker's reconnect budget bounds an outage.
_AFTER_FIRST_CONNECT: dict[str, Any] = {"allow_reconnect": True, "max_reconnect_attempts": -1}
# nats-py's defaults that matter to a test's load or its faults, listed in settings().
_CONNECT_DEFAULTS_SHOWN = (
    "ping_interval",
    "max_outstanding_pings",
    "pending_size",
    "flusher_queue_size",
    "flush_timeout",
    "drain_timeout",
    "no_echo",
    "pedantic",
    "verbose",
    "dont_randomize",
)
_PULL_EXPIRES_S = 5.0  # a pull request that found nothing ends after this, and another is made
_REPLIERS = "maestro-repliers"
# What nats-py raises when the server is away or the request timed out.
_GONE = (OSError, TimeoutError, nats.errors.Error)
# A burst for one subject: (subject, reply subject or "", the connection's number when JetStream
# is to answer it, else _PRESETTLED, bodies). A burst, not a message, is the outbox's item: the
# writer's work per message is then the library's publish alone.
_Burst = tuple[str, str, int, list[bytes]]
_PRESETTLED = -1


class NatsDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = schemes_of("worker.drivers.nats:NatsDriver")
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]] = DRIVER_OPTIONS["worker.drivers.nats:NatsDriver"]
    DESCRIPTION = "NATS (nats-py)"
    LIBRARY = "nats-py"
    # publish_many puts a burst in the outbox in one call, and the writer hands it to nats-py's
    # buffer in one turn: the sender builds its bodies at once, with one sent stamp.
    TAKES_BURSTS = True

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        o = endpoint.options
        self.jetstream: bool = o.get("jetstream", False)
        self._nc: NatsClient | None = None
        self._closing = False
        self._outbox: Outbox[_Burst] = Outbox(self._write)
        # JetStream acknowledgements: the reply subject's base and the connection's number in it.
        self._acks_base = ""
        self._epoch = 0
        self._in_flight = 0  # published on this connection, not yet answered
        self._tally = Tally(self)  # JetStream's answers, settled per turn of the loop
        # Receiving.
        self._on_messages: OnMessages | None = None
        self._on_requests: OnRequests | None = None
        self._processing_delay_s = 0.0
        self._arrived: list[bytes] = []
        self._handing = False
        # A JetStream receiver's pull requests: where they go, where their messages come, and
        # how many messages asked for have not come yet.
        self._next = ""
        self._inbox = ""
        self._batch = int(o.get("batch", 100))
        self._asked = 0
        self._reply_subject = ""  # a requester's, once open_replies made it
        self.stream = str(o.get("stream", ""))

    # --- connecting ------------------------------------------------------------------------------

    def acknowledges(self) -> bool:
        return self.jetstream  # core NATS is at most once

    async def connect(self) -> None:
        await probe(self.endpoint)  # a clear "connection refused" or "unknown host" at once
        e = self.endpoint
        scheme = "tls" if e.tls else "nats"
        self._closing = False
        for subject in (self.destination, e.options.get("reply_to", "x")):
            if not subject or re.search(r"\s", subject):  # nats-py's own check, made once here
                raise ConnectError(f"{e}: {subject!r} is not a NATS subject", retry=False)
        nc = NatsClient()
        try:
            await nc.connect(
                servers=[f"{scheme}://{e.host}:{e.port}"],
                user=e.username,
                password=e.password,
                tls=e.ssl_context(),
                name=f"maestro-{self.destination}-{self.client}",
                error_cb=self._error,
                disconnected_cb=self._disconnected,
                reconnected_cb=self._reconnected,
                **self.connect_options(),
            )
        except _GONE as exc:
            # nats-py leaves the socket of a refused first connect open (a refused password).
            with contextlib.suppress(*_GONE):
                await nc.close()
            why = connect_cause(exc)
            raise ConnectError(
                f"{e}: {why} ({type(exc).__name__}: {exc})", retry=why != "authentication failed"
            ) from exc
        nc.options.update(_AFTER_FIRST_CONNECT)
        self._nc = nc
        if self.jetstream:
            await self._ensure_stream()

    def connect_options(self) -> dict[str, Any]:
        """What `connect` hands nats-py besides the server, the credentials, the name and the
        callbacks: the first connect's (`_AFTER_FIRST_CONNECT` changes two after it)."""
        return {
            # Each client tries its first connection for FIRST_CONNECT_S (nats-py's own: 2 s).
            "connect_timeout": int(FIRST_CONNECT_S),
            # The first connect is tried once: a refusal is named now, not retried for ever.
            "allow_reconnect": False,
            "reconnect_time_wait": _RECONNECT_WAIT_S,
            # The subjects are checked once, above: nats-py's check of each publish's took 0.45
            # µs of its publish's 5.7 under cProfile (bench/HISTORY.md).
            "skip_subject_validation": True,
        }

    def library_settings(self, sending: bool) -> dict[str, object]:
        """nats-py's connect arguments in effect after the first connect (the driver's, then
        nats-py's defaults, read from its signature), a subscription's pending limits, and
        JetStream's publish acknowledgement or pull consumer."""
        given = self.connect_options() | _AFTER_FIRST_CONNECT
        connect = library_defaults(NatsClient.connect, *_CONNECT_DEFAULTS_SHOWN) | given
        out = {f"nats-py {name}": value for name, value in connect.items()}
        out["nats-py allow_reconnect"] = "false for the first connect, true after it"
        if not sending:
            pending = library_defaults(NatsClient.subscribe, "pending_msgs_limit", "pending_bytes_limit")
            out |= {f"nats-py subscribe {name}": value for name, value in pending.items()}
        if not self.jetstream:
            return out
        if sending:
            out["jetstream publish"] = "with a reply subject: the stream's acknowledgement of each message"
        else:
            out["jetstream pull batch"] = self._batch
            out["jetstream pull expires (s)"] = _PULL_EXPIRES_S
            out["jetstream pull again at"] = "half the batch come"
            out["jetstream consumer made"] = (
                f"durable, ack_policy {AckPolicy.EXPLICIT.value},"
                f" deliver_policy {self.endpoint.options.get('deliver', 'new')},"
                " ack_wait and max_ack_pending the server's"
            )
        return out

    @property
    def nc(self) -> NatsClient:
        assert self._nc is not None, "connect() first"
        return self._nc

    async def _error(self, error: Exception) -> None:
        log.info("%s: %s: %s", self.endpoint, type(error).__name__, error)

    async def _disconnected(self) -> None:
        log.info("%s: disconnected", self.endpoint)
        if self._in_flight:  # their answers went with the connection
            self._tally.refused("disconnected before acknowledged", "unconfirmed", self._in_flight)
            self._in_flight = 0
        self._epoch += 1

    async def _reconnected(self) -> None:
        log.info("%s: reconnected", self.endpoint)
        self.reconnects_ns.append(time.time_ns())
        if self._next:  # the pull requests went with the connection: ask again
            self._asked = 0
            await self._pull_more()

    async def _api(self, step: Any, what: str) -> Any:
        """A JetStream API call, its errors translated."""
        try:
            return await step
        except nats.js.errors.ServiceUnavailableError as exc:
            raise ConnectError(f"{self.endpoint}: JetStream is not enabled on the server", retry=False) from exc
        except nats.js.errors.APIError as exc:
            raise ConnectError(f"{self.endpoint}: {what}: {exc}", retry=False) from exc
        except _GONE as exc:
            raise ConnectError(f"{self.endpoint}: {what}: {connect_cause(exc)}", retry=True) from exc

    async def _ensure_stream(self) -> None:
        """The stream named, else the one whose subjects take the subject, else one made."""
        js = self.nc.jetstream()
        if self.stream:
            try:
                info = await js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                pass
            else:
                # A stream that does not take the subject would store nothing of the test, or
                # store it where no receiver reads: the run would blame the broker for it.
                subjects = info.config.subjects or []
                if not any(subject_matches(f, self.destination) for f in subjects):
                    why = (
                        f"the stream {self.stream} takes {', '.join(subjects) or 'no subject'}, not {self.destination}"
                    )
                    raise ConnectError(f"{self.endpoint}: {why}", retry=False)
                return
        else:
            try:
                self.stream = await js.find_stream_name_by_subject(self.destination)
                return
            except nats.js.errors.NotFoundError:
                self.stream = _stream_name(self.destination)
            except _GONE as exc:
                raise ConnectError(f"{self.endpoint}: {connect_cause(exc)}", retry=True) from exc
        storage = StorageType(self.endpoint.options.get("storage", "file"))
        config = StreamConfig(name=self.stream, subjects=[self.destination], storage=storage)
        try:
            await js.add_stream(config)
            log.info("%s: made the stream %s (%s storage)", self.endpoint, self.stream, storage.value)
        except nats.js.errors.BadRequestError as refused:
            # Another client made it meanwhile; else the server's own reason (a subject that
            # overlaps another stream's), not "not found".
            try:
                await js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                why = f"the stream {self.stream} could not be made: {refused.description or refused}"
                raise ConnectError(f"{self.endpoint}: {why}", retry=False) from refused

    # --- sending ---------------------------------------------------------------------------------

    async def start_sending(self) -> None:
        if self.jetstream and not self._acks_base:
            self._acks_base = self.nc.new_inbox()
            await self._subscribe(f"{self._acks_base}.*", self._answered)

    async def _subscribe(self, subject: str, cb: Callable[[Msg], Any], queue: str = "") -> None:
        """Subscribed once the server has it (a PING answered after the SUB): a message
        published before that, from another connection, would go to nobody."""
        try:
            await self.nc.subscribe(subject, queue=queue, cb=cb)
            await self.nc.flush(timeout=int(FIRST_CONNECT_S))
        except _GONE as exc:
            raise ConnectError(f"{self.endpoint}: subscribing to {subject}: {connect_cause(exc)}", retry=True) from exc

    def publish(self, body: bytes, token: int) -> None:
        done = self.publish_many((body,), token)
        if done.down is not None:
            raise done.down

    def publish_many(self, bodies: Iterable[bytes], first_token: int) -> Handover:
        nc = self._nc
        if nc is None or not nc.is_connected:
            next(iter(bodies), None)  # the one that met the closed connection, as publish() would
            return Handover(down=DisconnectedError(f"{self.endpoint}: not connected", retry=True))
        burst = list(bodies)
        if self.jetstream:
            self._in_flight += len(burst)
            self._outbox.put((self.destination, f"{self._acks_base}.{self._epoch}", self._epoch, burst))
        else:
            self._outbox.put((self.destination, "", _PRESETTLED, burst))
        return Handover(handed=len(burst))

    def _put(self, subject: str, body: bytes, reply: str) -> None:
        """A request or a reply: core NATS, presettled."""
        nc = self._nc
        if nc is None or not nc.is_connected:
            raise DisconnectedError(f"{self.endpoint}: not connected", retry=True)
        self._outbox.put((subject, reply, _PRESETTLED, [body]))

    async def _write(self, bursts: list[_Burst]) -> None:
        """Bursts to nats-py's buffer; core NATS messages are settled there (at most once). A
        JetStream burst of a connection that dropped since was settled then, and is not sent."""
        publish = self.nc.publish
        for subject, reply, epoch, bodies in bursts:
            if epoch not in (_PRESETTLED, self._epoch):
                continue
            sent = 0
            try:
                for body in bodies:
                    await publish(subject, body, reply=reply)
                    sent += 1
            except _GONE as exc:  # the rest never reached the buffer
                unsent = len(bodies) - sent
                if epoch != _PRESETTLED:
                    self._in_flight -= unsent
                why = f"{self.endpoint}: not sent: {type(exc).__name__}: {exc}"
                self.on_settled(unsent, SendError(why, retry=False, kind="unconfirmed"))
            if epoch == _PRESETTLED and sent:
                self.on_settled(sent, None)

    async def _answered(self, msg: Msg) -> None:
        """JetStream's answer to a publish: counted, settled with the others of this turn."""
        if not msg.subject.endswith(f".{self._epoch}") or not self._in_flight:
            return  # an answer to a message from before the connection dropped: settled then
        self._in_flight -= 1
        if msg.headers and msg.headers.get("Status") == "503":
            self._tally.refused("no stream takes the subject (no responders)", "nacked")
        elif b'"error"' in msg.data:
            self._tally.refused(_api_error(msg.data), "nacked")
        else:
            self._tally.taken()

    # --- receiving -------------------------------------------------------------------------------

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        self._on_messages = on_messages
        self._processing_delay_s = processing_delay_s
        if self.jetstream:
            await self._pull()
        else:
            await self._subscribe(self.destination, self._take, self.endpoint.options.get("queue", ""))

    async def _take(self, msg: Msg) -> None:
        """nats-py's callback, once per message: kept until the hand-over (a slow consumer's
        handed over alone, then its time taken: nats-py awaits this before the next)."""
        if self._processing_delay_s:
            assert self._on_messages is not None
            self._on_messages([(msg.data, time.time_ns())])
            await asyncio.sleep(self._processing_delay_s)
            return
        self._take_data(msg.data)

    def _take_data(self, data: bytes) -> None:
        self._arrived.append(data)
        if not self._handing:
            self._handing = True
            asyncio.get_running_loop().call_soon(self._hand_over)

    def _hand_over(self) -> None:
        """What arrived since the last hand-over, stamped once it is all in hand."""
        self._handing = False
        arrived, self._arrived = self._arrived, []
        if arrived and self._on_messages is not None:
            self._on_messages(Burst(arrived, time.time_ns()))

    async def _pull(self) -> None:
        js = self.nc.jetstream()
        name = self.endpoint.options.get("consumer", "maestro")
        try:
            await js.consumer_info(self.stream, name)
        except nats.js.errors.NotFoundError:
            deliver = DeliverPolicy(self.endpoint.options.get("deliver", "new"))
            config = ConsumerConfig(
                durable_name=name,
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=deliver,
                filter_subject=self.destination,
            )
            try:
                await js.add_consumer(self.stream, config)
                log.info("%s: made the consumer %s of %s", self.endpoint, name, self.stream)
            except nats.js.errors.BadRequestError:  # another receiver made it meanwhile
                pass
        except _GONE as exc:
            raise ConnectError(f"{self.endpoint}: the consumer {name}: {connect_cause(exc)}", retry=True) from exc
        consumer = await self._api(js.consumer_info(self.stream, name), f"the consumer {name}")
        # A durable consumer left by another test filters its subject: reading it, this test's
        # receivers would get nothing, and the broker would be blamed for what it kept.
        filters = [f for f in (consumer.config.filter_subject, *(consumer.config.filter_subjects or [])) if f]
        if filters and not any(subject_matches(f, self.destination) for f in filters):
            why = f"the consumer {name} of {self.stream} filters {', '.join(filters)}, not {self.destination}"
            raise ConnectError(f"{self.endpoint}: {why}: name another with consumer=NAME", retry=False)
        self._next = f"{api.DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{self.stream}.{name}"
        self._inbox = self.nc.new_inbox()
        await self._subscribe(self._inbox, self._pulled)
        await self._pull_more()

    async def _pull_more(self) -> None:
        """Another pull request: `batch` messages, delivered to the inbox as they come, for at
        most _PULL_EXPIRES_S. One is asked for whenever half of what was asked has come, so the
        next is at the server before the last one runs dry."""
        request = {"batch": self._batch, "expires": int(_PULL_EXPIRES_S * 1e9)}
        try:
            await self.nc.publish(self._next, json.dumps(request).encode(), reply=self._inbox)
        except _GONE as exc:  # asked again once the connection is back (_reconnected)
            log.info("%s: pull request: %s: %s", self.endpoint, type(exc).__name__, exc)
            return
        self._asked += self._batch

    async def _pulled(self, msg: Msg) -> None:
        """What a pull request brought, once per message: kept until the hand-over, and
        acknowledged; or the request's end (expired, or the consumer gone), with how many of
        what it asked for it did not bring."""
        status = msg.headers.get("Status") if msg.headers else None
        if status is None:
            if self._processing_delay_s:
                assert self._on_messages is not None
                self._on_messages([(msg.data, time.time_ns())])
                await asyncio.sleep(self._processing_delay_s)
            else:
                self._take_data(msg.data)
            await _ack(msg)
            self._asked -= 1
        elif status != "100":  # not a heartbeat: 404, 408, 409 end a request
            left = msg.headers.get("Nats-Pending-Messages") if msg.headers else None
            self._asked -= int(left) if left and left.isdigit() else self._batch
        if self._asked <= self._batch // 2 and not self._closing:
            await self._pull_more()

    # --- request/reply (core NATS) ---------------------------------------------------------------

    def _core_only(self) -> None:
        if self.jetstream:
            raise DriverError(f"{self.endpoint}: request/reply is core NATS's: drop jetstream=true", retry=False)

    async def open_replies(self, on_replies: OnMessages) -> None:
        self._core_only()
        base = self.endpoint.options.get("reply_to", "")
        self._reply_subject = f"{base}.{self.nc.new_inbox().rsplit('.', 1)[-1]}" if base else self.nc.new_inbox()
        self._on_messages = on_replies
        await self._subscribe(self._reply_subject, self._take)

    def request(self, body: bytes, token: int, correlation: str) -> None:
        self._core_only()
        assert self._reply_subject, "open_replies() first"
        self._put(self.destination, body, self._reply_subject)

    async def serve(self, on_requests: OnRequests) -> None:
        self._core_only()
        self._on_requests = on_requests
        await self._subscribe(self.destination, self._request, self.endpoint.options.get("queue", _REPLIERS))

    async def _request(self, msg: Msg) -> None:
        assert self._on_requests is not None
        self._on_requests([(msg.data, time.time_ns(), msg.reply)])

    def reply(self, address: Any, body: bytes, token: int) -> None:
        if not address:
            self.on_settled(1, SendError(f"{self.endpoint}: a request without a reply subject", retry=False))
            return
        self._put(str(address), body, "")

    # --- closing ---------------------------------------------------------------------------------

    async def close(self) -> None:
        self._closing = True
        closed = SendError(f"{self.endpoint}: closed first", retry=False, kind="unconfirmed")
        for _, _, epoch, bodies in await self._outbox.close():
            if epoch in (_PRESETTLED, self._epoch):  # else settled when its connection dropped
                self.on_settled(len(bodies), closed)
        self._in_flight = 0
        self._tally.settle()
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()  # writes what its buffer still holds first
            except _GONE as exc:
                log.warning("%s: did not close cleanly: %s", self.endpoint, exc)


async def _ack(msg: Msg) -> None:
    try:
        await msg.ack()
    except _GONE as exc:  # redelivered after the consumer's ack wait: counted as a duplicate then
        log.info("ack failed: %s: %s", type(exc).__name__, exc)


def _stream_name(subject: str) -> str:
    """The name of a stream the driver makes for `subject`: a stream name has no `.`, `*`, `>`."""
    return "maestro-" + re.sub(r"[^A-Za-z0-9_-]", "_", subject.replace("*", "any").replace(">", "all"))


def _api_error(answer: bytes) -> str:
    try:
        error = json.loads(answer)["error"]
        return f"JetStream refused it: {error.get('description', error)} (code {error.get('err_code', '?')})"
    except (ValueError, KeyError, TypeError, AttributeError):
        return "JetStream refused it"


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether a NATS subject filter takes `subject`: `*` is one token, `>` the rest (one or more)."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or (token != "*" and token != tokens[i]):
            return False
    return len(tokens) == len(wanted)
