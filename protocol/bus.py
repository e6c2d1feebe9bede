"""The control bus: notes over MQTT through paho-mqtt.

It stamps every outgoing note's header, decodes every incoming one, re-subscribes after a
reconnect, sets the ABNORMAL_DISCONNECT last will, and matches responses to requests.
Callbacks run on paho's network thread; asyncio users hand them over with
`protocol.concurrency.call_in_loop`.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from protocol.broker_url import BrokerUrl
from protocol.codec import DEFAULT_MAX_NOTE_BYTES, ProtocolError, decode, encode, sender_label
from protocol.codes import NoteType
from protocol.correlation import Correlator, Replies
from protocol.log_throttle import LogThrottle
from protocol.notes import AbnormalDisconnect, Header, Note
from protocol.signing import NoteGuard, NoteKey, RefusedNoteError, sign, split
from protocol.topics import Topics

__all__ = ["BusError", "ConnectFailedError", "ControlBus", "Identity", "NoteHandler", "no_delay"]

log = logging.getLogger(__name__)

NoteHandler = Callable[[str, Note], None]
BadNoteHandler = Callable[[str, ProtocolError], None]

# Seconds between MQTT keep-alive pings; a peer that dies without closing its socket is
# declared gone by the broker after 1.5 times this.
_KEEPALIVE_S = 10
_RECONNECT_MIN_S = 1
# Short: after a broker restart every peer is back within this, so the coordinator can tell
# a peer that died in the gap (silent) from one still reconnecting.
_RECONNECT_MAX_S = 2
# CONNACK codes (MQTT 3.1.1 and their MQTT 5 twins) after which a retry cannot succeed.
_REFUSALS = {2, 4, 5, 0x85, 0x86, 0x87, 0x8C}


class BusError(Exception):
    """The control bus failed. `retry` says whether trying again may help."""

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


class ConnectFailedError(BusError):
    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message, retry=retry)


@dataclass
class Identity:
    """Who this end of the bus is; stamped into every note it sends."""

    peer_id: str
    name: str
    host: str
    role: str

    @classmethod
    def new(cls, name: str, host: str, role: str) -> Identity:
        return cls(peer_id=uuid.uuid4().hex, name=name, host=host, role=role)


class ControlBus:
    def __init__(
        self,
        url: BrokerUrl,
        identity: Identity,
        topics: Topics,
        *,
        on_note: NoteHandler | None = None,
        on_bad_note: BadNoteHandler | None = None,
        on_connected: Callable[[], None] | None = None,
        last_will: bool = True,
        will_topic: str | None = None,
        max_note_bytes: int = DEFAULT_MAX_NOTE_BYTES,
        key: NoteKey | None = None,
        require_signed: bool = False,
        seen_file: Path | None = None,
    ) -> None:
        """With a `key`, every note sent is signed and every signed note received is checked;
        `require_signed` refuses unsigned ones too, and `seen_file` keeps the notes taken across
        a restart (protocol.signing). `guard.offset_of` and `guard.bound_test` are the owner's to
        set; `test_id` is the test the notes sent are sealed for."""
        self.url = url
        self.identity = identity
        self.topics = topics
        self.on_note = on_note
        self.on_bad_note = on_bad_note
        self.on_connected = on_connected
        self.max_note_bytes = max_note_bytes
        self._key = key
        self.guard = NoteGuard(key, require=require_signed, seen_file=seen_file)
        self.test_id = ""
        self.complaints = LogThrottle()  # refused and unreadable notes: one line per sender a minute
        self.correlator = Correlator()
        self._subscriptions: dict[str, int] = {}  # topic -> QoS
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._connections = 0
        # Outages after the first connection: (lost, back) wall times in ns, back 0 while down;
        # and the monotonic seconds spent down, so waits can leave the gap out.
        self.outages: list[tuple[int, int]] = []
        self._down_since: float | None = None
        self._down_total_s = 0.0
        self._refused = threading.Event()  # credentials or client id refused: retrying cannot help
        self._last_error = "no answer yet"
        self._client = self._make_client(last_will, will_topic or topics.notifications)

    # --- connection ---------------------------------------------------------------------------

    def _make_client(self, last_will: bool, will_topic: str) -> mqtt.Client:
        client = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=self.identity.peer_id,
            clean_session=True,
            protocol=mqtt.MQTTv311,
        )
        if self.url.username:
            client.username_pw_set(self.url.username, self.url.password)
        if self.url.tls:
            client.tls_set(
                ca_certs=self.url.ca_file,
                certfile=self.url.cert_file,
                keyfile=self.url.key_file,
                cert_reqs=ssl.CERT_NONE if self.url.insecure else ssl.CERT_REQUIRED,
            )
            client.tls_insecure_set(self.url.insecure)
        if last_will:
            # The broker publishes this if the peer vanishes without a clean disconnect.
            client.will_set(will_topic, self._encode(self._stamp(AbnormalDisconnect()), will_topic), qos=1)
        client.reconnect_delay_set(_RECONNECT_MIN_S, _RECONNECT_MAX_S)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        return client

    def connect(self, timeout_s: float = 10.0) -> None:
        """Connect, retrying with backoff until `timeout_s`; raises ConnectFailedError."""
        try:
            self._client.connect_async(self.url.host, self.url.port, keepalive=_KEEPALIVE_S)
        except (OSError, ValueError) as exc:
            raise ConnectFailedError(f"cannot reach the control broker at {self.url}: {exc}") from exc
        self._client.loop_start()
        deadline = time.monotonic() + timeout_s
        while not self._connected.wait(0.05):
            if self._refused.is_set():
                self._client.disconnect()
                self._client.loop_stop()
                raise ConnectFailedError(
                    f"the control broker at {self.url} refused us: {self._last_error}", retry=False
                )
            if time.monotonic() > deadline:
                self._client.loop_stop()
                raise ConnectFailedError(
                    f"no connection to the control broker at {self.url} within {timeout_s:g} s ({self._last_error})"
                )

    def close(self) -> None:
        """Disconnect cleanly: the broker discards the last will."""
        self._client.disconnect()
        self._client.loop_stop()
        self._connected.clear()

    @property
    def key(self) -> NoteKey | None:
        """The cluster key notes are signed with (None: unsigned); the clock probes' too."""
        return self._key

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def local_address(self) -> str | None:
        """This end's address of the connection to the broker: where the broker's side of the
        network reaches us (None while not connected)."""
        sock = self._client.socket()
        if not isinstance(sock, socket.socket):
            return None
        try:
            address = sock.getsockname()[0]
        except OSError:
            return None
        return str(address) if address not in ("0.0.0.0", "::") else None

    @property
    def connections(self) -> int:
        """Connections made so far: more than one means it came back after losing the broker."""
        return self._connections

    def downtime_s(self) -> float:
        """Seconds without the broker since the first connection, the current gap included."""
        with self._lock:
            current = 0.0 if self._down_since is None else time.monotonic() - self._down_since
            return self._down_total_s + current

    def subscribe(self, topics: Iterable[str], qos: int = 1) -> None:
        new = dict.fromkeys(topics, qos)
        with self._lock:
            self._subscriptions |= new
        if self.connected:
            self._client.subscribe(sorted(new.items()))

    def unsubscribe(self, topic: str) -> None:
        with self._lock:
            self._subscriptions.pop(topic, None)
        if self.connected:
            self._client.unsubscribe(topic)

    # --- sending ------------------------------------------------------------------------------

    def _stamp(self, note: Note, reply_to: Note | None = None) -> Note:
        who = self.identity
        header = Header(
            message_id=uuid.uuid4().hex,
            sender_id=who.peer_id,
            sender_name=who.name,
            sender_host=who.host,
            sender_role=who.role,
            timestamp_ns=time.time_ns(),
            correlation_id=reply_to.header.message_id if reply_to is not None else None,
        )
        return note.with_header(header)

    def publish(
        self, topic: str, note: Note, *, reply_to: Note | None = None, qos: int = 1, test_id: str | None = None
    ) -> Note:
        """Stamp and send a note, sealed for `test_id` (default: `self.test_id`); returns it as
        sent (with its header)."""
        stamped = self._stamp(note, reply_to)
        self._publish_raw(topic, self._encode(stamped, topic, test_id), qos)
        return stamped

    def reply(self, request: Note, response: Note) -> Note:
        return self.publish(self.topics.maestro, response, reply_to=request)

    def reply_to_id(self, correlation_id: str | None, response: Note) -> Note:
        """Answer a request we could not decode, correlated by the id we could read (if any)."""
        stamped = self._stamp(response)
        stamped = stamped.with_header(replace(stamped.header, correlation_id=correlation_id))
        self._publish_raw(self.topics.maestro, self._encode(stamped, self.topics.maestro), 1)
        return stamped

    def request(self, topic: str, note: Note, expect: Iterable[str] | None, timeout_s: float) -> tuple[Note, Replies]:
        """Send a request and wait for the responses of exactly `expect` (peer ids).

        With `expect=None` it collects whoever answers until the timeout: only discovery does that.
        """
        stamped = self.send_request(topic, note, expect)
        return stamped, self.await_replies(stamped.header.message_id, timeout_s)

    def send_request(self, topic: str, note: Note, expect: Iterable[str] | None) -> Note:
        """The first half of `request`: several requests can be out at once, each then awaited."""
        stamped = self._stamp(note)
        replies = self.correlator.expect(stamped.header.message_id, expect)
        if replies.expected != frozenset():
            self._publish_raw(topic, self._encode(stamped, topic), 1)
        return stamped

    def await_replies(self, message_id: str, timeout_s: float, finish: bool = True) -> Replies:
        return self.correlator.wait(message_id, timeout_s, finish)

    def resend(self, topic: str, stamped: Note) -> None:
        """The same request again (same message id): a peer that answered it answers again, and
        none acts on it twice. Stamped anew, or a keyed peer would take it for a replay."""
        again = stamped.with_header(replace(stamped.header, timestamp_ns=time.time_ns()))
        self._publish_raw(topic, self._encode(again, topic), 1)

    def _encode(self, note: Note, topic: str, test_id: str | None = None) -> bytes:
        packed = encode(note)
        sealed_for = self.test_id if test_id is None else test_id
        return packed if self._key is None else sign(packed, self._key, topic, sealed_for)

    def _publish_raw(self, topic: str, payload: bytes, qos: int) -> None:
        info = self._client.publish(topic, payload, qos=qos)
        if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
            raise BusError(f"publish to {topic} failed: {mqtt.error_string(info.rc)}")
        if info.rc == mqtt.MQTT_ERR_NO_CONN:
            log.warning("not connected to the control broker: a note to %s is queued until reconnect", topic)

    # --- paho callbacks (network thread) --------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, _userdata: Any, _flags: Any, reason: Any, _props: Any) -> None:
        if reason.is_failure:
            self._last_error = str(reason)
            if reason.value in _REFUSALS:
                self._refused.set()
            log.error("control broker %s refused the connection: %s", self.url, reason)
            return
        no_delay(client)
        with self._lock:
            topics = sorted(self._subscriptions.items())
            if self._down_since is not None:
                self._down_total_s += time.monotonic() - self._down_since
                self._down_since = None
                self.outages[-1] = (self.outages[-1][0], time.time_ns())
        if topics:
            client.subscribe(topics)
        self._connections += 1
        self._connected.set()
        log.info("%s to the control broker %s", "reconnected" if self._connections > 1 else "connected", self.url)
        if self.on_connected is not None:
            self.on_connected()

    def _on_connect_fail(self, _client: mqtt.Client, _userdata: Any) -> None:
        self._last_error = "connection refused or unreachable"

    def _on_disconnect(self, _client: mqtt.Client, _userdata: Any, _flags: Any, reason: Any, _props: Any) -> None:
        if self._connected.is_set() and reason.is_failure:
            log.warning("lost the control broker %s (%s); reconnecting", self.url, reason)
            with self._lock:
                self._down_since = time.monotonic()
                self.outages.append((time.time_ns(), 0))
        self._connected.clear()

    def _on_message(self, _client: mqtt.Client, _userdata: Any, message: mqtt.MQTTMessage) -> None:
        unsigned, sealed = split(message.payload, self.max_note_bytes)
        try:
            note = decode(unsigned, self.max_note_bytes)
            self.guard.check(note, unsigned, sealed, message.topic)
        except RefusedNoteError as refused:
            sender = sender_label(note.header)
            self.complain(sender, f"refused a note on {message.topic} from {sender}: {refused.reason}")
            if refused.answer:
                self._bad_note(message.topic, ProtocolError(refused.reason, note.header.message_id, sender))
            return
        except ProtocolError as exc:
            sender = exc.sender or "an unknown sender"
            self.complain(sender, f"bad note on {message.topic} from {sender}: {exc.reason}")
            self._bad_note(message.topic, exc)
            return
        if note.TYPE == NoteType.RESPONSE and self.correlator.deliver(note):
            return
        if self.on_note is not None:
            try:
                self.on_note(message.topic, note)
            except Exception:
                # A handler bug must not kill paho's network thread (and with it the bus).
                log.exception("note handler failed on %s", type(note).__name__)

    def _bad_note(self, topic: str, error: ProtocolError) -> None:
        if self.on_bad_note is not None:  # to answer it: the complaint is logged already
            self.on_bad_note(topic, error)

    def complain(self, sender: str, message: str) -> None:
        """Log a refused or unreadable note, at most once a minute per `sender` (as it names itself)."""
        self.complaints.log(log, sender, message)


def no_delay(client: mqtt.Client) -> None:
    """Small messages whose latency matters: without this, Nagle's algorithm holds a message
    until the previous one is acknowledged, and delayed ACKs make that up to ~40 ms."""
    sock = client.socket()
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
