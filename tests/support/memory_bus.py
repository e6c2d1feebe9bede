"""A control bus in memory, with simulated peers that answer as the daemons do: a phase or a
series runs against it with no broker, no daemon and no data server.

As strict as the real one: every note crosses it encoded by the codec (signed with the bus's
key, and checked by a keyed peer's guard, as the daemons' bus does); a peer's answer can take
its time each way (`out_s`, `back_s`: a stock Mosquitto holds the answer to a PING ~40 ms on the
way back alone); the broker can be lost for a while (`lose_broker`), holding what is sent
meanwhile until it is back; and a request asked again is stamped anew, as `ControlBus.resend`
does."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coordinator.bus.client import MaestroClient
from coordinator.outcome.results import TestResult
from protocol.bus import Identity
from protocol.codec import decode, encode
from protocol.codes import Role
from protocol.correlation import Correlator, Replies
from protocol.figures import TestFigures
from protocol.live import LiveUpdate
from protocol.notes import (
    DrainComplete,
    DrainRequest,
    Header,
    LogRequest,
    Note,
    OkResponse,
    PingRequest,
    PingResponse,
    SetRequest,
    StartTest,
    StartWorker,
    StopWorker,
    TestFailed,
    TestSucceeded,
    UploadComplete,
)
from protocol.signing import NoteGuard, NoteKey, RefusedNoteError, sign, split
from protocol.test_record import PeerEntry, TestRecord
from protocol.topics import Topics


@dataclass
class SimulatedPeer:
    name: str
    role: Role
    clock_offset_ns: int = 0
    # A sender's verdict on its run, from the options it was SET: None passes, a text fails.
    verdict: Callable[[dict[str, Any]], str | None] = lambda _options: None
    peer_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    received: list[Note] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    test_id: str = ""
    busy_with: str = ""  # a test it runs for someone else
    lose_answers: int = 0  # this many of its first answers never reach the coordinator
    drain_lost: bool = False  # its DrainComplete never reaches the coordinator
    finishes: bool = True  # a sender ends its run at once; False: it sends until told to stop
    answered: dict[str, list[Note]] = field(default_factory=dict)  # by request id, as the runtime keeps them
    out_s: float = 0.0  # the way from the coordinator to it
    back_s: float = 0.0  # the way back
    key: NoteKey | None = None  # with a key, it takes only notes signed with it
    refused: list[str] = field(default_factory=list)  # why each note its guard refused was

    def __post_init__(self) -> None:
        self.guard = NoteGuard(self.key, require=self.key is not None)

    def topics(self, topics: Topics) -> set[str]:
        listened = {topics.everyone, topics.by_id(self.peer_id), topics.by_role(self.role)}
        return listened | ({topics.workers} if self.role.is_worker else set())

    def header(self, correlation_id: str | None = None) -> Header:
        return Header(
            message_id=uuid.uuid4().hex,
            sender_id=self.peer_id,
            sender_name=self.name,
            sender_host="memory",
            sender_role=self.role.value,
            timestamp_ns=time.time_ns() + self.clock_offset_ns,
            correlation_id=correlation_id,
        )

    def received_all(self) -> Note:
        return TestSucceeded(test_id=self.test_id, message="received", header=self.header())

    def deliver(self, note: Note) -> list[Note]:
        """What reaches the coordinator for `note`: a repeat is answered as before, not acted on."""
        if note.header.message_id in self.answered:
            return self.answered[note.header.message_id][:1]
        out = self.answered[note.header.message_id] = self.answer(note)
        if self.lose_answers > 0:
            self.lose_answers -= 1
            return out[1:]  # the answer is lost on the way; its notifications are not
        return out

    def answer(self, note: Note) -> list[Note]:
        """The response, then any notifications, as the daemon would send them."""
        self.received.append(note)
        reply = self.header(note.header.message_id)
        match note:
            case PingRequest():
                now = time.time_ns() + self.clock_offset_ns
                state, test_id = ("running", self.busy_with) if self.busy_with else ("idle", self.test_id)
                pong = PingResponse(
                    coordinator_time_ns=note.coordinator_time_ns, peer_time_ns=now, state=state, test_id=test_id
                )
                return [pong.with_header(reply)]
            case SetRequest():
                self.options |= note.options
            case StartTest():
                self.test_id = note.test_id
            case StartWorker() if self.role == Role.SENDER and not self.finishes:
                return [OkResponse(header=reply)]
            case StopWorker() if self.role == Role.SENDER and not self.finishes:
                return [
                    OkResponse(header=reply),
                    TestSucceeded(test_id=self.test_id, message="sent", header=self.header()),
                ]
            case StartWorker() if self.role == Role.SENDER:
                reason = self.verdict(self.options)
                verdict: Note = (
                    TestSucceeded(test_id=self.test_id, message="sent", header=self.header())
                    if reason is None
                    else TestFailed(test_id=self.test_id, message=reason, header=self.header())
                )
                return [OkResponse(header=reply), verdict]
            case DrainRequest():
                drained: list[Note] = [OkResponse(header=reply)]
                if not self.drain_lost:
                    drained.append(DrainComplete(success=True, header=self.header()))
                return [*drained, self.received_all()] if note.stop else drained
            case StopWorker() if self.role == Role.RECEIVER:
                return [OkResponse(header=reply), self.received_all()]
            case LogRequest():
                uploaded = UploadComplete(test_id=note.test_id, success=True, message="uploaded", header=self.header())
                return [OkResponse(header=reply), uploaded]
        return [OkResponse(header=reply)]


class MemoryBus:
    """What `MaestroClient` uses of `protocol.bus.ControlBus`, delivered in the caller's thread."""

    def __init__(self, peers: list[SimulatedPeer], key: NoteKey | None = None) -> None:
        self.peers = peers
        self.key = key
        self.topics = Topics()
        self.identity = Identity.new("maestro", "memory", Role.COORDINATOR.value)
        self.correlator = Correlator()
        self.url = "memory://"
        self.on_note: Callable[[str, Note], None] | None = None
        self.on_bad_note: Any = None
        self.on_connected: Callable[[], None] | None = None
        self.guard = NoteGuard(None, require=False)  # answers come back unsigned here
        self.test_id = ""  # what the coordinator's notes are sealed for
        self.requests: list[tuple[str, Note]] = []
        self.resent: list[tuple[str, Note]] = []
        self.outages: list[tuple[int, int]] = []
        self._down_until = 0.0  # monotonic
        self._down_total_s = 0.0
        self._held: list[tuple[str, Note]] = []  # sent while the broker was lost

    def request(self, topic: str, note: Note, expect: Any, timeout_s: float) -> tuple[Note, Replies]:
        stamped = self.send_request(topic, note, expect)
        return stamped, self.await_replies(stamped.header.message_id, 0 if expect is not None else timeout_s)

    def send_request(self, topic: str, note: Note, expect: Any) -> Note:
        stamped = note.with_header(
            Header(message_id=uuid.uuid4().hex, sender_id=self.identity.peer_id, timestamp_ns=time.time_ns())
        )
        self.requests.append((topic, stamped))
        self.correlator.expect(stamped.header.message_id, expect)
        self._send(topic, stamped)
        return stamped

    def _send(self, topic: str, stamped: Note) -> None:
        if not self.connected:
            self._held.append((topic, stamped))  # QoS 1: the client sends it once it is back
            return
        for peer in self.peers:
            if topic in peer.topics(self.topics):
                time.sleep(peer.out_s)
                taken = self._carry(stamped, peer, topic)
                if taken is None:
                    continue
                for out in peer.deliver(taken):
                    time.sleep(peer.back_s)
                    answer = self._carry(out, None, self.topics.maestro)
                    if answer is not None and not self.correlator.deliver(answer) and self.on_note is not None:
                        self.on_note(self.topics.notifications, answer)

    def _carry(self, note: Note, to: SimulatedPeer | None, topic: str) -> Note | None:
        """`note` as it arrives: encoded, signed with the bus's key (the coordinator's side), and
        read back through the receiving peer's guard; None when the guard refuses it."""
        packed = encode(note)
        if to is None:
            return decode(packed)
        unsigned, sealed = split(sign(packed, self.key, topic, self.test_id) if self.key is not None else packed)
        taken = decode(unsigned)
        try:
            to.guard.check(taken, unsigned, sealed, topic)
        except RefusedNoteError as refused:
            to.refused.append(refused.reason)
            return None
        return taken

    def await_replies(self, message_id: str, timeout_s: float, finish: bool = True) -> Replies:
        # Every answer that comes is in already (the peers answered in the sender's thread): the
        # wait only passes for one that was lost, or for the broker to come back.
        if not self.connected:
            time.sleep(max(0.0, min(timeout_s, self._down_until - time.monotonic())))
        self._back()
        return self.correlator.wait(message_id, timeout_s, finish)

    def resend(self, topic: str, stamped: Note) -> None:
        """As `ControlBus.resend`: the same message id, stamped anew."""
        again = stamped.with_header(replace(stamped.header, timestamp_ns=time.time_ns()))
        self.resent.append((topic, again))
        self._send(topic, again)

    def lose_broker(self, for_s: float) -> None:
        """The broker is gone for `for_s`: what is sent meanwhile waits for it."""
        self._down_until = time.monotonic() + for_s
        self.outages.append((time.time_ns(), 0))

    def _back(self) -> None:
        if self._held and self.connected:
            held, self._held = self._held, []
            for topic, stamped in held:
                self._send(topic, stamped)

    @property
    def connected(self) -> bool:
        if self._down_until and time.monotonic() >= self._down_until:
            self._settle_outage()
        return not self._down_until

    def _settle_outage(self) -> None:
        lost_ns, _ = self.outages[-1]
        self.outages[-1] = (lost_ns, time.time_ns())
        self._down_total_s += (time.time_ns() - lost_ns) / 1e9
        self._down_until = 0.0

    connections = 1

    def downtime_s(self) -> float:
        current = (time.time_ns() - self.outages[-1][0]) / 1e9 if self._down_until else 0.0
        return self._down_total_s + current

    def close(self) -> None:
        pass


def memory_client(peers: list[SimulatedPeer], key: NoteKey | None = None) -> tuple[MaestroClient, MemoryBus]:
    bus = MemoryBus(peers, key)
    client = MaestroClient(bus)  # type: ignore[arg-type]  # the same surface, in memory
    client.discover(0)
    return client, bus


@dataclass
class MemoryStore:
    """A result store whose figures are given: sent and received, nothing lost."""

    url: str = "memory://data"
    figures: dict[str, Any] = field(
        default_factory=lambda: {
            "sent": 1000,
            "received": 1000,
            "lost": 0,
            "duplicates": 0,
            "send_rate": {"mean": 100.0},
            "receive_rate": {"mean": 100.0},
            "latency_us": {"p50": 1000, "p99": 2000, "max": 3000},
            "latency_samples": 1000,
        }
    )
    stored: list[TestResult] = field(default_factory=list)
    clocks_given: Sequence[PeerEntry] | None = None
    live: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    opened: dict[str, TestRecord] = field(default_factory=dict)  # opening records, by test id
    stop: str | None = None  # a stop asked of it: the answer to every live post from then on

    def summary(
        self, test_id: str, peers: Sequence[PeerEntry] | None = None, events: Sequence[Mapping[str, Any]] = ()
    ) -> TestFigures:
        self.clocks_given = peers
        return TestFigures.from_json(self.figures)

    def store(self, result: TestResult, cases: list[TestResult]) -> None:
        self.stored.append(result)

    def post_live(self, test_id: str, update: LiveUpdate) -> str | None:
        self.live.append((test_id, update.to_json()))
        return self.stop  # as the data server answers once its live page's stop was pressed

    def open(self, test_id: str, record: TestRecord) -> None:
        self.opened[test_id] = record
