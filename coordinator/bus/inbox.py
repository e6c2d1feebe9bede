"""Notifications from peers, kept until the coordinator takes them.

A verdict can come before anyone asks for it (a sender may finish before the phase waits), so
notifications are kept from arrival, per peer, oldest first. They are kept only while someone
may still wait for them: a phase discards what is left of its test when it ends, and each peer's
queue is bounded so a peer that talks to nobody cannot grow the coordinator without end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection

from protocol.notes import Note

__all__ = ["Inbox"]

log = logging.getLogger(__name__)

# How often a wait looks up from the notifications to let `idle` run.
_POLL_S = 0.25
# Per peer: far more than one test's verdicts, drains, uploads and agent events.
_KEPT_PER_PEER = 1024


class Inbox:
    """Thread-safe: the MQTT thread puts, the script's thread takes and waits."""

    def __init__(self, kept_per_peer: int = _KEPT_PER_PEER) -> None:
        self._by_peer: dict[str, deque[tuple[int, Note]]] = {}
        self._kept_per_peer = kept_per_peer
        self._arrivals = 0
        self._cond = threading.Condition()

    def put(self, note: Note) -> None:
        with self._cond:
            queue = self._by_peer.setdefault(note.header.sender_id, deque())
            if len(queue) >= self._kept_per_peer:
                _, dropped = queue.popleft()
                log.warning(
                    "dropped an untaken %s from %s: nobody waits for it",
                    type(dropped).__name__,
                    dropped.header.sender_name,
                )
            self._arrivals += 1
            queue.append((self._arrivals, note))
            self._cond.notify_all()

    def wake(self) -> None:
        """Have every waiter look again (a peer was lost)."""
        with self._cond:
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._by_peer.values())

    def discard_test(self, test_id: str) -> int:
        """Drop what is left of a finished test: nobody will wait for it any more."""
        with self._cond:
            dropped = 0
            for peer_id, queue in list(self._by_peer.items()):
                kept = deque(item for item in queue if getattr(item[1], "test_id", None) != test_id)
                dropped += len(queue) - len(kept)
                if kept:
                    self._by_peer[peer_id] = kept
                else:
                    del self._by_peer[peer_id]
            return dropped

    def wait(
        self,
        take: Callable[[], bool],
        give_up: Callable[[], bool],
        timeout_s: float,
        idle: Callable[[], None] | None = None,
    ) -> bool:
        """Until `take()` (called under the lock) says it has all it wants: True; False when
        `give_up()` holds or `timeout_s` passes. `idle()` runs outside the lock at least every
        `_POLL_S` meanwhile (the liveness checks, which talk on the bus)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if idle is not None:
                idle()
            with self._cond:
                if take():
                    return True
                if give_up():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, _POLL_S))

    def pop_first(self, kinds: tuple[type[Note], ...], peer_ids: Collection[str]) -> Note | None:
        """The oldest note of `kinds` from any of `peer_ids`, taken; call under `wait`'s lock or
        on its own (the lock is re-entrant)."""
        with self._cond:
            best: tuple[int, Note] | None = None
            for peer_id in peer_ids:
                for item in self._by_peer.get(peer_id, ()):
                    if isinstance(item[1], kinds):
                        if best is None or item[0] < best[0]:
                            best = item
                        break
            if best is None:
                return None
            queue = self._by_peer[best[1].header.sender_id]
            queue.remove(best)
            if not queue:
                del self._by_peer[best[1].header.sender_id]
            return best[1]

    def one_from_each(
        self,
        kinds: tuple[type[Note], ...],
        peer_ids: set[str],
        timeout_s: float,
        is_gone: Callable[[str], bool],
        idle: Callable[[], None] | None = None,
    ) -> tuple[dict[str, Note], list[str]]:
        """One note of `kinds` from each of `peer_ids`, by peer id, taken; the wait ends early
        when a peer still awaited `is_gone`. Returns what was taken and the peers gone."""
        got: dict[str, Note] = {}
        gone: list[str] = []

        def take() -> bool:
            for peer_id in peer_ids - set(got):
                if (note := self.pop_first(kinds, (peer_id,))) is not None:
                    got[peer_id] = note
            return not peer_ids - set(got)

        def give_up() -> bool:
            gone[:] = [p for p in peer_ids - set(got) if is_gone(p)]
            return bool(gone)

        self.wait(take, give_up, timeout_s, idle)
        return got, gone

    def next_of(
        self,
        kinds: tuple[type[Note], ...],
        peer_ids: Collection[str],
        timeout_s: float,
        test_id: str | None,
        *,
        give_up: Callable[[], bool],
        idle: Callable[[], None] | None = None,
    ) -> Note | None:
        """The oldest note of `kinds` from one of `peer_ids` (and of `test_id`, when given: one
        of an earlier test is dropped), taken; None at the timeout or when `give_up()`."""
        taken: list[Note] = []

        def take() -> bool:
            while (note := self.pop_first(kinds, peer_ids)) is not None:
                if test_id is not None and getattr(note, "test_id", test_id) != test_id:
                    log.info("dropped a late %s of test %s", type(note).__name__, getattr(note, "test_id", ""))
                    continue
                taken.append(note)
                return True
            return False

        self.wait(take, give_up, timeout_s, idle)
        return taken[0] if taken else None
