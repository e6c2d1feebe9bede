"""`MaestroClient`: what a script does with the peers: find and discover them, measure their
clocks, give workers roles, SET, STATS, HALT. Requests and notifications are `PeerBus`'s;
`Maestro` (in `coordinator.running.maestro`) adds running tests on top.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from coordinator.bus.addressing import Target
from coordinator.bus.asking import ping as ping_peers
from coordinator.bus.peer_bus import DEFAULT_TIMEOUT_S, PeerBus
from coordinator.errors import MaestroError
from coordinator.registry import ClockSample, PeerInfo, PeerState
from protocol.clock_probe import ClockProber
from protocol.codes import Activity, Role
from protocol.correlation import Replies
from protocol.notes import (
    AgentSource,
    Halt,
    PingRequest,
    PingResponse,
    ProtocolErrorResponse,
    RoleAssign,
    RoleUnassign,
    SetRequest,
    StatsRequest,
)

__all__ = ["DEFAULT_TIMEOUT_S", "MaestroClient", "Target"]

log = logging.getLogger(__name__)

# PINGs through the control broker for a peer that does not answer clock probes: the best of these.
_BROKER_SAMPLES = 3


class MaestroClient(PeerBus):
    _prober: ClockProber | None = None  # made at the first direct measurement

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
        (replies,) = self._ping([(self.everyone().topic, None)], window_s)
        for note in replies.replies.values():
            if isinstance(note, ProtocolErrorResponse):
                # A keyed peer and an unkeyed coordinator, most often: say so, or it looks absent.
                log.warning("peer %s refused the PING: %s", note.header.sender_name, note.reason)
        return self.peers

    def ping(
        self, to: Target | Role | PeerInfo | None = None, samples: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> list[PeerInfo]:
        """Measure round trip and clock offset of known peers; keeps the best sample of each."""
        target = self.targets.of(to)
        for _ in range(samples):
            (replies,) = self._ping([(target.topic, self._expected(target))], timeout_s)
            self._raise_unless_complete(PingRequest, target, replies, timeout_s)
        return self.registry.live(target.selects)

    def ping_all(self, peers: list[PeerInfo], samples: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """`ping` for exactly `peers`, over as few topics as reach them: one round trip a sample."""
        targets = self.targets.covering(peers, self.registry.live())
        for _ in range(samples):
            sent = [(t.topic, self._expected(t)) for t in targets]
            for target, replies in zip(targets, self._ping(sent, timeout_s), strict=True):
                self._raise_unless_complete(PingRequest, target, replies, timeout_s)

    def _ping(self, sends: Sequence[tuple[str, Iterable[str] | None]], timeout_s: float) -> list[Replies]:
        answered, pongs = ping_peers(self.bus, sends, timeout_s)
        for pong in pongs:
            self._record_pong(pong.note, pong.clock)
        return answered

    def measure_clocks(self, peers: list[PeerInfo], direct_only: bool = False) -> None:
        """Each peer's clock against ours, kept as its `clock`: over UDP where it answers probes
        (protocol.clock_probe: four stamps, the best of a burst), else by PINGs through the
        control broker, whose round trip a stock broker's Nagle delay makes ~40 ms and lopsided.
        `direct_only`: UDP alone, nothing through the broker (while load runs)."""
        if not direct_only:
            self.ping_all(peers)  # state, where each answers probes, the control plane's round trip
        measured = self._probe(peers)
        rest = [p for p in peers if p.peer_id not in measured]
        if rest and not direct_only:
            self.ping_all(rest, samples=_BROKER_SAMPLES - 1)

    def _probe(self, peers: list[PeerInfo]) -> set[str]:
        """The direct measurement, for the peers that advertise a clock port; whom it reached."""
        endpoints = {p.peer_id: [(host, port) for host, port in p.clock_endpoints] for p in peers}
        if not any(endpoints.values()):
            return set()
        if self._prober is None:
            self._prober = ClockProber(self.bus.key)
        exchanges = self._prober.measure(endpoints)
        for peer in peers:
            if (exchange := exchanges.get(peer.peer_id)) is not None:
                peer.record_clock(ClockSample.of_exchange(exchange))
        return set(exchanges)

    def close(self) -> None:
        if self._prober is not None:
            self._prober.close()
        super().close()

    def _record_pong(self, note: PingResponse, clock: ClockSample) -> None:
        h = note.header
        peer = self.registry.upsert(h.sender_id, h.sender_name, h.sender_host, h.sender_role)
        peer.version, peer.pid = note.version, note.pid
        peer.answers_probes_at(note.clock_port, note.clock_hosts)
        # A peer busy with a test (another coordinator's, or one left running) says so.
        peer.state = PeerState.RUNNING if note.state == Activity.RUNNING else PeerState.READY
        peer.test_id = note.test_id
        peer.signed_only = note.signed_only
        peer.record_clock(clock)

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
        target = self.targets.of(to)
        replies = self.request(Halt(), target, timeout_s)
        for peer_id in replies.replies:
            # A halted peer disconnects cleanly (no last will): it is gone, not lost.
            peer = self.registry.mark_missing(peer_id)
            if peer is not None:
                log.info("halted %s", peer.label)
        return replies
