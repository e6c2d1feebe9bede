"""A rogue on the control broker: a plain MQTT client that anyone who can reach the broker could
run. It records every note it sees (signed or not: it cannot read the key, only the bytes) and
publishes whatever bytes it likes on whatever topic, as #38's hostile tester did."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from protocol.broker_url import BrokerUrl
from protocol.codec import ProtocolError, decode, encode
from protocol.notes import Header, Note
from protocol.signing import split


@dataclass(frozen=True)
class Captured:
    topic: str
    data: bytes  # exactly as it crossed the broker, seal and all
    note: Note


@dataclass
class Rogue:
    broker_url: str
    prefix: str
    captured: list[Captured] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _client: mqtt.Client | None = None

    def __enter__(self) -> Rogue:
        url = BrokerUrl.parse(self.broker_url)
        client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=f"rogue-{uuid.uuid4().hex}")
        subscribed = threading.Event()
        client.on_connect = lambda c, *_: c.subscribe(f"{self.prefix}/#", qos=1)
        client.on_subscribe = lambda *_: subscribed.set()
        client.on_message = self._on_message
        client.connect(url.host, url.port)
        client.loop_start()
        if not subscribed.wait(10):
            raise RuntimeError(f"the rogue could not subscribe on {self.broker_url}")
        self._client = client
        return self

    def __exit__(self, *_: object) -> None:
        assert self._client is not None
        self._client.disconnect()
        self._client.loop_stop()

    def _on_message(self, _client: mqtt.Client, _userdata: object, message: mqtt.MQTTMessage) -> None:
        unsigned, _seal = split(message.payload)
        try:
            note = decode(unsigned)
        except ProtocolError:
            return
        with self._lock:
            self.captured.append(Captured(message.topic, bytes(message.payload), note))

    def wait_for(self, match: Callable[[Captured], bool], timeout_s: float = 20.0) -> Captured:
        """The first note seen so far, or until `timeout_s`, that `match`es."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                found = next((c for c in self.captured if match(c)), None)
            if found is not None:
                return found
            time.sleep(0.05)
        raise AssertionError(f"the rogue saw no such note within {timeout_s:g} s")

    def publish(self, topic: str, data: bytes) -> None:
        assert self._client is not None
        self._client.publish(topic, data, qos=1).wait_for_publish(5)

    def forge(self, note: Note, pretending: Header | None = None) -> bytes:
        """An unsigned note, stamped now, in the name of `pretending`'s sender if given."""
        header = Header(
            message_id=uuid.uuid4().hex,
            sender_id=pretending.sender_id if pretending else "rogue",
            sender_name=pretending.sender_name if pretending else "rogue",
            sender_host=pretending.sender_host if pretending else "nowhere",
            sender_role=pretending.sender_role if pretending else "coordinator",
            timestamp_ns=time.time_ns(),
        )
        return encode(note.with_header(header))
