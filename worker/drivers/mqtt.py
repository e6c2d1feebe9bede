"""MQTT through paho-mqtt: `mqtt://[user:pw@]host[:1883]/topic?qos=1&clean_session=true`.

paho runs its own network thread; its callbacks cross to the event loop through
`protocol.concurrency`. QoS 1 and 2 messages are settled when the broker acknowledged them
(PUBACK / PUBCOMP), a burst of acknowledgements crossing to the loop at once; QoS 0 ones once
paho has written them to the socket. `max_inflight` (paho's own bound for QoS
1/2, default 1000) is also the worker's window, for QoS 0 too: a QoS 0 message handed to paho
waits in its memory until paho's thread writes it, and an unbounded sender handed them over faster
than that thread wrote them (335,071 waiting and 768 MB of RSS after 8 s), its rate counting
messages that had not left the process.

A QoS 0 write is not announced through `on_publish`: paho builds a `ReasonCode` and a
`Properties` for each call (9.5 µs, on its thread, under the GIL), which capped the sender at 0.41
of a raw paho loop's rate. The loop looks at the messages' `MQTTMessageInfo`s instead, in the order
paho writes them, every millisecond while some are unwritten.

`?version=5` speaks MQTT 5, which request/reply needs: a request carries a response topic and
correlation data, and the replier publishes its answer to that topic with the same data. Each
requesting client subscribes to a reply topic of its own, `<reply_to>/<random>` (default base
`maestro/replies`). Repliers subscribe to the requests as `$share/maestro-repliers/<topic>`: they
share them as a queue's consumers do, so each request is answered once, not once per replier.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from protocol.bus import no_delay
from protocol.concurrency import LoopBatch, LoopPoll, call_in_loop
from protocol.schemes import schemes_of
from protocol.sut_url import DRIVER_OPTIONS
from worker.drivers.base import (
    ConnectError,
    DisconnectedError,
    Driver,
    DriverError,
    Endpoint,
    OnMessages,
    OnRequests,
    SendError,
    connect_cause,
    probe,
)

__all__ = ["MqttDriver"]

_CONNECT_TIMEOUT_S = 15.0
# How often the loop looks for QoS 0 messages paho has written since: the window reopens this
# late at most.
_WRITTEN_POLL_S = 0.001
# How long a hand-over of messages or acknowledgements gathers more (LoopBatch): paho hands them
# over one per network read.
_LINGER_S = 0.001


class MqttDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = schemes_of("worker.drivers.mqtt:MqttDriver")
    OPTIONS: ClassVar[dict[str, Callable[[Any], Any]]] = DRIVER_OPTIONS["worker.drivers.mqtt:MqttDriver"]
    DESCRIPTION = "MQTT (paho-mqtt)"

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        self._was_connected = False
        self.qos: int = endpoint.options.get("qos", 1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected: asyncio.Event | None = None
        self._pending: set[int] = set()  # QoS 1/2: paho's message ids not yet acknowledged
        # QoS 0: what paho was handed and has not yet written, in the order it writes.
        self._unwritten: collections.deque[mqtt.MQTTMessageInfo] = collections.deque()
        self._written: LoopPoll | None = None  # made by connect(): settles what paho wrote
        self._acks: LoopBatch[int] | None = None
        self._messages: LoopBatch[tuple[bytes, int]] | None = None
        self._receiving = False
        self._processing_delay_s = 0.0
        self._connect_error = "no answer"
        self._refused = asyncio.Event()  # the broker answered CONNECT with a refusal
        self.v5 = endpoint.options.get("version", "3.1.1") == "5"
        self._reply_topic = ""  # a requester's, once open_replies made it
        self._subscription = self.destination  # what a receiver subscribes to
        self._replies: LoopBatch[tuple[bytes, int]] | None = None
        self._requests: LoopBatch[tuple[bytes, int, Any]] | None = None
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
        client.max_inflight_messages_set(self.window())
        client.max_queued_messages_set(0)
        if e.username:
            client.username_pw_set(e.username, e.password)
        if e.tls:
            client.tls_set_context(e.ssl_context() or ssl.create_default_context())
        client.reconnect_delay_set(1, 30)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        if self.qos:  # QoS 0: _settle_written
            client.on_publish = self._on_publish
        client.on_message = self._on_message_thread
        return client

    def window(self) -> int:
        return int(self.endpoint.options.get("max_inflight", self.DEFAULT_WINDOW))

    async def connect(self) -> None:
        await probe(self.endpoint)  # paho's connect_async retries a refused address in silence
        self._loop = asyncio.get_running_loop()
        self._acks = LoopBatch(self._loop, self._confirmed, linger_s=_LINGER_S)
        if self._written is None:  # connect() again after a refusal: the one poll stays
            self._written = LoopPoll(self._loop, _WRITTEN_POLL_S, self._settle_written)
        self._messages = None  # set by receive()
        self._connected = asyncio.Event()
        try:
            keepalive = self.endpoint.options.get("keepalive_s", 30)
            if self.v5:
                clean = self.endpoint.options.get("clean_session", True)
                start = mqtt.MQTT_CLEAN_START_FIRST_ONLY if clean else False
                self._client.connect_async(self.endpoint.host, self.endpoint.port, keepalive, clean_start=start)
            else:
                self._client.connect_async(self.endpoint.host, self.endpoint.port, keepalive)
        except (OSError, ValueError) as exc:
            raise ConnectError(f"{self.endpoint}: {exc}", retry=True) from exc
        self._refused.clear()  # an earlier attempt's refusal
        self._client.loop_start()
        connected = asyncio.ensure_future(self._connected.wait())
        refused = asyncio.ensure_future(self._refused.wait())
        await asyncio.wait((connected, refused), timeout=_CONNECT_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        connected.cancel()
        refused.cancel()
        if not self._connected.is_set():
            self._client.loop_stop()
            why = connect_cause(self._connect_error)
            raise ConnectError(f"{self.endpoint}: no connection: {why}", retry=why != "authentication failed")

    def publish(self, body: bytes, token: int) -> None:
        self._publish(self.destination, body, token)

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
            self._unwritten.append(info)
            assert self._written is not None
            self._written.start()
            return
        # The acknowledgement reaches the loop through call_soon_threadsafe: after this line.
        self._pending.add(info.mid)

    async def receive(self, on_messages: OnMessages, processing_delay_s: float = 0.0) -> None:
        assert self._loop is not None
        self._processing_delay_s = processing_delay_s
        self._messages = LoopBatch(self._loop, on_messages, linger_s=_LINGER_S)
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
        assert self._loop is not None
        base = self.endpoint.options.get("reply_to", "maestro/replies")
        self._reply_topic = f"{base}/{uuid.uuid4().hex[:12]}"
        self._replies = LoopBatch(self._loop, on_replies)
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
        assert self._loop is not None
        self._requests = LoopBatch(self._loop, on_requests)
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
        self._client.disconnect()
        self._client.loop_stop()
        self._fail_pending(f"{self.endpoint}: closed before confirmed")

    # --- paho thread -----------------------------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            self._connect_error = str(reason)
            if self._loop is not None and not self._was_connected:
                call_in_loop(self._loop, self._refused.set)
            return
        # paho leaves Nagle on: a message would wait for the ACK of the one before, which a slow
        # path (a fault proxy's 20 ms) turns into up to 20 ms more latency.
        no_delay(client)
        if self._connected is not None and self._was_connected:
            self.reconnects_ns.append(time.time_ns())
        self._was_connected = True
        if self._receiving:  # a reconnect: subscriptions died with the session
            client.subscribe(self._subscription, qos=self.qos)
        if self._reply_topic:
            client.subscribe(self._reply_topic, qos=self.qos)
        assert self._loop is not None and self._connected is not None
        call_in_loop(self._loop, self._connected.set)

    def _on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, _reason: Any, _p: Any) -> None:
        if self._loop is not None and self._connected is not None:
            call_in_loop(self._loop, self._lost)

    def _lost(self) -> None:
        assert self._connected is not None
        self._connected.clear()
        # Messages in flight when the connection dropped: their fate is unknown (QoS 0 ones not yet
        # written paho drops when it reconnects).
        self._fail_pending(f"{self.endpoint}: disconnected before confirmed")

    def _fail_pending(self, why: str) -> None:
        self._settle_written()
        if self._written is not None:
            self._written.stop()
        unsettled = len(self._pending) + len(self._unwritten)
        self._pending = set()
        self._unwritten.clear()
        if unsettled:
            self.on_settled(unsettled, SendError(why, retry=False, kind="unconfirmed"))

    def _settle_written(self) -> bool:
        """QoS 0: settle the messages paho has written, oldest first; whether any are left."""
        unwritten, written = self._unwritten, 0
        while unwritten and unwritten[0].is_published():
            unwritten.popleft()
            written += 1
        if written:
            self.on_settled(written, None)
        return bool(unwritten)

    def _on_publish(self, _c: mqtt.Client, _u: Any, mid: int, _reason: Any, _p: Any) -> None:
        if self._acks is not None:  # acknowledged (QoS 1: PUBACK, 2: PUBCOMP)
            self._acks.put(mid)

    def _confirmed(self, mids: list[int]) -> None:
        pending = self._pending
        before = len(pending)
        pending.difference_update(mids)  # an acknowledgement after _lost failed its message: not ours
        if len(pending) < before:
            self.on_settled(before - len(pending), None)

    def _on_message_thread(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        if self._replies is not None and message.topic == self._reply_topic:
            self._replies.put((bytes(message.payload), time.time_ns()))
            return
        if self._requests is not None:
            props = message.properties
            address = (getattr(props, "ResponseTopic", ""), getattr(props, "CorrelationData", None))
            self._requests.put((bytes(message.payload), time.time_ns(), address))
            return
        if self._messages is None:
            return
        self._messages.put((bytes(message.payload), time.time_ns()))  # payload is bytes: no copy
        if self._processing_delay_s:
            # A slow consumer holds paho's loop: the PUBACK and the next message wait, as they
            # would for an application that takes this long.
            time.sleep(self._processing_delay_s)
