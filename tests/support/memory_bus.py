"""A control bus in memory, with simulated peers that answer as the daemons do: a phase or a
series runs against it with no broker, no daemon and no data server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.client import MaestroClient
from coordinator.results import TestResult
from protocol.bus import Identity
from protocol.codes import Role
from protocol.correlation import Correlator, Replies
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
    answered: dict[str, list[Note]] = field(default_factory=dict)  # by request id, as the runtime keeps them

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

    def __init__(self, peers: list[SimulatedPeer]) -> None:
        self.peers = peers
        self.topics = Topics()
        self.identity = Identity.new("maestro", "memory", Role.COORDINATOR.value)
        self.correlator = Correlator()
        self.url = "memory://"
        self.on_note: Callable[[str, Note], None] | None = None
        self.on_bad_note: Any = None
        self.on_connected: Callable[[], None] | None = None
        self.requests: list[tuple[str, Note]] = []
        self.resent: list[tuple[str, Note]] = []

    def request(self, topic: str, note: Note, expect: Any, timeout_s: float) -> tuple[Note, Replies]:
        stamped = self.send_request(topic, note, expect)
        return stamped, self.await_replies(stamped.header.message_id, 0 if expect is not None else timeout_s)

    def send_request(self, topic: str, note: Note, expect: Any) -> Note:
        stamped = note.with_header(Header(message_id=uuid.uuid4().hex, sender_id=self.identity.peer_id))
        self.requests.append((topic, stamped))
        self.correlator.expect(stamped.header.message_id, expect)
        self._deliver(topic, stamped)
        return stamped

    def _deliver(self, topic: str, stamped: Note) -> None:
        for peer in self.peers:
            if topic in peer.topics(self.topics):
                for out in peer.deliver(stamped):
                    if not self.correlator.deliver(out) and self.on_note is not None:
                        self.on_note(self.topics.notifications, out)

    def await_replies(self, message_id: str, timeout_s: float, finish: bool = True) -> Replies:
        # Every answer that comes is in already (the peers answered in the sender's thread): the
        # wait only passes for one that was lost.
        return self.correlator.wait(message_id, timeout_s, finish)

    def resend(self, topic: str, stamped: Note) -> None:
        self.resent.append((topic, stamped))
        self._deliver(topic, stamped)

    connected = True
    connections = 1
    outages: list[tuple[int, int]] = []  # noqa: RUF012 - never changed: memory has no broker to lose

    def downtime_s(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


def memory_client(peers: list[SimulatedPeer]) -> tuple[MaestroClient, MemoryBus]:
    bus = MemoryBus(peers)
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
        }
    )
    stored: list[TestResult] = field(default_factory=list)
    clocks_given: list[dict[str, Any]] | None = None
    live: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def summary(self, test_id: str, peers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        self.clocks_given = peers
        return dict(self.figures)

    def store(self, result: TestResult, cases: list[TestResult]) -> None:
        self.stored.append(result)

    def post_live(self, test_id: str, update: dict[str, Any]) -> None:
        self.live.append((test_id, update))
