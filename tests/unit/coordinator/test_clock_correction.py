"""Clock offsets: a start is moved by a peer's offset only when the offset is known to be real."""

from __future__ import annotations

from coordinator.registry import PeerInfo, estimate_clock
from protocol.codes import Role


def _peer_with(offset_us: float, rtt_us: float) -> PeerInfo:
    peer = PeerInfo("p", "p", "h", Role.SENDER)
    sent_ns = 1_000_000_000_000
    # The peer read its clock at the midpoint of the round trip, `offset_us` ahead of ours.
    peer.record_clock(estimate_clock(sent_ns, int(rtt_us * 1000), int(sent_ns + rtt_us * 500 + offset_us * 1000)))
    return peer


def test_an_offset_larger_than_its_uncertainty_is_applied() -> None:
    assert _peer_with(offset_us=50_000, rtt_us=2_000).correction_ns() == 50_000_000
    assert _peer_with(offset_us=-3_000, rtt_us=2_000).correction_ns() == -3_000_000


def test_an_offset_within_its_uncertainty_is_not_applied() -> None:
    # Nagle on one leg: a 45 ms round trip makes a 20 ms "offset" between clocks that agree.
    assert _peer_with(offset_us=20_000, rtt_us=45_000).correction_ns() == 0
    assert PeerInfo("p", "p", "h", Role.SENDER).correction_ns() == 0  # never PINGed
