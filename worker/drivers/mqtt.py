"""MQTT through paho-mqtt: `mqtt://[user:pw@]host[:1883]/topic?qos=1&clean_session=true`.

paho runs its own network thread; its callbacks cross to the event loop through
`protocol.concurrency.call_in_loop`. QoS 1 and 2 sends complete when the broker acknowledged
them (PUBACK / PUBCOMP); QoS 0 when the message is handed to the socket.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from typing import Any, ClassVar

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from protocol.bus import no_delay
from protocol.concurrency import call_in_loop
from worker.drivers.base import (
    ConnectError,
    DisconnectedError,
    Driver,
    Endpoint,
    OnMessage,
    SendError,
    boolean,
    integer,
)

__all__ = ["MqttDriver"]

_CONNECT_TIMEOUT_S = 15.0


class MqttDriver(Driver):
    SCHEMES: ClassVar[dict[str, tuple[bool, int]]] = {"mqtt": (False, 1883), "mqtts": (True, 8883)}
    OPTIONS: ClassVar[dict[str, Any]] = {
        "qos": integer(0, 2),
        "clean_session": boolean,
        "keepalive_s": integer(5, 3600),
    }
    DESCRIPTION = "MQTT 3.1.1 (paho-mqtt)"

    def __init__(self, endpoint: Endpoint, client: int = 0) -> None:
        super().__init__(endpoint, client)
        self._was_connected = False
        self.qos: int = endpoint.options.get("qos", 1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected: asyncio.Event | None = None
        self._pending: dict[int, asyncio.Future[None]] = {}
        self._on_message: OnMessage | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self._connect_error = "no answer"
        self._client = self._make_client()

    def _make_client(self) -> mqtt.Client:
        e = self.endpoint
        client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=f"maestro-{uuid.uuid4().hex[:16]}",
            clean_session=e.options.get("clean_session", True),
            protocol=mqtt.MQTTv311,
        )
        client.max_inflight_messages_set(1000)
        client.max_queued_messages_set(0)
        if e.username:
            client.username_pw_set(e.username, e.password)
        if e.tls:
            client.tls_set_context(e.ssl_context() or ssl.create_default_context())
        client.reconnect_delay_set(1, 30)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_message = self._on_message_thread
        return client

    async def connect(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._connected = asyncio.Event()
        try:
            self._client.connect_async(
                self.endpoint.host, self.endpoint.port, self.endpoint.options.get("keepalive_s", 30)
            )
        except (OSError, ValueError) as exc:
            raise ConnectError(f"{self.endpoint}: {exc}", retry=True) from exc
        self._client.loop_start()
        try:
            await asyncio.wait_for(self._connected.wait(), _CONNECT_TIMEOUT_S)
        except TimeoutError as exc:
            self._client.loop_stop()
            raise ConnectError(f"{self.endpoint}: no connection ({self._connect_error})", retry=True) from exc

    async def send(self, body: bytes) -> None:
        if self._connected is None or not self._connected.is_set():
            raise DisconnectedError(f"{self.endpoint}: not connected", retry=True)
        info = self._client.publish(self.destination, body, qos=self.qos)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            raise SendError(f"{self.endpoint}: {mqtt.error_string(info.rc)}", retry=True)
        if self.qos == 0:
            return
        assert self._loop is not None
        future: asyncio.Future[None] = self._loop.create_future()
        # on_publish reaches the loop through call_soon_threadsafe, so it runs after this line.
        self._pending[info.mid] = future
        await future

    async def receive(self, on_message: OnMessage) -> None:
        self._on_message = on_message
        self._client.subscribe(self.destination, qos=self.qos)

    # No pause: unsubscribing would drop what is published meanwhile instead of keeping a
    # backlog (the base class refuses, by name).

    async def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()
        self._fail_pending(f"{self.endpoint}: closed before confirmed")

    # --- paho thread -----------------------------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            self._connect_error = str(reason)
            return
        # paho leaves Nagle on: a message would wait for the ACK of the one before, which a slow
        # path (a fault proxy's 20 ms) turns into up to 20 ms more latency.
        no_delay(client)
        if self._connected is not None and self._was_connected:
            self.reconnects_ns.append(time.time_ns())
        self._was_connected = True
        if self._on_message is not None:  # a reconnect: subscriptions died with the session
            client.subscribe(self.destination, qos=self.qos)
        assert self._loop is not None and self._connected is not None
        call_in_loop(self._loop, self._connected.set)

    def _on_disconnect(self, _c: mqtt.Client, _u: Any, _f: Any, _reason: Any, _p: Any) -> None:
        if self._loop is not None and self._connected is not None:
            call_in_loop(self._loop, self._lost)

    def _lost(self) -> None:
        assert self._connected is not None
        self._connected.clear()
        # QoS 1/2 messages in flight when the connection dropped: their fate is unknown.
        self._fail_pending(f"{self.endpoint}: disconnected before confirmed")

    def _fail_pending(self, why: str) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SendError(why, retry=False, kind="unconfirmed"))
        self._pending.clear()

    def _on_publish(self, _c: mqtt.Client, _u: Any, mid: int, _reason: Any, _p: Any) -> None:
        if self.qos and self._loop is not None:
            call_in_loop(self._loop, self._confirmed, mid)

    def _confirmed(self, mid: int) -> None:
        future = self._pending.pop(mid, None)
        if future is not None and not future.done():
            future.set_result(None)

    def _on_message_thread(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        if self._loop is not None:
            call_in_loop(self._loop, self._deliver, message.payload)

    def _deliver(self, body: bytes) -> None:
        if self._on_message is not None:
            # paho acknowledges QoS 1/2 itself; nothing waits on the callback's end here.
            task = asyncio.ensure_future(self._on_message(body))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._tasks.discard)
