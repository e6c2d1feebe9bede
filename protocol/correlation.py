"""Matching responses to requests, and waiting for exactly the peers that should answer.

Maestro Java collected replies "until they stop growing"; here a request names the peers it
expects, and a wait ends when each of them answered, was lost (its last will arrived), or the
timeout passed, whichever comes first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.notes import Note

__all__ = ["Correlator", "Replies"]


@dataclass
class Replies:
    """What came back for one request, by peer id."""

    expected: frozenset[str] | None  # None: whoever answers within the timeout (discovery)
    replies: dict[str, Note] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    # time.perf_counter_ns() when each reply arrived, for round-trip times.
    received_ns: dict[str, int] = field(default_factory=dict)

    @property
    def missing(self) -> set[str]:
        if self.expected is None:
            return set()
        return set(self.expected) - set(self.replies) - self.lost

    @property
    def complete(self) -> bool:
        return self.expected is not None and not self.missing


class Correlator:
    """Thread-safe: the MQTT thread delivers, the caller's thread waits."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, Replies] = {}

    def expect(self, message_id: str, peers: Iterable[str] | None) -> Replies:
        replies = Replies(expected=None if peers is None else frozenset(peers))
        with self._cond:
            self._pending[message_id] = replies
        return replies

    def deliver(self, note: Note) -> bool:
        """Record a response; False when it answers nothing we wait for (late or stray)."""
        cid = note.header.correlation_id
        with self._cond:
            replies = self._pending.get(cid or "")
            if replies is None:
                return False
            peer = note.header.sender_id
            if replies.expected is not None and peer not in replies.expected:
                return False
            # A retried QoS 1 delivery may repeat a reply: the first one counts.
            if peer not in replies.replies:
                replies.replies[peer] = note
                replies.received_ns[peer] = time.perf_counter_ns()
            self._cond.notify_all()
            return True

    def peer_lost(self, peer_id: str) -> None:
        with self._cond:
            for replies in self._pending.values():
                if replies.expected is not None and peer_id in replies.expected and peer_id not in replies.replies:
                    replies.lost.add(peer_id)
            self._cond.notify_all()

    def wait(self, message_id: str, timeout_s: float, finish: bool = True) -> Replies:
        """Until every expected peer answered or was lost, or `timeout_s`; with `finish=False`
        the request stays open for a later wait (after asking the silent ones again)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            replies = self._pending[message_id]
            try:
                while not replies.complete:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            finally:
                if finish:
                    del self._pending[message_id]
        return replies
