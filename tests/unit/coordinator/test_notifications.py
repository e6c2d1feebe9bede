"""A notification belongs to its test: a late verdict of an earlier phase never ends the next."""

from __future__ import annotations

import pytest

from coordinator.running.maestro import Maestro
from protocol.broker_url import BrokerUrl
from protocol.bus import ControlBus, Identity
from protocol.notes import (
    AbnormalDisconnect,
    DrainComplete,
    Header,
    LogRequest,
    Note,
    OkResponse,
    PeerOnline,
    SetRequest,
    StatsReport,
    TestFailed,
    TestSucceeded,
    UploadComplete,
)
from protocol.signing import NoteKey
from protocol.topics import Topics


def _maestro(key: NoteKey | None = None) -> Maestro:
    # Never connected: notes are handed to it as the bus's thread would.
    bus = ControlBus(
        BrokerUrl.parse("mqtt://127.0.0.1:1"),
        Identity.new("coordinator", "here", "coordinator"),
        Topics(),
        key=key,
        require_signed=key is not None,
    )
    return Maestro(bus)


def test_a_late_verdict_of_another_test_is_dropped_and_the_right_one_taken() -> None:
    maestro = _maestro()
    header = Header(sender_id="w1", sender_name="w1")
    maestro._on_note("/mpt/notifications", TestFailed(test_id="phase-1", message="too slow", header=header))
    maestro._on_note("/mpt/notifications", TestSucceeded(test_id="phase-2", message="sent 10", header=header))
    note = maestro.next_notification((TestSucceeded, TestFailed), {"w1"}, timeout_s=0, test_id="phase-2")
    assert isinstance(note, TestSucceeded) and note.test_id == "phase-2"
    # The late one is gone, not left to end a later wait.
    assert maestro.next_notification((TestSucceeded, TestFailed), {"w1"}, timeout_s=0) is None


def test_without_a_test_id_any_matching_notification_is_taken_oldest_first() -> None:
    maestro = _maestro()
    header = Header(sender_id="w1", sender_name="w1")
    maestro._on_note("/mpt/notifications", TestFailed(test_id="a", message="x", header=header))
    maestro._on_note("/mpt/notifications", TestSucceeded(test_id="b", message="y", header=header))
    first = maestro.next_notification((TestSucceeded, TestFailed), {"w1"}, timeout_s=0)
    assert isinstance(first, TestFailed) and first.test_id == "a"
    # Another peer's notes are not taken for w1's.
    assert maestro.next_notification((TestSucceeded,), {"w2"}, timeout_s=0) is None


def test_once_a_test_is_named_an_upload_of_another_is_not_taken_for_it() -> None:
    # Unkeyed too: a copy of an earlier run's UPLOAD_COMPLETE must not end this collection.
    maestro = _maestro()
    maestro._names_test(LogRequest(test_id="t2", upload_url="http://x"))
    header = Header(sender_id="w1", sender_name="w1")
    maestro._on_note("/mpt/notifications", UploadComplete(test_id="t1", success=True, header=header))
    maestro._on_note("/mpt/notifications", UploadComplete(test_id="t2", success=True, header=header))
    (taken,) = maestro.inbox.one_from_each((UploadComplete,), {"w1"}, 0, lambda _p: False)[0].values()
    assert isinstance(taken, UploadComplete) and taken.test_id == "t2"
    assert len(maestro.inbox) == 0


def test_a_keyed_coordinator_binds_notifications_and_statistics_to_its_test_not_answers() -> None:
    maestro = _maestro(NoteKey(b"k" * 32))
    assert maestro.bus.guard.exact_test
    maestro._names_test(SetRequest(options={"test_id": "t9.step-1"}))
    assert maestro.bus.test_id == "t9.step-1"  # what its orders are sealed for, too
    bound: list[Note] = [DrainComplete(success=True), TestFailed(test_id="x"), StatsReport(test_id="x", elapsed_s=1)]
    assert [maestro._bound_test(n) for n in bound] == ["t9.step-1"] * 3
    # Presence acts on no test; an answer is taken only for a request this process sent.
    assert [maestro._bound_test(n) for n in (PeerOnline(), AbnormalDisconnect(), OkResponse())] == [None] * 3


def test_its_own_will_seen_while_connected_is_answered_with_peer_online(monkeypatch: pytest.MonkeyPatch) -> None:
    maestro = _maestro()
    sent: list[tuple[str, Note]] = []
    monkeypatch.setattr(maestro.bus, "publish", lambda topic, note, **_: sent.append((topic, note)))
    own = Header(sender_id=maestro.bus.identity.peer_id, sender_name="maestro")
    maestro._on_note(maestro.topics.coordinator, AbnormalDisconnect(header=own))
    assert sent == []  # not connected: that will is the broker's, for real
    monkeypatch.setattr(type(maestro.bus), "connected", property(lambda _self: True))
    other = Header(sender_id="another-coordinator", sender_name="maestro")
    maestro._on_note(maestro.topics.coordinator, AbnormalDisconnect(header=other))
    maestro._on_note(maestro.topics.coordinator, PeerOnline(header=other))
    assert sent == [] and maestro.registry.get("another-coordinator") is None
    maestro._on_note(maestro.topics.coordinator, AbnormalDisconnect(header=own))
    assert [(topic, type(note)) for topic, note in sent] == [(maestro.topics.coordinator, PeerOnline)]
