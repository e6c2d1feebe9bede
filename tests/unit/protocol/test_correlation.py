from __future__ import annotations

import threading
import time

from protocol.correlation import Correlator
from protocol.notes import Header, OkResponse


def reply(peer: str, to: str) -> OkResponse:
    return OkResponse(header=Header(message_id=f"r-{peer}", sender_id=peer, correlation_id=to))


def test_a_wait_ends_as_soon_as_every_expected_peer_answered() -> None:
    c = Correlator()
    c.expect("m1", ["a", "b"])
    threading.Timer(0.05, lambda: (c.deliver(reply("a", "m1")), c.deliver(reply("b", "m1")))).start()
    started = time.monotonic()
    replies = c.wait("m1", timeout_s=10)
    assert time.monotonic() - started < 5
    assert set(replies.replies) == {"a", "b"}
    assert replies.complete and not replies.missing


def test_missing_peers_are_named_after_the_timeout() -> None:
    c = Correlator()
    c.expect("m1", ["a", "b"])
    c.deliver(reply("a", "m1"))
    replies = c.wait("m1", timeout_s=0.05)
    assert replies.missing == {"b"}


def test_a_lost_peer_ends_the_wait_for_it() -> None:
    c = Correlator()
    c.expect("m1", ["a", "b"])
    c.deliver(reply("a", "m1"))
    threading.Timer(0.05, c.peer_lost, ["b"]).start()
    replies = c.wait("m1", timeout_s=10)
    assert replies.lost == {"b"}
    assert replies.complete


def test_strays_and_strangers_are_not_counted() -> None:
    c = Correlator()
    c.expect("m1", ["a"])
    assert not c.deliver(reply("a", "other-request"))
    assert not c.deliver(reply("intruder", "m1"))
    assert c.deliver(reply("a", "m1"))
    assert not c.deliver(reply("a", "m2"))
    assert set(c.wait("m1", 0).replies) == {"a"}


def test_discovery_collects_whoever_answers() -> None:
    c = Correlator()
    c.expect("m1", None)
    c.deliver(reply("x", "m1"))
    c.deliver(reply("y", "m1"))
    replies = c.wait("m1", timeout_s=0.05)
    assert set(replies.replies) == {"x", "y"}
    assert set(replies.received_ns) == {"x", "y"}
