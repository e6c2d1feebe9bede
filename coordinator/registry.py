"""The coordinator's view of the peers: who is there, in what role and state, and their clocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from protocol.clock_probe import Exchange
from protocol.codes import Role
from protocol.test_record import ClockEstimate, ClockSampleRow

__all__ = ["ClockSample", "PeerInfo", "PeerRegistry", "PeerState", "estimate_clock"]


class PeerState(StrEnum):
    READY = "ready"
    RUNNING = "running"  # it said, when last PINGed, that it runs a test (`test_id`)
    MISSING = "missing"  # its last will arrived, or it stopped answering


@dataclass(frozen=True)
class ClockSample:
    """A peer's clock against ours, from one exchange: over UDP with four stamps
    (protocol.clock_probe), or a PING through the control broker (the peer's clock against the
    midpoint of our send and receive)."""

    rtt_us: float
    offset_us: float  # peer clock minus coordinator clock
    uncertainty_us: float  # the true offset is within ± this of `offset_us`
    at_us: float = 0.0  # when, on the coordinator's clock (µs since the epoch)
    path: str = "mqtt"  # "udp": direct; "mqtt": through the control broker

    @classmethod
    def of_exchange(cls, exchange: Exchange) -> ClockSample:
        return cls(
            rtt_us=exchange.rtt_ns / 1000,
            offset_us=exchange.offset_ns / 1000,
            uncertainty_us=exchange.uncertainty_ns / 1000,
            at_us=exchange.at_ns / 1000,
            path="udp",
        )

    def record(self) -> ClockEstimate:
        """As test.json keeps it."""
        return ClockEstimate(round(self.offset_us, 1), round(self.uncertainty_us, 1), round(self.rtt_us, 1), self.path)

    def sample_row(self) -> ClockSampleRow:
        """As test.json keeps it among a peer's samples (protocol.clock_correction fits them)."""
        return ClockSampleRow(round(self.at_us), round(self.offset_us, 1), round(self.uncertainty_us, 1), self.path)


def estimate_clock(sent_wall_ns: int, rtt_ns: int, peer_wall_ns: int) -> ClockSample:
    """A PING's sample: the peer read its clock somewhere inside the round trip."""
    midpoint_ns = sent_wall_ns + rtt_ns / 2
    return ClockSample(
        rtt_us=rtt_ns / 1000,
        offset_us=(peer_wall_ns - midpoint_ns) / 1000,
        uncertainty_us=rtt_ns / 2000,
        at_us=midpoint_ns / 1000,
    )


@dataclass
class PeerInfo:
    peer_id: str
    name: str
    host: str
    role: Role
    state: PeerState = PeerState.READY
    version: str = ""
    pid: int = 0
    test_id: str = ""  # the test it was last SET for, as it said when last PINGed
    clock: ClockSample | None = None  # the sample with the smallest uncertainty so far
    bus_rtt_us: float | None = None  # the smallest PING round trip through the control broker
    clock_endpoints: tuple[tuple[str, int], ...] = ()  # where it answers clock probes (UDP)
    signed_only: bool | None = None  # whether it takes only signed notes, as it said when last PINGed

    def answers_probes_at(self, port: int, hosts: list[str]) -> None:
        self.clock_endpoints = tuple((host, port) for host in hosts) if port else ()

    def record_clock(self, sample: ClockSample) -> None:
        if sample.path == "mqtt" and (self.bus_rtt_us is None or sample.rtt_us < self.bus_rtt_us):
            self.bus_rtt_us = sample.rtt_us
        if self.clock is None or sample.uncertainty_us < self.clock.uncertainty_us:
            self.clock = sample

    def correction_ns(self) -> int:
        """What to add to a coordinator time to get this peer's: its measured clock offset, or 0
        when that is within the measurement's uncertainty. A round trip through a broker is
        rarely symmetric (a stock Mosquitto's Nagle delay on one leg is ~40 ms), and applying
        such an estimate to clocks that agree (one host, or NTP) would move a start by up to half
        the round trip."""
        c = self.clock
        if c is None or abs(c.offset_us) <= c.uncertainty_us:
            return 0
        return int(c.offset_us * 1000)

    def clock_record(self) -> ClockEstimate | None:
        """The clock as test.json keeps it."""
        return None if self.clock is None else self.clock.record()

    @property
    def label(self) -> str:
        return f"{self.name}@{self.host} ({self.role.value})"


class PeerRegistry:
    """Thread-safe: the MQTT thread updates it, the test script's thread reads and waits on it."""

    def __init__(self) -> None:
        self._peers: dict[str, PeerInfo] = {}
        self._lost: dict[str, str] = {}  # peer id -> why it was suspected, in the order they were lost
        self._cond = threading.Condition()

    def upsert(self, peer_id: str, name: str, host: str, role: str) -> PeerInfo:
        with self._cond:
            peer = self._peers.get(peer_id)
            if peer is None:
                peer = PeerInfo(peer_id, name, host, _role(role))
                self._peers[peer_id] = peer
            else:
                peer.role = _role(role)
                if peer.state == PeerState.MISSING:
                    peer.state = PeerState.READY
            self._cond.notify_all()
            return peer

    def mark_missing(self, peer_id: str) -> PeerInfo | None:
        with self._cond:
            peer = self._peers.get(peer_id)
            if peer is not None:
                peer.state = PeerState.MISSING
            self._cond.notify_all()
            return peer

    def mark_lost(self, peer_id: str, why: str) -> PeerInfo | None:
        """Lost for sure (suspected for `why`, then silent to a PING): missing, and lost for this
        coordinator's life even if it comes back, since what it was running is gone. The one
        record of lost peers (coordinator/bus/liveness.py decides; the phases read it)."""
        with self._cond:
            peer = self._peers.get(peer_id)
            if peer is not None:
                peer.state = PeerState.MISSING
                self._lost.setdefault(peer_id, why)
            self._cond.notify_all()
            return peer

    def lost(self) -> list[PeerInfo]:
        """The peers lost for sure, oldest first."""
        with self._cond:
            return [self._peers[peer_id] for peer_id in self._lost]

    def lost_why(self, peer_id: str) -> str | None:
        """What made a lost peer a suspect; None for one not lost."""
        with self._cond:
            return self._lost.get(peer_id)

    def is_missing(self, peer_id: str) -> bool:
        with self._cond:
            peer = self._peers.get(peer_id)
            return peer is not None and peer.state == PeerState.MISSING

    def get(self, peer_id: str) -> PeerInfo | None:
        with self._cond:
            return self._peers.get(peer_id)

    def live(self, where: Callable[[PeerInfo], bool] = lambda _p: True) -> list[PeerInfo]:
        with self._cond:
            return sorted(
                (p for p in self._peers.values() if p.state != PeerState.MISSING and where(p)),
                key=lambda p: (p.role.value, p.host, p.name),
            )

    def wait_until(self, ready: Callable[[list[PeerInfo]], bool], timeout_s: float) -> list[PeerInfo]:
        """Wait until `ready(live peers)` holds; returns the live peers either way."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not ready(self.live()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self.live()


def _role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        return Role.OTHER
