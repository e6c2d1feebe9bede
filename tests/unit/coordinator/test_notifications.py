"""A notification belongs to its test: a late verdict of an earlier phase never ends the next."""

from __future__ import annotations

from coordinator.maestro import Maestro
from protocol.broker_url import BrokerUrl
from protocol.bus import ControlBus, Identity
from protocol.notes import Header, TestFailed, TestSucceeded
from protocol.topics import Topics


def _maestro() -> Maestro:
    # Never connected: notes are handed to it as the bus's thread would.
    bus = ControlBus(
        BrokerUrl.parse("mqtt://127.0.0.1:1"), Identity.new("coordinator", "here", "coordinator"), Topics()
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
