"""A plain MQTT client beside the product's: it sends bytes of a test's choosing and keeps the
notes that come on the topics it listens to, decoded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from protocol.codec import decode, unseal
from protocol.notes import Note


class RawClient:
    def __init__(self, topics: list[str], port: int = 1883) -> None:
        self.received: list[Note] = []
        self._arrived = threading.Condition()
        subscribed = threading.Event()
        self.client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
        # A signed note read as it says, unverified: this client watches, it does not obey.
        self.client.on_message = lambda _c, _u, m: self._keep(decode(unseal(m.payload)[0]))
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.client.subscribe([(topic, 1) for topic in topics])
        # Once the broker acknowledged the subscriptions, nothing published after is missed.
        assert subscribed.wait(10), f"no SUBACK for {topics} within 10 s"

    def _keep(self, note: Note) -> None:
        with self._arrived:
            self.received.append(note)
            self._arrived.notify_all()

    def send(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(5)

    def wait_for(self, match: Callable[[Note], bool], timeout_s: float, after: int = 0) -> int:
        """The index of the first note from `after` on that `match`es; fails the test, saying
        so, when none came within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._arrived:
            while True:
                for index in range(after, len(self.received)):
                    if match(self.received[index]):
                        return index
                left = deadline - time.monotonic()
                assert left > 0, f"no such note within {timeout_s:g} s; got {self.received[after:]}"
                self._arrived.wait(left)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
