"""Coordinator and daemons over the real Mosquitto on 127.0.0.1:1883."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import msgpack
import pytest
from support.processes import BIN, Daemons
from support.raw_mqtt import RawClient

from coordinator import Maestro, MaestroError, PeerRequestError
from protocol.codes import PROTOCOL_VERSION, Role
from protocol.notes import (
    GetRequest,
    GetResponse,
    ProtocolErrorResponse,
    TestSucceeded,
)

pytestmark = pytest.mark.mosquitto


def start_cluster(daemons: Daemons, maestro: Maestro) -> None:
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-inspector", "i1")
    daemons.start("maestro-agent", "a1")
    maestro.wait_for_peers(4, timeout_s=20)


def options_of(maestro: Maestro, name: str) -> dict[str, object]:
    replies = maestro.request(GetRequest(what="options"), to=maestro.find(name))
    (response,) = replies.replies.values()
    assert isinstance(response, GetResponse)
    assert isinstance(response.value, dict)
    return response.value


def test_discovery_lists_every_daemon_with_its_round_trip(daemons: Daemons, maestro: Maestro) -> None:
    start_cluster(daemons, maestro)
    peers = maestro.discover(window_s=1.0)
    assert sorted((p.name, p.role.value) for p in peers) == [
        ("a1", "agent"),
        ("i1", "inspector"),
        ("r1", "receiver"),
        ("s1", "sender"),
    ]
    for peer in peers:
        # Through the broker: whatever its round trip (a stock Mosquitto's is Nagle's ~40 ms,
        # lopsided), the bound it states holds the truth, which on one host is 0.
        assert peer.clock is not None and peer.clock.path == "mqtt", peer.name
        assert peer.bus_rtt_us == peer.clock.rtt_us and 0 < peer.clock.rtt_us < 1_000_000
        assert abs(peer.clock.offset_us) <= peer.clock.uncertainty_us
        assert peer.pid == daemons.procs[peer.name].pid
    # Directly (UDP, four stamps): a loopback round trip, and an offset of the same clock.
    maestro.measure_clocks(peers, direct_only=True)
    for peer in peers:
        assert peer.clock is not None and peer.clock.path == "udp", peer.name
        assert peer.clock.rtt_us < 5000 and peer.clock.uncertainty_us < 2500, peer.clock
        assert abs(peer.clock.offset_us) < 500 and abs(peer.clock.offset_us) <= peer.clock.uncertainty_us


def test_set_reaches_the_named_role_only(daemons: Daemons, maestro: Maestro) -> None:
    start_cluster(daemons, maestro)
    replies = maestro.set({"rate_per_s": 250, "duration": "10s"}, to=Role.SENDER)
    assert {maestro.registry.get(p).name for p in replies.replies} == {"s1"}  # type: ignore[union-attr]
    assert options_of(maestro, "s1") == {"rate_per_s": 250, "duration": "10s"}
    for other in ("r1", "i1", "a1"):
        assert options_of(maestro, other) == {}
    maestro.set({"test_id": "t-1"})  # everyone
    assert all(options_of(maestro, n).get("test_id") == "t-1" for n in ("s1", "r1", "i1", "a1"))


def test_a_bad_option_is_refused_by_name(daemons: Daemons, maestro: Maestro) -> None:
    start_cluster(daemons, maestro)
    with pytest.raises(PeerRequestError) as caught:
        maestro.set({"parallel_count": -3}, to=Role.RECEIVER)
    message = str(caught.value)
    assert "r1@" in message
    assert "option 'parallel_count'" in message
    assert options_of(maestro, "r1") == {}


def test_role_less_workers_get_their_roles(daemons: Daemons, maestro: Maestro) -> None:
    for name in ("w1", "w2", "w3"):
        daemons.start("maestro-worker", name)
    maestro.wait_for_peers(3, role=Role.OTHER, timeout_s=20)
    assigned = maestro.assign_roles(senders=2, receivers=1)
    assert len(assigned[Role.SENDER]) == 2
    assert len(assigned[Role.RECEIVER]) == 1
    # The workers subscribed to their role topics: a SET by role reaches exactly them.
    replies = maestro.set({"rate_per_s": 10}, to=Role.SENDER)
    assert set(replies.replies) == {p.peer_id for p in assigned[Role.SENDER]}
    # And the roles are what a fresh discovery sees.
    rediscovered = {p.peer_id: p.role for p in maestro.discover(0.5)}
    assert sorted(r.value for r in rediscovered.values()) == ["receiver", "sender", "sender"]
    maestro.unassign_roles()
    assert all(p.role == Role.OTHER for p in maestro.discover(0.5))


def header(message_id: str) -> dict[str, object]:
    return {"version": PROTOCOL_VERSION, "message_id": message_id, "sender_id": "raw", "timestamp_ns": 1}


BAD_NOTES = {
    "truncated": msgpack.packb([0, 10, header("m-trunc"), {"coordinator_time_ns": 1}])[:-4],
    "wrong-type": msgpack.packb([0, 10, header("m-type"), {"coordinator_time_ns": "now"}]),
    "unknown-command": msgpack.packb([0, 99, header("m-cmd"), {}]),
    "unknown-type": msgpack.packb([9, 10, header("m-ntype"), {}]),
    "not-a-map": msgpack.packb([0, 10, header("m-map"), [1, 2, 3]]),
    "oversized": msgpack.packb([0, 7, header("m-big"), {"options": {"labels": {"x": "y" * 2_000_000}}}]),
    "response-as-request": msgpack.packb([1, 11, header("m-resp"), {}]),
}


def test_malformed_notes_are_answered_with_protocol_error(daemons: Daemons, maestro: Maestro) -> None:
    daemons.start("maestro-worker", "w1", "--role", "sender")
    (worker,) = maestro.wait_for_peers(1, timeout_s=20)
    raw = RawClient([f"{daemons.prefix}/maestro"])
    try:
        for payload in BAD_NOTES.values():
            raw.send(f"{daemons.prefix}/peer/by-id/{worker.peer_id}", payload)
        deadline = time.monotonic() + 10
        while len(raw.received) < len(BAD_NOTES) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        raw.close()
    errors = [n for n in raw.received if isinstance(n, ProtocolErrorResponse)]
    assert len(errors) == len(BAD_NOTES), [n.reason for n in errors]
    by_cid = {e.header.correlation_id: e.reason for e in errors}
    assert by_cid["m-type"] == "PingRequest: field 'coordinator_time_ns' must be an integer, got str 'now'"
    assert by_cid["m-cmd"] == "unknown command 99"
    assert by_cid["m-ntype"] == "unknown note type 9"
    assert by_cid["m-map"] == "PingRequest: payload must be a map, got a list of 3"
    assert by_cid["m-resp"] == "OkResponse is a response, not a request"
    uncorrelated = sorted(e.reason for e in errors if e.header.correlation_id is None)
    assert len(uncorrelated) == 2
    assert uncorrelated[0].startswith("note does not decode as msgpack")
    assert uncorrelated[1] == "note of 2000083 bytes exceeds the limit of 1048576 bytes"
    assert all(e.header.sender_id == worker.peer_id for e in errors)
    # And the daemon is still there, answering.
    (pinged,) = maestro.ping(to=worker)
    assert pinged.clock is not None
    assert daemons.procs["w1"].poll() is None


def test_halt_stops_every_daemon_with_exit_code_0(daemons: Daemons, maestro: Maestro) -> None:
    start_cluster(daemons, maestro)
    maestro.halt()
    for name, proc in daemons.procs.items():
        assert proc.wait(15) == 0, daemons.log(name)
    time.sleep(0.5)
    assert maestro.lost == []  # a clean exit is not an abnormal disconnect
    assert maestro.peers == []


def test_sigterm_stops_a_daemon_cleanly(daemons: Daemons, maestro: Maestro) -> None:
    proc = daemons.start("maestro-agent", "a1")
    maestro.wait_for_peers(1, timeout_s=20)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    time.sleep(0.5)
    assert maestro.lost == []
    assert "stopping (SIGTERM)" in daemons.log("a1")


def test_kill_9_is_reported_as_abnormal_disconnect_within_5_s(daemons: Daemons, maestro: Maestro) -> None:
    start_cluster(daemons, maestro)
    daemons.procs["r1"].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    while not maestro.lost and time.monotonic() - killed_at < 5:
        time.sleep(0.02)
    assert [p.name for p in maestro.lost] == ["r1"]
    assert sorted(p.name for p in maestro.peers) == ["a1", "i1", "s1"]
    # Later requests to "everyone" expect only the live peers.
    assert len(maestro.set({"test_id": "after-loss"}).replies) == 3


def test_a_wait_names_the_peer_lost_during_it(daemons: Daemons, maestro: Maestro) -> None:
    start_cluster(daemons, maestro)
    sender = maestro.find("s1")
    threading.Timer(0.5, daemons.procs["s1"].send_signal, [signal.SIGKILL]).start()
    started = time.monotonic()
    with pytest.raises(MaestroError, match=r"lost while waiting: s1@"):
        maestro.wait_for((TestSucceeded,), [sender], timeout_s=30)
    assert time.monotonic() - started < 5
    assert [p.name for p in maestro.lost] == ["s1"]


def test_maestro_peers_prints_the_live_peers(daemons: Daemons, maestro: Maestro) -> None:
    daemons.start("maestro-worker", "w1", "--role", "sender")
    maestro.wait_for_peers(1, timeout_s=20)
    out = subprocess.run(
        [str(BIN / "maestro"), "peers", "--broker", daemons.broker_url, "--topic-prefix", daemons.prefix],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    header, row = out.splitlines()
    assert header.split()[:3] == ["NAME", "ROLE", "HOST"]
    assert row.split()[:2] == ["w1", "sender"]


def test_maestro_peers_explains_an_unreachable_broker() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", "peers", "--broker", "mqtt://127.0.0.1:1", "--timeout", "2"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2  # could not run (1 means: the test ran and failed)
    assert "no connection to the control broker at mqtt://127.0.0.1:1 within 2 s" in result.stderr
    assert "Traceback" not in result.stderr
