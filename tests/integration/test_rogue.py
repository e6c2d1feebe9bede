"""#38: a rogue MQTT client on the real control broker, against keyed daemons and a keyed
coordinator. It captures signed notes and replays them to another peer and to a peer that
restarted, forges a notification in a worker's name during a signed `--local` run, and tries to
steer a `--local` worker. Each attempt is refused, and each test also shows the legitimate path
still working, so that a guard refusing everything would fail it."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from pathlib import Path

import pytest
from support.processes import Daemons
from support.rogue import Captured, Rogue

from coordinator import FixedRateTest, Maestro
from coordinator.registry import PeerInfo
from protocol.bus import ControlBus
from protocol.codes import Role
from protocol.notes import (
    GetRequest,
    GetResponse,
    Note,
    OkResponse,
    PeerOnline,
    ProtocolErrorResponse,
    RoleAssign,
    SetRequest,
    StartWorker,
    StatsReport,
    TestFailed,
)
from protocol.signing import write_new_key
from protocol.topics import Topics


def _ask(bus: ControlBus, topic: str, note: Note, peer_id: str) -> Note | None:
    _stamped, replies = bus.request(topic, note, [peer_id], 5.0)
    return replies.replies.get(peer_id)


def _test_id_of(m: Maestro, peer: PeerInfo) -> str:
    answer = _ask(m.bus, m.topics.by_id(peer.peer_id), GetRequest(what="options"), peer.peer_id)
    assert isinstance(answer, GetResponse), answer
    return str(answer.value.get("test_id", ""))


def _replayed(m: Maestro, rogue: Rogue, captured: Captured, topic: str, peer_id: str) -> Note | None:
    """The captured bytes published on `topic`; the answer of `peer_id`, if any, within 3 s."""
    m.bus.correlator.expect(captured.note.header.message_id, [peer_id])
    rogue.publish(topic, captured.data)
    return m.bus.await_replies(captured.note.header.message_id, 3).replies.get(peer_id)


@pytest.mark.usefixtures("mosquitto_url")
def test_a_captured_order_is_refused_on_another_peers_topic_and_after_its_peer_restarts(
    daemons: Daemons, tmp_path: Path
) -> None:
    key_file = write_new_key(tmp_path / "lab.key")
    for name in ("a1", "a2"):
        daemons.start("maestro-agent", name, "--key-file", str(key_file))
    topics = Topics(daemons.prefix)
    with (
        Maestro.connect(daemons.broker_url, topic_prefix=daemons.prefix, discover_s=0, key_file=key_file) as m,
        Rogue(daemons.broker_url, daemons.prefix) as rogue,
    ):
        a1, a2 = sorted(m.wait_for_peers(2, timeout_s=20), key=lambda p: p.name)
        to_a1 = topics.by_name(a1.host, "a1")
        assert isinstance(_ask(m.bus, to_a1, SetRequest(options={"test_id": "for-a1"}), a1.peer_id), OkResponse)
        captured = rogue.wait_for(lambda c: isinstance(c.note, SetRequest) and c.topic == to_a1)
        assert _test_id_of(m, a1) == "for-a1"

        # To a2, on its own topics and on the agents' group topic: the MAC is for a1's topic.
        for topic in (topics.by_id(a2.peer_id), topics.by_name(a2.host, "a2"), topics.by_role(Role.AGENT)):
            refused = _replayed(m, rogue, captured, topic, a2.peer_id)
            assert isinstance(refused, ProtocolErrorResponse) and refused.reason.startswith("bad signature"), refused
        assert _test_id_of(m, a2) == ""
        # ... and a2 still obeys what is signed for it.
        to_a2 = topics.by_id(a2.peer_id)
        assert isinstance(_ask(m.bus, to_a2, SetRequest(options={"test_id": "a2"}), a2.peer_id), OkResponse)
        assert _test_id_of(m, a2) == "a2"

        # a1 restarts, on the same data dir; the copy comes on a topic it listens on again.
        daemons.procs["a1"].terminate()
        assert daemons.procs["a1"].wait(10) == 0
        daemons.start("maestro-agent", "a1", "--key-file", str(key_file))
        back = rogue.wait_for(
            lambda c: (
                isinstance(c.note, PeerOnline)
                and c.note.header.sender_name == "a1"
                and c.note.header.sender_id != a1.peer_id
            )
        )
        m.discover(1)
        (new_a1,) = [p for p in m.peers if p.peer_id == back.note.header.sender_id]
        assert _replayed(m, rogue, captured, to_a1, new_a1.peer_id) is None  # refused, unanswered
        assert _test_id_of(m, new_a1) == ""  # the replayed SET did not land
        assert isinstance(_ask(m.bus, to_a1, SetRequest(options={"test_id": "after"}), new_a1.peer_id), OkResponse)
        assert _test_id_of(m, new_a1) == "after"
    assert f"replayed note {captured.note.header.message_id}" in daemons.log("a1")
    assert "bad signature" in daemons.log("a2")
    assert key_file.read_text().strip() not in daemons.log("a1") + daemons.log("a2")


@pytest.mark.timeout(240)
@pytest.mark.usefixtures("rabbitmq")
def test_a_local_run_is_signed_a_rogue_can_neither_steer_its_workers_nor_fail_its_test(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MAESTRO_KEY_FILE", raising=False)  # --local makes a key of its own
    caplog.set_level(logging.WARNING, logger="protocol.bus")
    queue = f"rogue-{uuid.uuid4().hex[:8]}"
    with Maestro.local(workers=2, data=tmp_path / "results") as m:
        assert m._cluster is not None
        key_file = m._cluster.key_file()
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert all(p.signed_only for p in m.ping(to=m.everyone())), "the workers of --local take only signed notes"
        with Rogue(m._cluster.broker_url, m.topics.prefix) as rogue:
            # Steering a worker: the rogue's own role, send URL and start, unsigned.
            worker = m.peers[0]
            forged = [
                RoleAssign(role="sender"),
                SetRequest(options={"send_url": "amqp://127.0.0.1:5672/rogues-queue", "rate": 10}),
                StartWorker(),
            ]
            for note in forged:
                data = rogue.forge(note)
                rogue.publish(m.topics.by_id(worker.peer_id), data)

            def refused(c: Captured) -> bool:
                note = c.note
                return (
                    isinstance(note, ProtocolErrorResponse)
                    and note.header.sender_id == worker.peer_id
                    and note.reason.startswith("unsigned note")
                )

            rogue.wait_for(lambda _c: sum(refused(c) for c in rogue.captured) == len(forged))
            (pinged,) = [p for p in m.ping(to=m.everyone()) if p.peer_id == worker.peer_id]
            assert pinged.role == Role.OTHER and pinged.state.value == "ready"  # it took none of them

            # Failing the test: a NOTIFY_FAIL in a sender's name, for its test, unsigned.
            def forge_a_failure() -> None:
                stats = rogue.wait_for(lambda c: isinstance(c.note, StatsReport), timeout_s=60)
                assert isinstance(stats.note, StatsReport)
                failure = TestFailed(test_id=stats.note.test_id, message="FORGED by a rogue MQTT client")
                rogue.publish(m.topics.notifications, rogue.forge(failure, pretending=stats.note.header))
                forged_as.append(stats.note.header.sender_name)

            forged_as: list[str] = []
            forger = threading.Thread(target=forge_a_failure)
            forger.start()
            result = m.run(
                FixedRateTest(send_url=f"amqp://guest:guest@127.0.0.1:5672/{queue}", rate=20, duration="6s"),
                progress=False,
            )
            forger.join(60)
    assert forged_as, "the rogue never saw a STATS_REPORT to forge a failure from"
    assert result.passed, result.reason
    assert result.summary.sent == result.summary.received > 0
    refused = [r.getMessage() for r in caplog.records if "refused a note" in r.getMessage()]
    assert any(f"from {forged_as[0]}@" in line and "unsigned note" in line for line in refused), refused
    assert not os.path.exists(key_file), "the ephemeral key outlived its cluster"
