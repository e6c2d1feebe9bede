"""Whether a peer is gone. A last will alone is not enough: a broker going down publishes the
wills of every peer connected to it, alive or not, and a peer that died while the coordinator
had no broker leaves no will it could see. So a will, and the coordinator's own reconnection,
make peers suspects; a PING to each decides, and only silence for `CONFIRM_S` while the
coordinator is connected makes a peer lost.

Checked from the script's thread (`check`), which the waits and the phase's watch call often;
the MQTT thread only records and clears suspects.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.bus import ControlBus
from protocol.notes import Note, PingRequest

__all__ = ["CONFIRM_S", "Liveness"]

log = logging.getLogger(__name__)

# A live peer is back within 2 s of the broker (its reconnect backoff's ceiling, protocol/bus.py).
CONFIRM_S = 3.5
# The PING is repeated this often (same message id): a peer still subscribing misses the first.
_ASK_AGAIN_S = 0.5


@dataclass
class _Asked:
    ping: Note
    deadline: float  # monotonic
    next_ask: float


class Liveness:
    def __init__(self, bus: ControlBus, on_lost: Callable[[str, str], None]) -> None:
        self.bus = bus
        self.on_lost = on_lost  # (peer id, why)
        self._lock = threading.Lock()
        self._suspects: dict[str, str] = {}  # peer id -> why it is suspected
        self._asked: dict[str, _Asked] = {}

    def suspect(self, peer_id: str, why: str) -> None:
        with self._lock:
            self._suspects.setdefault(peer_id, why)

    def clear(self, peer_id: str) -> None:
        """It spoke (came online again): not a suspect any more."""
        with self._lock:
            self._clear(peer_id)

    def _clear(self, peer_id: str) -> None:  # under the lock
        self._suspects.pop(peer_id, None)
        asked = self._asked.pop(peer_id, None)
        if asked is not None:
            self.bus.await_replies(asked.ping.header.message_id, 0)

    def reconnected(self, peer_ids: Iterable[str]) -> None:
        """The coordinator is back on the broker: everyone must show they are still there."""
        with self._lock:
            for peer_id in peer_ids:
                self._suspects.setdefault(peer_id, "silent since the control broker came back")
            # A PING out before the gap counted its silence against it: ask again from now.
            for asked in self._asked.values():
                self.bus.await_replies(asked.ping.header.message_id, 0)
            self._asked = {}

    def check(self) -> None:
        """Ask each suspect, clear those that answered, and name as lost those silent for
        `CONFIRM_S` while connected."""
        if not self.bus.connected:
            return
        now = time.monotonic()
        lost = []
        # Under the lock throughout: the MQTT thread clears suspects (PEER_ONLINE) meanwhile.
        with self._lock:
            for peer_id, why in list(self._suspects.items()):
                asked = self._asked.get(peer_id)
                if asked is None:
                    ping = self.bus.send_request(
                        self.bus.topics.by_id(peer_id), PingRequest(coordinator_time_ns=time.time_ns()), {peer_id}
                    )
                    self._asked[peer_id] = _Asked(ping, now + CONFIRM_S, now + _ASK_AGAIN_S)
                    continue
                replies = self.bus.await_replies(asked.ping.header.message_id, 0, finish=False)
                if replies.replies:
                    self._clear(peer_id)
                elif now >= asked.deadline:
                    self._clear(peer_id)
                    lost.append((peer_id, why))
                elif now >= asked.next_ask:
                    asked.next_ask = now + _ASK_AGAIN_S
                    self.bus.resend(self.bus.topics.by_id(peer_id), asked.ping)
        for peer_id, why in lost:  # outside the lock: the callback marks it in the registry
            log.error("peer %s did not answer a PING for %g s (%s)", peer_id, CONFIRM_S, why)
            self.on_lost(peer_id, why)
