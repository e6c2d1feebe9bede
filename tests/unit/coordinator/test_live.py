from __future__ import annotations

import time
from typing import Any

from coordinator.registry import PeerInfo
from coordinator.running.live import LiveFeed
from protocol.codes import Role
from protocol.figures import TestFigures
from protocol.live import LivePoint, LiveUpdate
from protocol.notes import Header, StatsReport


class Sink:
    def __init__(self, fail_first: int = 0) -> None:
        self.posts: list[dict[str, Any]] = []
        self.fail_first = fail_first

    def post_live(self, test_id: str, update: LiveUpdate) -> None:
        if self.fail_first:
            self.fail_first -= 1
            raise OSError("connection refused")
        self.posts.append(update.to_json())


PEERS = [PeerInfo("s-id", "s1", "host-a", Role.SENDER), PeerInfo("r-id", "r1", "host-b", Role.RECEIVER)]


def _report(peer_id: str, elapsed_s: float, **counters: Any) -> StatsReport:
    note = StatsReport(test_id="t1", elapsed_s=elapsed_s, counters=counters)
    return note.with_header(Header(sender_id=peer_id))  # type: ignore[return-value]


def _feed(sink: Sink) -> LiveFeed:
    feed = LiveFeed(sink, "t1", "nightly", "fixed-rate", 10.0, PEERS)
    feed.start()
    return feed


def test_rates_per_second_come_from_the_peers_counters(monkeypatch: Any) -> None:
    sink = Sink()
    feed = _feed(sink)
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    feed.started_s = 1000.0
    for second, (sent, received) in enumerate([(0, 0), (100, 90), (300, 290)]):
        feed.feed(_report("s-id", second, sent=sent, errors={}))
        feed.feed(_report("r-id", second, received=received, latency_p50_us=500.0, latency_p99_us=900.0, missing=0))
        clock[0] = 1000.0 + second
        feed.tick(set(), set())
    counts = {"sent": 300, "received": 300, "lost": 0, "duplicates": 0, "peers": []}
    feed.end("success", None, TestFigures.from_json(counts))
    points = [p for post in sink.posts for p in post["points"]]
    # 100 and 200 a second sent; 90 and 200 received.
    assert [(p["send_rate"], p["receive_rate"]) for p in points] == [(100.0, 90.0), (200.0, 200.0)]
    assert points[0]["latency_p99_us"] == 900.0
    last = sink.posts[-1]
    assert last["state"] == "finished" and last["outcome"] == "success"
    assert last["summary"]["received"] == 300
    assert [(p["name"], p["role"], p["host"]) for p in last["peers"]] == [
        ("s1", "sender", "host-a"),
        ("r1", "receiver", "host-b"),
    ]
    # Ended: no peer reads "running" (the receiver did on the page of an ended test).
    assert [p["state"] for p in last["peers"]] == ["finished", "finished"]


def test_a_peer_lost_by_the_end_reads_lost() -> None:
    sink = Sink()
    feed = _feed(sink)
    feed.mark({"s-id", "r-id"}, "running")
    feed.end("failure", "r1 was lost", TestFigures.from_json({}), lost={"r-id"})
    assert [(p["name"], p["state"]) for p in sink.posts[-1]["peers"]] == [("s1", "finished"), ("r1", "lost")]


def test_points_not_posted_go_with_the_next_post() -> None:
    sink = Sink(fail_first=1)
    feed = _feed(sink)
    feed._points = [LivePoint(1.0, 10.0, 10.0)]
    feed._wake.set()
    deadline = time.monotonic() + 5
    while sink.fail_first and time.monotonic() < deadline:
        time.sleep(0.01)
    feed._points.append(LivePoint(2.0, 10.0, 10.0))
    feed.end("success", None, TestFigures.from_json({}))
    assert [p["elapsed_s"] for post in sink.posts for p in post["points"]] == [1.0, 2.0]


def test_late_senders_are_told_by_what_they_last_reported() -> None:
    """The reason a test gives when its senders run past their time: each one's count, its lag
    and how busy it was, from its last report (a receiver is no sender)."""
    feed = LiveFeed(Sink(), "t1", "nightly", "fixed-rate", 10.0, PEERS)
    assert feed.last_said({"s-id"}, str.upper) == ""  # nothing reported yet
    errors = {"timed_out": 92, "nacked": 0}
    feed.feed(_report("s-id", 150.0, sent=540_000, in_flight=1_000, errors=errors, lag_p99_us=31.2e6, cpu_percent=67.2))
    feed.feed(_report("r-id", 150.0, received=539_000))
    said = feed.last_said({"s-id", "r-id"}, str.upper)
    assert said == (
        "S-ID: 540,000 sent, 1,000 of them not yet settled by the SUT, 92 failed (92 timed_out), "
        "last second's sends 31.2 s behind their schedule at p99, 67 % of a core"
    )
