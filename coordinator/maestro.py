"""`Maestro`: the coordinator's client for test scripts.

    with Maestro.connect("mqtt://lab-broker:1883") as maestro:
        maestro.assign_roles(senders=1, receivers=1)
        maestro.set({"rate_per_s": 1000}, to=Role.SENDER)

Every request names the peers that must answer (from the registry), and waits for exactly
those: a reply from each, the loss of a peer (its last will), or the timeout.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from coordinator.local import LocalCluster
from coordinator.registry import PeerInfo, PeerRegistry, PeerState, estimate_clock
from protocol.broker_url import BrokerUrl, default_broker_url
from protocol.bus import ControlBus, Identity
from protocol.codec import ProtocolError
from protocol.codes import NoteType, Role
from protocol.correlation import Replies
from protocol.notes import (
    AbnormalDisconnect,
    AgentSource,
    Halt,
    InternalErrorResponse,
    Note,
    OkResponse,
    PeerOnline,
    PingRequest,
    PingResponse,
    ProtocolErrorResponse,
    RoleAssign,
    RoleUnassign,
    SetRequest,
    StatsReport,
    StatsRequest,
)
from protocol.topics import DEFAULT_PREFIX, Topics

if TYPE_CHECKING:
    from coordinator.definitions import TestDefinition
    from coordinator.executor import TestResult

__all__ = ["Maestro", "MaestroError", "PeerRequestError", "Target"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
# Live statistics kept for a script to read: about an hour of one worker's, once a second.
_STATS_KEPT = 4096


class MaestroError(Exception):
    pass


class PeerRequestError(MaestroError):
    """Some expected peers did not comply; the message names each one and why."""

    def __init__(self, message: str, replies: Replies) -> None:
        super().__init__(message)
        self.replies = replies


@dataclass(frozen=True)
class Target:
    """Where a request goes and which live peers must answer it."""

    topic: str
    selects: Callable[[PeerInfo], bool]
    label: str


class Maestro:
    def __init__(self, bus: ControlBus, data_server: str | None = None) -> None:
        self.bus = bus
        # Where peers upload results: given, else $MAESTRO_DATA_SERVER, else one started here.
        self.data_server = data_server or os.environ.get("MAESTRO_DATA_SERVER") or None
        self._local: LocalCluster | None = None
        self.local_root: Path | None = None  # the data server's folder, when it runs on this machine
        self.local_data_root = Path("results")  # where to start one when none is given
        self.topics = bus.topics
        self.registry = PeerRegistry()
        self.lost: list[PeerInfo] = []  # peers whose last will arrived, oldest first
        # Unbounded on purpose: a notification waits here until a wait_for takes it, and none may
        # be pushed out by others. Live statistics (many, lossy by design) go elsewhere.
        self._notifications: deque[Note] = deque()
        self.live_stats: deque[StatsReport] = deque(maxlen=_STATS_KEPT)
        self._cond = threading.Condition()
        bus.on_note = self._on_note
        bus.on_bad_note = self._on_bad_note

    # --- connection ---------------------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        url: str | None = None,
        *,
        topic_prefix: str = DEFAULT_PREFIX,
        discover_s: float = 1.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        data_server: str | None = None,
    ) -> Maestro:
        """Connect to the control broker and discover the peers (PING, `discover_s` window)."""
        host = socket.gethostname()
        identity = Identity.new("maestro", host, Role.COORDINATOR.value)
        topics = Topics(topic_prefix)
        # The coordinator sets no last will: peers do not wait on it.
        bus = ControlBus(BrokerUrl.parse(url or default_broker_url()), identity, topics, last_will=False)
        bus.subscribe([topics.maestro, topics.notifications])
        bus.connect(timeout_s)
        maestro = cls(bus, data_server)
        if discover_s > 0:
            maestro.discover(discover_s)
        return maestro

    @classmethod
    @contextmanager
    def local(
        cls,
        workers: int = 2,
        *,
        inspectors: int = 0,
        agents: tuple[str, ...] = (),
        data: Path = Path("results"),
        broker: str | None = None,
        topic_prefix: str = DEFAULT_PREFIX,
    ) -> Iterator[Maestro]:
        """Everything on this machine: an embedded control broker (unless `broker`), the data
        server over `data`, `workers` role-less worker daemons, `inspectors` inspector daemons and
        an agent daemon per name in `agents`; all stopped on leaving.

            with Maestro.local(workers=2) as maestro:
                print(maestro.run(FixedRateTest(send_url="amqp://127.0.0.1/q", rate=100)))
        """
        root = data.resolve()
        run_dir = root / ".local" / time.strftime("%Y%m%d-%H%M%S")
        with LocalCluster(run_dir, topic_prefix=topic_prefix, broker_url=broker or "") as cluster:
            server = cluster.data_server(root)
            tag = uuid.uuid4().hex[:4]
            names = [("maestro-worker", f"worker-{n}-{tag}") for n in range(1, workers + 1)]
            names += [("maestro-inspector", f"inspector-{n}-{tag}") for n in range(1, inspectors + 1)]
            names += [("maestro-agent", name) for name in agents]
            for command, name in names:
                cluster.daemon(command, name, run_dir / "peers" / name)
            with cls.connect(cluster.broker_url, topic_prefix=topic_prefix, discover_s=0, data_server=server) as m:
                m.local_root = root
                m.wait_for_peers(len(names), timeout_s=30)
                yield m

    def close(self) -> None:
        self.bus.close()
        if self._local is not None:
            self._local.close()
            self._local = None

    # --- tests --------------------------------------------------------------------------------

    def run(self, test: TestDefinition, *, test_id: str | None = None, progress: bool = True) -> TestResult:
        """Run a test to its end and return its outcome and figures; the files are on the data
        server under the test id whatever happened."""
        from coordinator.executor import run_test  # noqa: PLC0415 - the executor builds on this module

        return run_test(self, test, self._data_server(), test_id, progress)

    def _data_server(self) -> str:
        if self.data_server is None:
            root = self.local_data_root.resolve()
            self._local = LocalCluster(root / ".logs", broker_url=str(self.bus.url))
            self.data_server = self._local.data_server(root)
            self.local_root = root
            log.warning(
                "no data server given (data_server= or $MAESTRO_DATA_SERVER): started one at %s over %s; "
                "peers on other hosts cannot reach it",
                self.data_server,
                root,
            )
        return self.data_server

    def __enter__(self) -> Maestro:
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.close()

    # --- targets ------------------------------------------------------------------------------

    def everyone(self) -> Target:
        return Target(self.topics.everyone, lambda _p: True, "every peer")

    def workers(self) -> Target:
        return Target(self.topics.workers, lambda p: p.role.is_worker, "every worker")

    def role(self, role: Role) -> Target:
        return Target(self.topics.by_role(role), lambda p: p.role == role, f"every {role.value}")

    def peer(self, peer: PeerInfo) -> Target:
        return Target(self.topics.by_id(peer.peer_id), lambda p: p.peer_id == peer.peer_id, peer.label)

    def _target(self, to: Target | Role | PeerInfo | None) -> Target:
        if to is None:
            return self.everyone()
        if isinstance(to, Role):
            return self.role(to)
        if isinstance(to, PeerInfo):
            return self.peer(to)
        return to

    # --- peers --------------------------------------------------------------------------------

    @property
    def peers(self) -> list[PeerInfo]:
        return self.registry.live()

    def find(self, name: str, host: str | None = None) -> PeerInfo:
        matches = [p for p in self.peers if p.name == name and (host is None or p.host == host)]
        if len(matches) != 1:
            where = f"{name}@{host}" if host else name
            raise MaestroError(f"{'no' if not matches else 'more than one'} live peer named {where}")
        return matches[0]

    def discover(self, window_s: float = 1.0) -> list[PeerInfo]:
        """PING everyone and list whoever answers within `window_s`.

        The one wait without a known set of peers: discovery is how we learn the set.
        """
        self._ping(self.everyone().topic, expect=None, timeout_s=window_s)
        return self.peers

    def ping(
        self, to: Target | Role | PeerInfo | None = None, samples: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> list[PeerInfo]:
        """Measure round trip and clock offset of known peers; keeps the best sample of each."""
        target = self._target(to)
        for _ in range(samples):
            replies = self._ping(target.topic, self._expected(target), timeout_s)
            self._raise_unless_complete(PingRequest, target, replies, timeout_s)
        return self.registry.live(target.selects)

    def _ping(self, topic: str, expect: Iterable[str] | None, timeout_s: float) -> Replies:
        sent_wall_ns = time.time_ns()
        sent_perf_ns = time.perf_counter_ns()
        _, replies = self.bus.request(topic, PingRequest(coordinator_time_ns=sent_wall_ns), expect, timeout_s)
        for peer_id, note in replies.replies.items():
            if not isinstance(note, PingResponse):
                continue
            h = note.header
            peer = self.registry.upsert(peer_id, h.sender_name, h.sender_host, h.sender_role)
            peer.version, peer.pid = note.version, note.pid
            rtt_ns = replies.received_ns[peer_id] - sent_perf_ns
            peer.record_clock(estimate_clock(sent_wall_ns, rtt_ns, note.peer_time_ns))
        return replies

    def wait_for_peers(
        self, count: int = 1, role: Role | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> list[PeerInfo]:
        """Wait until at least `count` live peers (of `role`) are known; raises on timeout."""

        def chosen(peers: list[PeerInfo]) -> list[PeerInfo]:
            return [p for p in peers if role is None or p.role == role]

        peers = chosen(self.registry.wait_until(lambda ps: len(chosen(ps)) >= count, timeout_s))
        if len(peers) < count:
            what = f"{role.value} peers" if role else "peers"
            raise MaestroError(f"waited {timeout_s:g} s for {count} {what}, found {len(peers)}")
        return peers

    def assign_roles(
        self, senders: int = 0, receivers: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> dict[Role, list[PeerInfo]]:
        """Give role-less workers the sender and receiver roles (receivers first)."""
        idle = self.registry.live(lambda p: p.role == Role.OTHER)
        if len(idle) < senders + receivers:
            raise MaestroError(
                f"{senders} senders and {receivers} receivers asked, but only {len(idle)} role-less workers"
            )
        wanted = [Role.RECEIVER] * receivers + [Role.SENDER] * senders
        assigned: dict[Role, list[PeerInfo]] = {Role.SENDER: [], Role.RECEIVER: []}
        for peer, role in zip(idle, wanted, strict=False):
            self.request(RoleAssign(role=role.value), to=peer, timeout_s=timeout_s)
            peer.role = role
            assigned[role].append(peer)
        return assigned

    def unassign_roles(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        workers = self.registry.live(lambda p: p.role in (Role.SENDER, Role.RECEIVER))
        for peer in workers:
            self.request(RoleUnassign(), to=peer, timeout_s=timeout_s)
            peer.role = Role.OTHER

    # --- requests -----------------------------------------------------------------------------

    def _expected(self, target: Target) -> set[str]:
        return {p.peer_id for p in self.registry.live(target.selects)}

    def request(
        self, note: Note, to: Target | Role | PeerInfo | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Replies:
        """Send `note` and wait for every live peer `to` selects; raises PeerRequestError
        unless each of them answered OK (or the command's own response)."""
        target = self._target(to)
        expected = self._expected(target)
        if not expected:
            raise MaestroError(f"{type(note).__name__}: no live peer is {target.label}")
        _, replies = self.bus.request(target.topic, note, expected, timeout_s)
        self._raise_unless_complete(type(note), target, replies, timeout_s)
        return replies

    def set(
        self,
        options: Mapping[str, Any],
        to: Target | Role | PeerInfo | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> Replies:
        return self.request(SetRequest(options=dict(options)), to, timeout_s)

    def stats(self, to: Target | Role | PeerInfo | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Replies:
        return self.request(StatsRequest(), to, timeout_s)

    def agent_source(
        self, url: str, branch: str = "", to: Target | Role | PeerInfo | None = Role.AGENT, timeout_s: float = 120.0
    ) -> Replies:
        """Have agents fetch their handlers from `url` (a git repository, at `branch` or tag, or a
        directory on their host); each answers once it has them, or says why it will not."""
        return self.request(AgentSource(url=url, branch=branch), to, timeout_s)

    def halt(self, to: Target | Role | PeerInfo | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Replies:
        target = self._target(to)
        replies = self.request(Halt(), target, timeout_s)
        for peer_id in replies.replies:
            # A halted peer disconnects cleanly (no last will): it is gone, not lost.
            peer = self.registry.mark_missing(peer_id)
            if peer is not None:
                log.info("halted %s", peer.label)
        return replies

    def _raise_unless_complete(
        self, request: type[Note], target: Target, replies: Replies, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        """A reply complies when it is OK or the request's own response (PING, STATS, GET)."""
        faults = []
        for peer_id, note in sorted(replies.replies.items()):
            label = self._label(peer_id)
            if isinstance(note, InternalErrorResponse):
                faults.append(f"{label} refused: {note.message} (code {note.code})")
            elif isinstance(note, ProtocolErrorResponse):
                faults.append(f"{label} could not read it: {note.reason}")
            elif not isinstance(note, OkResponse) and note.COMMAND != request.COMMAND:
                faults.append(f"{label} answered {type(note).__name__}")
        faults += [f"{self._label(p)} was lost (abnormal disconnect)" for p in sorted(replies.lost)]
        faults += [f"{self._label(p)} did not answer within {timeout_s:g} s" for p in sorted(replies.missing)]
        if faults:
            raise PeerRequestError(f"{request.__name__} to {target.label}: " + "; ".join(faults), replies)

    def _label(self, peer_id: str) -> str:
        peer = self.registry.get(peer_id)
        return peer.label if peer else peer_id

    # --- notifications ------------------------------------------------------------------------

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
        got: dict[str, Note] = {}
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for note in list(self._notifications):
                    sender = note.header.sender_id
                    if sender in waiting and sender not in got and isinstance(note, kinds):
                        got[sender] = note
                        self._notifications.remove(note)
                pending = waiting - set(got)
                if not pending:
                    return got
                gone = [p for p in pending if (info := self.registry.get(p)) and info.state == PeerState.MISSING]
                if gone:
                    raise MaestroError("lost while waiting: " + ", ".join(self._label(p) for p in sorted(gone)))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = ", ".join(self._label(p) for p in sorted(pending))
                    raise MaestroError(f"no {'/'.join(k.__name__ for k in kinds)} from {names} within {timeout_s:g} s")
                self._cond.wait(remaining)

    def next_notification(
        self, kinds: tuple[type[Note], ...], peer_ids: Collection[str], timeout_s: float, test_id: str | None = None
    ) -> Note | None:
        """Take the oldest notification of `kinds` from one of `peer_ids`, and of test `test_id`
        when given (one of those kinds from an earlier test, late, is dropped: a phase of a series
        must not end on its predecessor's verdict); None after `timeout_s` (or at once when a peer
        among them is lost: check `lost`)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for note in list(self._notifications):
                    if note.header.sender_id not in peer_ids or not isinstance(note, kinds):
                        continue
                    self._notifications.remove(note)
                    if test_id is not None and getattr(note, "test_id", test_id) != test_id:
                        log.info("dropped a late %s of test %s", type(note).__name__, getattr(note, "test_id", ""))
                        continue
                    return note
                if self.lost_among(peer_ids):
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def lost_among(self, peer_ids: Collection[str]) -> list[PeerInfo]:
        return [p for p in self.lost if p.peer_id in peer_ids]

    # --- incoming (MQTT thread) -----------------------------------------------------------------

    def _on_note(self, topic: str, note: Note) -> None:
        h = note.header
        if h.sender_id == self.bus.identity.peer_id:
            return
        match note:
            case AbnormalDisconnect():
                peer = self.registry.mark_missing(h.sender_id) or PeerInfo(
                    h.sender_id, h.sender_name, h.sender_host, Role.OTHER, PeerState.MISSING
                )
                self.lost.append(peer)
                self.bus.correlator.peer_lost(h.sender_id)
                log.error("peer lost: %s (abnormal disconnect)", peer.label)
            case PeerOnline():
                self.registry.upsert(h.sender_id, h.sender_name, h.sender_host, h.sender_role).version = note.version
            case StatsReport():
                self.live_stats.append(note)  # read by scripts; nobody waits on it
                return
            case _ if note.TYPE == NoteType.NOTIFICATION:
                pass
            case _:
                log.debug("late or stray %s from %s on %s", type(note).__name__, h.sender_name, topic)
                return
        with self._cond:
            self._notifications.append(note)
            self._cond.notify_all()

    def _on_bad_note(self, topic: str, error: ProtocolError) -> None:
        log.warning("unreadable note on %s: %s", topic, error.reason)
