"""MQTT through paho-mqtt: `mqtt://[user:pw@]host[:1883]/topic?qos=1&clean_session=true`.

paho runs on the event loop, through its external-loop interface (`loop_read` when the socket
is readable, `loop_write` when paho has something to write and the socket takes it, `loop_misc`
once a second for the keepalive), not in a network thread of its own. A second Python thread
took the GIL for every packet: the loop waited up to a switch interval (5 ms) for it, which was
the schedule's lag at high rates, and each publish wrote a byte to wake it. On the loop, a raw
paho send measured 1.2-1.4 times its threaded rate (bench/HISTORY.md), and what a read brings in
is handed to the receiver at once, with no thread hop. Only the blocking parts, the TCP (and
TLS) connect of `connect` and `reconnect`, run in a thread.

QoS 1 and 2 messages are settled when the broker acknowledged them (PUBACK / PUBCOMP), the
acknowledgements of one read at once; QoS 0 ones once paho has written them to the socket, read
from their `MQTTMessageInfo`s after each write (paho's `on_publish` would build a `ReasonCode` and
a `Properties` for each QoS 0 write: 9.5 µs). `max_inflight` (paho's own bound for QoS 1/2;
1,000 unless the URL sets it, where paho keeps 20: measured in `_make_client`) is also the
worker's window, for QoS 0 too: a QoS 0 message handed to paho waits in its memory until written,
and an unbounded sender handed them over faster than they were written (335,071 waiting and 768 MB
of RSS after 8 s), its rate counting messages that had not left the process. A burst's QoS 0
packets go to a plain socket in one `send()` (`mqtt_joined_write`), where paho would make a system
call of each.

`?version=5` speaks MQTT 5, which request/reply needs: a request carries a response topic and
correlation data, and the replier publishes its answer to that topic with the same data. Each
requesting client subscribes to a reply topic of its own, `<reply_to>/<random>` (default base
`maestro/replies`). Repliers subscribe to the requests as `$share/maestro-repliers/<topic>`: they
share them as a queue's consumers do, so each request is answered once, not once per replier.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from protocol.bus import no_delay
from protocol.concurrency import wait_any, wait_event
from protocol.schemes import schemes_of
from protocol.sut_url import DRIVER_OPTIONS
from worker.drivers.base import (
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
from worker.drivers.mqtt_joined_write import joins_writes, write_joined

__all__ = ["MqttDriver"]

_CONNECT_TIMEOUT_S = 15.0
_MISC_S = 1.0  # loop_misc: keepalive pings and their timeout, as paho's own thread does each second
# The wait before a reconnect doubles from the first to the most. paho's thread waited up to
# 30 s; here the most is 2 s, because the wait is part of what a fault test measures (the time
# back to the old rate), and 30 s was also the default stall bound: a SUT back a moment after a
# try failed the test as stalled (CI: nothing sent for 30 s after a 3 s broker stop).
_RECONNECT_FIRST_S, _RECONNECT_MOST_S = 0.5, 2.0
_CLOSE_S = 2.0  # how long close() lets the DISCONNECT go out before the socket is dropped
_CLEAN_STARTS = {mqtt.MQTT_CLEAN_START_FIRST_ONLY: "first connect only", True: "true", False: "false"}


class MqttDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = schemes_of("worker.drivers.mqtt:MqttDriver")
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]] = DRIVER_OPTIONS["worker.drivers.mqtt:MqttDriver"]
    DESCRIPTION = "MQTT (paho-mqtt)"
    LIBRARY = "paho-mqtt"

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        self._was_connected = False
        # QoS 1 unless asked, where paho's publish defaults to 0: the broker then acknowledges
        # each message, so a sender's accepted count is the broker's word (QoS 0 gives none).
        self.qos: int = endpoint.options.get("qos", 1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._connected: asyncio.Event | None = None
        self._closing = False
        self._closed = asyncio.Event()  # set with _closing: ends a reconnect's wait
        self._misc: asyncio.TimerHandle | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._reconnect_delay_s = _RECONNECT_FIRST_S
        self._dropped = asyncio.Event()  # set by every disconnect: ends a reconnect's try
        self._socket_closed = asyncio.Event()
        self._pending: set[int] = set()  # QoS 1/2: paho's message ids not yet acknowledged
        # QoS 0: what paho was handed and has not yet written, in the order it writes.
        self._unwritten: collections.deque[mqtt.MQTTMessageInfo] = collections.deque()
        self._joins = False  # QoS 0 on a plain socket: a burst's packets go in one send()
        # While a burst is handed to paho, its wish to write waits for the burst's end, when the
        # burst is written at once (publish_many); set: paho asked meanwhile.
        self._bursting = False
        self._burst_wants_write = False
        # What one read brought in, handed over when it ends: acknowledgements, messages,
        # replies and requests; `_packets` counts them, to tell a read that found more.
        self._acked: list[int] = []
        self._arrived: list[tuple[bytes, int]] = []
        self._replies_in: list[tuple[bytes, int]] = []
        self._requests_in: list[tuple[bytes, int, Any]] = []
        self._packets = 0
        self._on_messages: OnMessages | None = None
        self._on_replies: OnMessages | None = None
        self._on_requests: OnRequests | None = None
        self._receiving = False
        self._processing_delay_s = 0.0
        self._connect_error = "no answer"
        self._refused = asyncio.Event()  # the broker answered CONNECT with a refusal
        self.v5 = endpoint.options.get("version", "3.1.1") == "5"
        self._reply_topic = ""  # a requester's, once open_replies made it
        self._subscription = self.destination  # what a receiver subscribes to
        self._client = self._make_client()

    def _make_client(self) -> mqtt.Client:
        e = self.endpoint
        client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=f"maestro-{uuid.uuid4().hex[:16]}",
            # MQTT 5 has clean_start, given at connect, instead of a clean session.
            clean_session=None if self.v5 else e.options.get("clean_session", True),
            protocol=mqtt.MQTTv5 if self.v5 else mqtt.MQTTv311,
        )
        # paho's own max_inflight_messages is 20; the driver's window (1,000) is its bound
        # instead. One QoS 1 client through a proxy delaying 5 ms each way confirmed 743-1,031
        # msg/s with 20 and 4,798-7,646 with 1,000; on loopback both were CPU-bound, 8,316-16,274
        # (bench/driver_defaults.py, 3 rounds of 4 s, 2026-11-28).
        client.max_inflight_messages = self.window()
        if "keepalive_s" in e.options:  # else paho's own, 60 s
            client.keepalive = e.options["keepalive_s"]
        if e.username:
            client.username_pw_set(e.username, e.password)
        if e.tls:
            client.tls_set_context(e.ssl_context() or ssl.create_default_context())
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        if self.qos:  # QoS 0: _settle_written
            client.on_publish = self._on_publish
        client.on_message = self._on_message
        client.on_socket_open = self._on_socket_open
        client.on_socket_close = self._on_socket_close
        client.on_socket_register_write = self._on_register_write
        client.on_socket_unregister_write = self._on_unregister_write
        return client

    def window(self) -> int:
        return int(self.endpoint.options.get("max_inflight", self.DEFAULT_WINDOW))

    def library_settings(self, sending: bool) -> dict[str, object]:
        """Read back from the paho client this driver made (its connect arguments are its
        properties, or paho's defaults), and what the driver does in paho's stead."""
        client = self._client
        session = (
            {"paho clean_start": _CLEAN_STARTS.get(self._clean_start(), self._clean_start())}
            if self.v5
            else {"paho clean_session": client._clean_session}
        )
        return {
            "paho protocol": client.protocol.name,
            "paho transport": client.transport,
            **session,
            "paho keepalive": client.keepalive,
            "paho connect_timeout": client.connect_timeout,
            "paho qos": self.qos,
            "paho max_inflight_messages": client.max_inflight_messages,
            "paho max_queued_messages": client.max_queued_messages,
            # paho's reconnect_delay_set (1 s to 120 s) is not used: the driver reconnects.
            "reconnect delay_s (the driver's)": f"{_RECONNECT_FIRST_S:g} doubling to {_RECONNECT_MOST_S:g}",
            "socket TCP_NODELAY (the driver's)": True,
        }

    def acknowledges(self) -> bool:
        return self.qos >= 1

    async def connect(self) -> None:
        await probe(self.endpoint)  # a clear "connection refused" before paho's own try
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._closing = False
        self._connected = asyncio.Event()
        self._refused.clear()  # an earlier attempt's refusal
        self._closed.clear()
        try:
            await asyncio.to_thread(self._open)
        except (OSError, ValueError) as exc:
            raise ConnectError(f"{self.endpoint}: no connection: {connect_cause(exc)}", retry=True) from exc
        await wait_any((self._connected, self._refused), _CONNECT_TIMEOUT_S)
        if not self._connected.is_set():
            await self._shut()
            why = connect_cause(self._connect_error)
            raise ConnectError(f"{self.endpoint}: no connection: {why}", retry=why != "authentication failed")
        if self._misc is None:
            self._misc = self._loop.call_later(_MISC_S, self._keep_alive)

    def _open(self) -> None:
        """In a thread: the blocking TCP (and TLS) connect and the CONNECT packet; CONNACK is
        read on the loop."""
        keepalive = self._client.keepalive
        if self.v5:
            start = self._clean_start()
            self._client.connect(self.endpoint.host, self.endpoint.port, keepalive, clean_start=start)
        else:
            self._client.connect(self.endpoint.host, self.endpoint.port, keepalive)

    def _clean_start(self) -> Any:
        """MQTT 5's clean_start: paho's default (a clean start on the first connect only), or
        never with clean_session=false."""
        if not self.endpoint.options.get("clean_session", True):
            return False
        return library_defaults(mqtt.Client.connect, "clean_start")["clean_start"]

    def publish(self, body: bytes, token: int) -> None:
        self._publish(self.destination, body, token)

    def publish_many(self, bodies: Iterable[bytes], first_token: int) -> Handover:
        """Each message to paho, then the burst written at once, on the loop's turn that made it.
        Left to paho's wish to write, each burst cost a writer registered on the loop's selector,
        another turn of the loop to learn that the socket takes it, and the writer taken off again:
        a QoS 0 sender at 108,000 msg/s (4,000 bursts a second) took 95-98 % of its core, 92-93 %
        this way, and sent unbounded 121,000-141,000 msg/s against 158,000-176,000 (bench/HISTORY.md).
        A socket that does not take it all gets the writer then."""
        self._bursting = True
        try:
            done = super().publish_many(bodies, first_token)
        finally:
            self._bursting = False
        if self._burst_wants_write:
            self._burst_wants_write = False
            sock = self._client.socket()
            self._writable()
            if self._client.want_write() and sock is not None and sock is self._client.socket():
                self._want_write(sock)
        return done

    def _publish(self, topic: str, body: bytes, token: int, properties: Properties | None = None) -> None:
        if self._connected is None or not self._connected.is_set():
            raise DisconnectedError(f"{self.endpoint}: not connected", retry=True)
        info = self._client.publish(topic, body, qos=self.qos, properties=properties)
        if self.qos == 0 and info.rc == mqtt.MQTT_ERR_NO_CONN:
            raise DisconnectedError(f"{self.endpoint}: not connected", retry=True)
        # QoS 1/2 when paho has just seen the connection drop: it keeps the message and sends it
        # after reconnecting, so it is handed over; trying it again would duplicate it. (A QoS 0
        # one paho drops when it reconnects: `_lost` settles it as unconfirmed.)
        if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
            raise SendError(f"{self.endpoint}: {mqtt.error_string(info.rc)}", retry=False)
        if self.qos == 0:
            self._unwritten.append(info)  # settled after the write that sends it (_writable)
            return
        self._pending.add(info.mid)  # its acknowledgement comes in a later read (_readable)

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        self._processing_delay_s = processing_delay_s
        self._on_messages = on_messages
        self._receiving = True
        self._client.subscribe(self._subscription, qos=self.qos)

    # No pause: unsubscribing would drop what is published meanwhile instead of keeping a
    # backlog (the base class refuses, by name).

    # --- request/reply (MQTT 5) ----------------------------------------------------------------

    def _need_v5(self) -> None:
        if not self.v5:
            raise DriverError(
                f"{self.endpoint}: request/reply needs MQTT 5 (?version=5): a response topic and"
                " correlation data are MQTT 5 properties",
                retry=False,
            )

    async def open_replies(self, on_replies: OnMessages) -> None:
        self._need_v5()
        base = self.endpoint.options.get("reply_to", "maestro/replies")
        self._reply_topic = f"{base}/{uuid.uuid4().hex[:12]}"
        self._on_replies = on_replies
        self._client.subscribe(self._reply_topic, qos=self.qos)

    def request(self, body: bytes, token: int, correlation: str) -> None:
        self._need_v5()
        assert self._reply_topic, "open_replies() first"
        properties = Properties(PacketTypes.PUBLISH)
        properties.ResponseTopic = self._reply_topic
        properties.CorrelationData = correlation.encode()
        self._publish(self.destination, body, token, properties)

    async def serve(self, on_requests: OnRequests) -> None:
        self._need_v5()
        self._on_requests = on_requests
        self._receiving = True
        self._subscription = f"$share/maestro-repliers/{self.destination}"
        self._client.subscribe(self._subscription, qos=self.qos)

    def reply(self, address: Any, body: bytes, token: int) -> None:
        topic, correlation = address
        if not topic:
            self.on_settled(1, SendError(f"{self.endpoint}: a request without a response topic", retry=False))
            return
        properties = Properties(PacketTypes.PUBLISH)
        if correlation is not None:
            properties.CorrelationData = correlation
        self._publish(topic, body, token, properties)  # settled once written or acknowledged

    async def close(self) -> None:
        self._fail_pending(f"{self.endpoint}: closed before confirmed")
        await self._shut()
        if self._misc is not None:
            self._misc.cancel()
            self._misc = None

    async def _shut(self) -> None:
        """No reconnecting from here on; the DISCONNECT written, and the socket closed once it
        is (paho closes it after writing that packet), or after _CLOSE_S."""
        self._closing = True
        self._closed.set()
        if self._reconnecting is not None:
            # Awaited, not cancelled: a reconnect already in its thread goes on regardless, and
            # what it opens must be shut here, not left behind.
            await asyncio.wait({self._reconnecting}, timeout=_CONNECT_TIMEOUT_S)
            self._reconnecting = None
        if self._client.socket() is None:
            return
        self._socket_closed.clear()
        self._client.disconnect()
        self._writable()
        if self._client.socket() is not None and not await wait_event(self._socket_closed, _CLOSE_S):
            sock = self._client.socket()
            if isinstance(sock, socket.socket):
                self._on_socket_close(self._client, None, sock)
                sock.close()

    # --- paho on the loop ---------------------------------------------------------------------

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """`fn(*args)` now when on the loop's thread, else soon on the loop: paho calls the
        socket callbacks from the thread of `connect`/`reconnect` too."""
        assert self._loop is not None
        if threading.get_ident() == self._loop_thread:
            fn(*args)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    def _on_socket_open(self, _c: mqtt.Client, _u: Any, sock: Any) -> None:
        self._on_loop(self._watch, sock)

    def _watch(self, sock: Any) -> None:
        assert self._loop is not None
        if sock.fileno() >= 0:  # not closed again meanwhile
            self._loop.add_reader(sock, self._readable)
            self._joins = self.qos == 0 and joins_writes(self._client)

    def _on_socket_close(self, _c: mqtt.Client, _u: Any, sock: Any) -> None:
        # The descriptor, taken now: paho closes the socket when this returns.
        self._on_loop(self._unwatch, sock.fileno())

    def _unwatch(self, fd: int) -> None:
        assert self._loop is not None
        if fd >= 0:
            self._loop.remove_reader(fd)
            self._loop.remove_writer(fd)
        self._socket_closed.set()

    def _on_register_write(self, _c: mqtt.Client, _u: Any, sock: Any) -> None:
        self._on_loop(self._want_write, sock)

    def _want_write(self, sock: Any) -> None:
        assert self._loop is not None
        if self._bursting:  # written when the burst ends (publish_many)
            self._burst_wants_write = True
        elif sock.fileno() >= 0:
            self._loop.add_writer(sock, self._writable)

    def _on_unregister_write(self, _c: mqtt.Client, _u: Any, sock: Any) -> None:
        fd = sock.fileno()
        if fd >= 0 and self._loop is not None:
            self._on_loop(self._loop.remove_writer, fd)

    def _writable(self) -> None:
        if self._joins and len(self._unwritten) > 1:
            write_joined(self._client)
        self._client.loop_write()
        if self._unwritten:
            self._settle_written()

    def _readable(self) -> None:
        """Every packet the socket holds, then what they brought handed over at once. A read
        that handled no acknowledgement or message (a PINGRESP, a SUBACK, a partial packet)
        ends it; TLS may hold decrypted bytes the socket no longer shows, so those are read too."""
        client = self._client
        if self._processing_delay_s:
            self._read_slowly()
            return
        while True:
            before = self._packets
            if client.loop_read() != mqtt.MQTT_ERR_SUCCESS:
                break
            if self._packets == before:
                sock = client.socket()
                if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                    break
        self._hand_over()

    def _read_slowly(self) -> None:
        """A slow consumer: one packet, then no reading for the time it takes, so the broker's
        next message and the PUBACK wait as they would for an application that slow."""
        before = self._packets
        self._client.loop_read()
        self._hand_over()
        sock = self._client.socket()
        if self._packets > before and sock is not None and self._loop is not None:
            self._loop.remove_reader(sock)
            self._loop.call_later(self._processing_delay_s, self._watch_again, sock)

    def _watch_again(self, sock: Any) -> None:
        if sock is self._client.socket():  # not a connection since closed
            self._watch(sock)

    def _hand_over(self) -> None:
        if self._acked:
            mids, self._acked = self._acked, []
            self._confirmed(mids)
        if self._arrived:
            arrived, self._arrived = self._arrived, []
            if self._on_messages is not None:
                self._on_messages(arrived)
        if self._replies_in:
            replies, self._replies_in = self._replies_in, []
            if self._on_replies is not None:
                self._on_replies(replies)
        if self._requests_in:
            requests, self._requests_in = self._requests_in, []
            if self._on_requests is not None:
                self._on_requests(requests)

    def _keep_alive(self) -> None:
        assert self._loop is not None
        if self._client.socket() is not None:
            self._client.loop_misc()
        self._misc = self._loop.call_later(_MISC_S, self._keep_alive)

    async def _reconnect(self) -> None:
        """Tries with paho's own backoff: the wait doubles from one try to the next, also when
        a try connects and the connection is dropped before CONNACK (a proxy whose upstream is
        down), and starts again from the first only once a CONNACK accepts. A try ends with its
        CONNACK, its drop, or neither within the connect timeout: a drop read on the loop
        before the try's thread returned found this task still running, and no try followed
        (CI: a sender silent for 30 s after a broker stop behind the fault proxy)."""
        assert self._connected is not None
        while True:
            delay = self._reconnect_delay_s
            self._reconnect_delay_s = min(delay * 2, _RECONNECT_MOST_S)
            await wait_event(self._closed, delay)
            if self._closing:
                return
            self._dropped.clear()
            try:
                await asyncio.to_thread(self._client.reconnect)
            except (OSError, ValueError):
                continue
            await wait_any((self._connected, self._dropped, self._closed), _CONNECT_TIMEOUT_S)
            if self._connected.is_set() or self._closing:
                return

    # --- paho's callbacks, on the loop ------------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            self._connect_error = str(reason)
            if not self._was_connected:
                self._refused.set()
            return
        # paho leaves Nagle on: a message would wait for the ACK of the one before, which a slow
        # path (a fault proxy's 20 ms) turns into up to 20 ms more latency.
        no_delay(client)
        self._reconnect_delay_s = _RECONNECT_FIRST_S
        if self._connected is not None and self._was_connected:
            self.reconnects_ns.append(time.time_ns())
        self._was_connected = True
        if self._receiving:  # a reconnect: subscriptions died with the session
            client.subscribe(self._subscription, qos=self.qos)
        if self._reply_topic:
            client.subscribe(self._reply_topic, qos=self.qos)
        assert self._connected is not None
        self._connected.set()

    def _on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, _reason: Any, _p: Any) -> None:
        if self._connected is None:
            return
        self._dropped.set()  # a reconnect's try, if one is waiting for its CONNACK, failed
        self._lost()
        if not self._closing and (self._reconnecting is None or self._reconnecting.done()):
            self._reconnecting = asyncio.ensure_future(self._reconnect())

    def _lost(self) -> None:
        assert self._connected is not None
        self._connected.clear()
        # Messages in flight when the connection dropped: their fate is unknown (QoS 0 ones not yet
        # written paho drops when it reconnects).
        self._fail_pending(f"{self.endpoint}: disconnected before confirmed")

    def _fail_pending(self, why: str) -> None:
        self._hand_over()  # acknowledgements read before the drop are the broker's word
        self._settle_written()
        unsettled = len(self._pending) + len(self._unwritten)
        self._pending = set()
        self._unwritten.clear()
        if unsettled:
            self.on_settled(unsettled, SendError(why, retry=False, kind="unconfirmed"))

    def _settle_written(self) -> None:
        """QoS 0: settle the messages paho has written, oldest first."""
        unwritten, written = self._unwritten, 0
        while unwritten and unwritten[0].is_published():
            unwritten.popleft()
            written += 1
        if written:
            self.on_settled(written, None)

    def _on_publish(self, _c: mqtt.Client, _u: Any, mid: int, _reason: Any, _p: Any) -> None:
        self._acked.append(mid)  # acknowledged (QoS 1: PUBACK, 2: PUBCOMP)
        self._packets += 1

    def _confirmed(self, mids: list[int]) -> None:
        pending = self._pending
        before = len(pending)
        pending.difference_update(mids)  # an acknowledgement after _lost failed its message: not ours
        if len(pending) < before:
            self.on_settled(before - len(pending), None)

    def _on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        self._packets += 1
        if self._reply_topic and message.topic == self._reply_topic:
            self._replies_in.append((bytes(message.payload), time.time_ns()))
        elif self._on_requests is not None:
            props = message.properties
            address = (getattr(props, "ResponseTopic", ""), getattr(props, "CorrelationData", None))
            self._requests_in.append((bytes(message.payload), time.time_ns(), address))
        elif self._on_messages is not None:
            self._arrived.append((bytes(message.payload), time.time_ns()))  # payload is bytes: no copy
