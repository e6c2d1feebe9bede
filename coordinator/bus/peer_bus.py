"""`PeerBus`: the coordinator's side of the control bus. Requests that wait for exactly the
peers they address (asked again when an answer is lost), the notifications peers send, and
which peers are gone (a last will, checked by PING). `MaestroClient` adds the peer operations
scripts use on top.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from types import TracebackType
from typing import Self

from coordinator.bus.addressing import Target, Targets
from coordinator.bus.asking import await_all
from coordinator.bus.inbox import Inbox
from coordinator.bus.liveness import Liveness
from coordinator.errors import MaestroError, PeerRequestError
from coordinator.registry import PeerInfo, PeerRegistry
from protocol.bus import ControlBus
from protocol.codes import NoteType, Role
from protocol.correlation import Replies
from protocol.notes import (
    AbnormalDisconnect,
    LogRequest,
    Note,
    PeerOnline,
    PingRequest,
    SetRequest,
    StartTest,
    StatsReport,
)
from protocol.version import VERSION

__all__ = ["DEFAULT_TIMEOUT_S", "PeerBus", "Target"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
# Live statistics kept for a script to read: about an hour of one worker's, once a second.
_STATS_KEPT = 4096


class PeerBus:
    def __init__(self, bus: ControlBus) -> None:
        self.bus = bus
        self.topics = bus.topics
        self.targets = Targets(bus.topics)
        self.registry = PeerRegistry()
        self.liveness = Liveness(bus, self._confirm_lost)
        self.inbox = Inbox()  # notifications until taken; live statistics (lossy by design) apart
        self.live_stats: deque[StatsReport] = deque(maxlen=_STATS_KEPT)
        bus.on_note = self._on_note
        bus.on_connected = self._on_connected
        bus.guard.offset_of = self._clock_offset_ns
        bus.guard.bound_test = self._bound_test
        # Keyed, a note sealed for no test is no exception: peers seal what they send for their test.
        bus.guard.exact_test = bus.key is not None

    def close(self) -> None:
        self.bus.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.close()

    def everyone(self) -> Target:
        return self.targets.everyone()

    def workers(self) -> Target:
        return self.targets.workers()

    @property
    def peers(self) -> list[PeerInfo]:
        return self.registry.live()

    def _expected(self, target: Target) -> set[str]:
        return {p.peer_id for p in self.registry.live(target.selects)}

    def request(
        self, note: Note, to: Target | Role | PeerInfo | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Replies:
        """Send `note` and wait for every live peer `to` selects; raises PeerRequestError
        unless each of them answered OK (or the command's own response)."""
        self._names_test(note)
        target = self.targets.of(to)
        expected = self._expected(target)
        if not expected:
            raise MaestroError(f"{type(note).__name__}: no live peer is {target.label}")
        (replies,) = await_all(self.bus, [self.bus.send_request(target.topic, note, expected)], timeout_s)
        self._raise_unless_complete(type(note), target, replies, timeout_s)
        return replies

    def request_all(self, note: Note, peers: list[PeerInfo], timeout_s: float = DEFAULT_TIMEOUT_S) -> Replies:
        """`note` to each of `peers` at once, over as few topics as reach exactly them (their
        role's, when they are all of it), and wait for exactly them; raises PeerRequestError
        naming each one that did not comply, with every answer in its `replies`."""
        return self.request_each([(note, peers)], timeout_s)

    def request_each(
        self, asks: Sequence[tuple[Note, list[PeerInfo]]], timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Replies:
        """Several `request_all`s out at once (a SET of their own to each flow's senders and
        receivers): one round trip for them all."""
        for note, _peers in asks:
            self._names_test(note)
        live = self.registry.live()
        sends = [(note, t, self._expected(t)) for note, peers in asks for t in self.targets.covering(peers, live)]
        stamped = [self.bus.send_request(t.topic, note, expected) for note, t, expected in sends]
        merged = Replies(expected=frozenset().union(*(expected for _, _, expected in sends)))
        for replies in await_all(self.bus, stamped, timeout_s):
            merged.replies |= replies.replies
            merged.lost |= replies.lost
            merged.received_ns |= replies.received_ns
        label = ", ".join(dict.fromkeys(t.label for _, t, _ in sends)) or "nobody"
        kind = type(asks[0][0]) if asks else Note
        PeerRequestError.raise_unless_complete(kind, label, merged, timeout_s, self.label)
        return merged

    def _raise_unless_complete(
        self, request: type[Note], target: Target, replies: Replies, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        PeerRequestError.raise_unless_complete(request, target.label, replies, timeout_s, self.label)

    def label(self, peer_id: str) -> str:
        peer = self.registry.get(peer_id)
        return peer.label if peer else peer_id

    def short_label(self, peer_id: str) -> str:
        """name@host, as results and failure reasons name a peer."""
        peer = self.registry.get(peer_id)
        return f"{peer.name}@{peer.host}" if peer else peer_id

    def wait_for(
        self,
        kinds: tuple[type[Note], ...],
        peers: Iterable[PeerInfo],
        timeout_s: float,
    ) -> dict[str, Note]:
        """Wait for one notification of `kinds` from each of `peers`, by peer id.

        Notifications that arrived earlier count (none is missed between two calls); each is
        taken once. A peer lost meanwhile ends the wait with a MaestroError naming it.
        """
        waiting = {p.peer_id for p in peers}
        got, gone = self.inbox.one_from_each(kinds, waiting, timeout_s, self.registry.is_missing, self.liveness.check)
        if gone:
            raise MaestroError("lost while waiting: " + ", ".join(self.label(p) for p in sorted(gone)))
        if missing := waiting - set(got):
            names = ", ".join(self.label(p) for p in sorted(missing))
            raise MaestroError(f"no {'/'.join(k.__name__ for k in kinds)} from {names} within {timeout_s:g} s")
        return got

    def next_notification(
        self, kinds: tuple[type[Note], ...], peer_ids: Collection[str], timeout_s: float, test_id: str | None = None
    ) -> Note | None:
        """Take the oldest notification of `kinds` from one of `peer_ids`, and of test `test_id`
        when given (one of those kinds from an earlier test, late, is dropped: a phase of a series
        must not end on its predecessor's verdict); None after `timeout_s` (or at once when a peer
        among them is lost: check `lost`)."""
        gone = lambda: any(p.peer_id in peer_ids for p in self.registry.lost())  # noqa: E731 - under the inbox's lock
        return self.inbox.next_of(kinds, peer_ids, timeout_s, test_id, give_up=gone, idle=self.liveness.check)

    @property
    def lost(self) -> list[PeerInfo]:
        """Peers gone for sure, oldest first: a last will, or the coordinator's own reconnection,
        made them suspects, and they did not answer a PING (coordinator/bus/liveness.py)."""
        self.liveness.check()
        return self.registry.lost()

    def lost_reason(self, peer_id: str) -> str:
        """Why a lost peer was asked, and that it did not answer: for the test's reason."""
        return f"{self.registry.lost_why(peer_id) or 'suspected'}, then no answer to a PING"

    def lost_among(self, peer_ids: Collection[str]) -> list[PeerInfo]:
        return [p for p in self.lost if p.peer_id in peer_ids]

    def not_lost(self, peers: list[PeerInfo]) -> list[PeerInfo]:
        """`peers` without those lost for sure, in order."""
        lost = {p.peer_id for p in self.lost}
        return [p for p in peers if p.peer_id not in lost]

    def _confirm_lost(self, peer_id: str, why: str) -> None:
        peer = self.registry.mark_lost(peer_id, why)
        if peer is None:
            return
        self.bus.correlator.peer_lost(peer_id)
        log.error("peer lost: %s (%s, and no answer to a PING)", peer.label, why)
        self.inbox.wake()  # whoever waits on it gives up now

    def _names_test(self, note: Note) -> None:
        """An order naming a test makes it the one this coordinator acts on: its orders are sealed
        for it, and only notifications of it are taken (a hand-driven session's, a collection's)."""
        match note:
            case StartTest(test_id=str(test_id)) | LogRequest(test_id=str(test_id)) if test_id:
                self.bus.test_id = test_id
            case SetRequest(options={"test_id": str(test_id)}) if test_id:
                self.bus.test_id = test_id

    def _bound_test(self, note: Note) -> str | None:
        """The test a note must be sealed for (protocol.signing.NoteGuard): a notification or
        statistics act on this coordinator's test. Presence notes act on none, and answers are
        taken only as answers to a request this process sent, by its message id."""
        if isinstance(note, AbnormalDisconnect | PeerOnline):
            return None
        return self.bus.test_id if note.TYPE in (NoteType.NOTIFICATION, NoteType.DATA) else None

    def _of_another_test(self, note: Note) -> bool:
        """A note naming another test than this coordinator's (a copy of an earlier run's, or a
        late one of a previous phase). Without a key, any test is taken until one is named."""
        named = getattr(note, "test_id", None)
        if not isinstance(named, str) or (self.bus.key is None and not self.bus.test_id):
            return False
        return named != self.bus.test_id

    def _on_own_will(self, note: Note) -> None:
        """Our own last will, seen while connected: not the broker's (that comes only once we are
        gone) but a copy someone published again, which the peers would take for our end and
        stop the test after their grace. Announcing ourselves again cancels that."""
        if isinstance(note, AbnormalDisconnect) and self.bus.connected:
            log.warning("our own last will was published while we are connected: announcing ourselves again")
            self.bus.publish(self.topics.coordinator, PeerOnline(version=VERSION))

    def _on_note(self, topic: str, note: Note) -> None:
        h = note.header
        if topic == self.topics.coordinator:  # coordinators' presence: only our own will matters
            if h.sender_id == self.bus.identity.peer_id:
                self._on_own_will(note)
            return
        if h.sender_id == self.bus.identity.peer_id:
            return
        if self._of_another_test(note):
            log.info(
                "dropped a %s of test %s from %s: this coordinator runs test %s",
                type(note).__name__,
                getattr(note, "test_id", ""),
                h.sender_name,
                self.bus.test_id or "(none)",
            )
            return
        match note:
            case AbnormalDisconnect():
                # Not believed yet: a broker going down publishes every peer's will.
                log.warning("last will of %s@%s: asking it", h.sender_name, h.sender_host)
                self.liveness.suspect(h.sender_id, "last will")
                self.inbox.wake()  # a waiter's idle check asks it now
            case PeerOnline():
                came_back = self.registry.get(h.sender_id) is not None
                self.liveness.clear(h.sender_id)
                peer = self.registry.upsert(h.sender_id, h.sender_name, h.sender_host, h.sender_role)
                peer.version = note.version
                peer.answers_probes_at(note.clock_port, note.clock_hosts)
                if came_back:
                    self._check_in(h.sender_id)
            case StatsReport():
                self.live_stats.append(note)  # read by scripts; nobody waits on it
            case _ if note.TYPE == NoteType.NOTIFICATION:
                self.inbox.put(note)
            case _:
                log.debug("late or stray %s from %s on %s", type(note).__name__, h.sender_name, topic)

    def _clock_offset_ns(self, peer_id: str) -> int | None:
        """A peer's clock minus ours, where measured: its notes' stamps are judged by it."""
        peer = self.registry.get(peer_id)
        return None if peer is None or peer.clock is None else round(peer.clock.offset_us * 1000)

    def _check_in(self, peer_id: str) -> None:
        """Tell a peer that came back to the broker that this coordinator is here. It may have
        subscribed again only after this coordinator announced its own return (once), and then
        it takes the will it heard as the coordinator's end (#34). Its PEER_ONLINE comes after its
        subscriptions on the same connection, so this PING reaches it whatever the order of the
        two returns; the answer is not waited for."""
        self.bus.publish(self.topics.by_id(peer_id), PingRequest(coordinator_time_ns=time.time_ns()))

    def _on_connected(self) -> None:
        # Peers whose test this coordinator runs learn it is (back) here.
        self.bus.publish(self.topics.coordinator, PeerOnline(version=VERSION))
        if self.bus.connections > 1:
            log.warning("back on the control broker: asking every peer whether it is still there")
            self.liveness.reconnected(p.peer_id for p in self.registry.live())
            self.inbox.wake()
