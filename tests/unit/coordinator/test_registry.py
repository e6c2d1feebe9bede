from __future__ import annotations

import threading

from coordinator.cli.main import format_peers, nagle_warning, unkeyed_warning
from coordinator.registry import ClockSample, PeerRegistry, PeerState, estimate_clock
from protocol.codes import Role


def test_clock_offset_is_measured_against_the_midpoint_of_the_round_trip() -> None:
    # Sent at t=1.000 s, answered 2 ms later; the peer's clock read 1.006 s, so at the
    # midpoint (1.001 s) it was 5 ms ahead, give or take half the round trip.
    sample = estimate_clock(sent_wall_ns=1_000_000_000, rtt_ns=2_000_000, peer_wall_ns=1_006_000_000)
    assert sample.rtt_us == 2000.0
    assert sample.offset_us == 5000.0
    assert sample.uncertainty_us == 1000.0


def test_a_peer_behind_has_a_negative_offset() -> None:
    sample = estimate_clock(sent_wall_ns=10_000_000, rtt_ns=400_000, peer_wall_ns=9_000_000)
    assert sample.offset_us == -1200.0


def test_the_registry_keeps_the_tightest_clock_sample() -> None:
    peer = PeerRegistry().upsert("id1", "w1", "h", "sender")
    peer.record_clock(ClockSample(rtt_us=900, offset_us=50, uncertainty_us=450))
    peer.record_clock(ClockSample(rtt_us=300, offset_us=10, uncertainty_us=150))
    peer.record_clock(ClockSample(rtt_us=600, offset_us=-70, uncertainty_us=300))
    assert peer.clock == ClockSample(rtt_us=300, offset_us=10, uncertainty_us=150)
    # The smallest round trip through the broker is kept apart: `maestro peers` shows it.
    assert peer.bus_rtt_us == 300
    # A direct sample, however its round trip compares, wins on its uncertainty.
    direct = ClockSample(rtt_us=80, offset_us=3, uncertainty_us=41, at_us=5, path="udp")
    peer.record_clock(direct)
    assert peer.clock == direct and peer.bus_rtt_us == 300


def test_missing_peers_are_not_live_until_they_come_back() -> None:
    registry = PeerRegistry()
    registry.upsert("a", "w1", "h", "sender")
    registry.upsert("b", "w2", "h", "nonsense-role")
    registry.mark_missing("a")
    assert [p.peer_id for p in registry.live()] == ["b"]
    assert registry.get("b") is not None and registry.get("b").role == Role.OTHER  # type: ignore[union-attr]
    registry.upsert("a", "w1", "h", "sender")
    assert registry.get("a").state == PeerState.READY  # type: ignore[union-attr]


def test_a_lost_peer_stays_lost_when_it_comes_back_and_keeps_its_first_reason() -> None:
    registry = PeerRegistry()
    for peer_id in ("a", "b", "c"):
        registry.upsert(peer_id, f"w-{peer_id}", "h", "sender")
    registry.mark_missing("c")  # a clean exit: missing, not lost
    registry.mark_lost("b", "its last will arrived")
    registry.mark_lost("a", "silent since the control broker came back")
    assert [p.peer_id for p in registry.lost()] == ["b", "a"]
    assert [p.peer_id for p in registry.live()] == []
    # Back on the bus: live again, but what it ran is gone, so it is still lost, for its first reason.
    registry.upsert("b", "w-b", "h", "sender")
    registry.mark_lost("b", "a second will")
    registry.upsert("b", "w-b", "h", "sender")
    assert [p.peer_id for p in registry.live()] == ["b"]
    assert [p.peer_id for p in registry.lost()] == ["b", "a"]
    assert registry.lost_why("b") == "its last will arrived"
    assert registry.lost_why("c") is None and registry.lost_why("nobody") is None
    assert registry.mark_lost("nobody", "why") is None and registry.lost() == [registry.get("b"), registry.get("a")]


def test_wait_until_wakes_on_a_new_peer() -> None:
    registry = PeerRegistry()
    threading.Timer(0.05, registry.upsert, ["a", "w1", "h", "receiver"]).start()
    peers = registry.wait_until(lambda ps: len(ps) == 1, timeout_s=10)
    assert [p.name for p in peers] == ["w1"]


def test_peer_table() -> None:
    registry = PeerRegistry()
    peer = registry.upsert("0123abcd", "w1", "node1", "sender")
    peer.version, peer.pid = "0.1.0", 4242
    peer.record_clock(ClockSample(rtt_us=1500, offset_us=-250, uncertainty_us=750))
    registry.upsert("99", "i1", "node2", "inspector")
    lines = format_peers(registry.live()).splitlines()
    assert lines[0].split() == [
        "NAME",
        "ROLE",
        "HOST",
        "STATE",
        "VERSION",
        "PID",
        "BROKER",
        "RTT",
        "ms",
        "CLOCK",
        "OFFSET",
        "ms",
        "KEY",
        "ID",
    ]
    assert lines[1].split() == ["i1", "inspector", "node2", "ready", "-", "-", "-", "-", "-", "99"]
    assert lines[2].split() == [
        "w1",
        "sender",
        "node1",
        "ready",
        "0.1.0",
        "4242",
        "1.50",
        "-0.250",
        "±0.750",
        "mqtt",
        "-",
        "0123abcd",
    ]
    # Measured directly, the clock keeps the broker's round trip beside it.
    peer.record_clock(ClockSample(rtt_us=30, offset_us=2, uncertainty_us=16, path="udp"))
    assert format_peers(registry.live()).splitlines()[2].split()[6:10] == ["1.50", "+0.002", "±0.016", "udp"]


def test_peers_that_take_unsigned_notes_are_marked_and_named() -> None:
    registry = PeerRegistry()
    registry.upsert("k", "keyed", "h", "sender").signed_only = True
    registry.upsert("u", "open", "h", "receiver").signed_only = False
    rows = {line.split()[0]: line.split()[-2] for line in format_peers(registry.live()).splitlines()[1:]}
    assert rows == {"keyed": "signed", "open": "NONE"}
    warning = unkeyed_warning(registry.live())
    assert warning is not None and "open" in warning and "keyed" not in warning and "maestro keygen" in warning
    registry.get("u").signed_only = True  # type: ignore[union-attr]
    assert unkeyed_warning(registry.live()) is None


def test_round_trips_near_40_ms_through_the_broker_are_named_nagles() -> None:
    registry = PeerRegistry()
    for n, rtt_us in enumerate((42_368, 44_548, 43_100)):
        registry.upsert(f"p{n}", f"w{n}", "h", "sender").record_clock(ClockSample(rtt_us, 0, rtt_us / 2))
    warning = nagle_warning(registry.live())
    assert warning is not None and "3 of 3 round trips" in warning and "set_tcp_nodelay true" in warning
    tuned = PeerRegistry()
    tuned.upsert("p", "w", "h", "sender").record_clock(ClockSample(800, 0, 400))
    assert nagle_warning(tuned.live()) is None
