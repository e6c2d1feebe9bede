"""The coordinator keeps a notification only while someone may still wait for it."""

from __future__ import annotations

import threading
import time

from coordinator.bus.inbox import Inbox
from protocol.notes import DrainComplete, Header, TestFailed, TestSucceeded


def _from(peer: str) -> Header:
    return Header(sender_id=peer, sender_name=peer)


def test_the_oldest_matching_note_is_taken_once_across_peers() -> None:
    inbox = Inbox()
    inbox.put(TestSucceeded(test_id="t", header=_from("b")))
    inbox.put(DrainComplete(success=True, header=_from("a")))
    inbox.put(TestFailed(test_id="t", header=_from("a")))
    assert isinstance(inbox.pop_first((TestSucceeded, TestFailed), {"a", "b"}), TestSucceeded)
    assert isinstance(inbox.pop_first((TestSucceeded, TestFailed), {"a", "b"}), TestFailed)
    assert inbox.pop_first((TestSucceeded, TestFailed), {"a", "b"}) is None
    assert len(inbox) == 1  # the drain is still there for whoever waits for it


def test_what_is_left_of_a_finished_test_is_dropped() -> None:
    inbox = Inbox()
    inbox.put(TestSucceeded(test_id="phase-1", header=_from("a")))
    inbox.put(TestSucceeded(test_id="phase-2", header=_from("a")))
    assert inbox.discard_test("phase-1") == 1
    note = inbox.pop_first((TestSucceeded,), {"a"})
    assert isinstance(note, TestSucceeded) and note.test_id == "phase-2"
    assert len(inbox) == 0


def test_a_peer_that_talks_to_nobody_cannot_grow_the_inbox_without_end() -> None:
    inbox = Inbox(kept_per_peer=10)
    for n in range(25):
        inbox.put(TestSucceeded(test_id=str(n), header=_from("chatty")))
    assert len(inbox) == 10
    first = inbox.pop_first((TestSucceeded,), {"chatty"})
    assert isinstance(first, TestSucceeded) and first.test_id == "15"  # the newest ten are kept


def test_a_waiter_wakes_when_its_note_arrives_and_gives_up_at_its_timeout() -> None:
    inbox = Inbox()
    got: list[object] = []
    threading.Timer(0.05, lambda: inbox.put(TestSucceeded(test_id="t", header=_from("a")))).start()
    started = time.monotonic()

    def take() -> bool:
        note = inbox.pop_first((TestSucceeded,), {"a"})
        if note is not None:
            got.append(note)
        return bool(got)

    assert inbox.wait(take, lambda: False, timeout_s=5)
    assert time.monotonic() - started < 2
    started = time.monotonic()
    assert not inbox.wait(lambda: False, lambda: False, timeout_s=0.1)
    assert 0.09 < time.monotonic() - started < 2
