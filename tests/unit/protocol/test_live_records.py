"""The live statistics as records: what a worker reports, what a coordinator posts and what the
data server takes, each role's counters written as the role has them and a post that is not a
live update refused with what is wrong with it."""

from __future__ import annotations

import pytest

from protocol.live import FinalCounts, LiveCounters, LivePeer, LivePoint, LiveUpdate

SENDER = {"sent": 500, "errors": {"refused": 2}, "lag_p50_us": 10, "lag_p99_us": 40, "lag_max_us": 90}
RECEIVER = {
    "received": 480,
    "foreign": {},
    "duplicates": 1,
    "missing": 3,
    "latency_p50_us": 800,
    "latency_p99_us": 2000,
    "latency_max_us": 5000,
    "latency_le_us": [0, 100, 480],
    "latency_count": 480,
    "latency_sum_us": 480_000,
}


@pytest.mark.parametrize("counters", [SENDER, RECEIVER, {"sent": 7, "replies": 6, "timed_out": 1, "errors": {}}])
def test_each_roles_counters_are_written_back_as_they_came(counters: dict[str, object]) -> None:
    assert LiveCounters.from_json(counters).to_json() == counters


def test_a_sender_has_no_receivers_counters_and_the_worker_adds_its_own() -> None:
    counters = LiveCounters.from_json(SENDER)
    assert (counters.received, counters.latency_p99_us, counters.cpu_percent) == (None, None, None)
    assert counters.sent == 500 and counters.errors == {"refused": 2} and counters.lag_p99_us == 40.0
    monitored = LiveCounters(sent=1, cpu_percent=12.5, loop_lag_ms=0.0).to_json()
    assert monitored == {"sent": 1, "cpu_percent": 12.5, "loop_lag_ms": 0.0}


def test_an_update_round_trips_with_its_peers_points_and_final_counts() -> None:
    update = LiveUpdate(
        test_id="t1",
        name="nightly",
        kind="fixed-rate",
        started_s=1.0,
        elapsed_s=5.0,
        expected_s=20.0,
        state="finished",
        peers=(LivePeer("s1", "sender", "a", "finished", LiveCounters.from_json(SENDER), 4.9),),
        points=(LivePoint(4.0, 100.0, 96.0, 800.0, 2000.0),),
        outcome="success",
        summary=FinalCounts(500, 500, 0, 0, {"s1": {"sent": 500}}),
    )
    text = update.to_json()
    assert text["peers"] == [
        {"name": "s1", "role": "sender", "host": "a", "state": "finished", **SENDER, "elapsed_s": 4.9}
    ]
    assert text["summary"] == {"sent": 500, "received": 500, "lost": 0, "duplicates": 0, "peers": {"s1": {"sent": 500}}}
    assert LiveUpdate.from_json(text) == update
    running = LiveUpdate("t2").to_json()
    assert "outcome" not in running and "summary" not in running and running["state"] == "running"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ([], '"test_id"'),
        ({"name": "x"}, '"test_id"'),
        ({"test_id": "t1", "peers": {"s1": {}}}, "must be lists"),
        ({"test_id": "t1", "peers": [1]}, "with its name"),
        ({"test_id": "t1", "peers": [{"name": "s1", "sent": "many"}]}, "a count must be a whole number"),
        ({"test_id": "t1", "peers": [{"name": "s1", "sent": True}]}, "a count"),
        ({"test_id": "t1", "peers": [{"name": "s1", "sent": 1.7}]}, "a count"),
        ({"test_id": "t1", "peers": [{"name": "s1", "sent": -5}]}, "from 0"),
        ({"test_id": "t1", "peers": [{"name": "s1", "sent": 10**400}]}, "a count"),  # /metrics broke on it
        ({"test_id": "t1", "peers": [{"name": "s1", "replies": 2**63}]}, "a count"),
        ({"test_id": "t1", "peers": [{"name": "s1", "errors": {"x": -3}}]}, "from 0"),
        ({"test_id": "t1", "peers": [{"name": "s1", "cpu_percent": float("nan")}]}, "finite"),
        ({"test_id": "t1", "peers": [{"name": "s1", "lag_p50_us": 10**400}]}, "finite"),
        ({"test_id": "t1", "peers": [{"name": "s1", "cpu_percent": True}]}, "finite"),
        ({"test_id": "t1", "peers": [{"name": "s1", "role": {"a": 1}}]}, "a text"),
        ({"test_id": "t1", "peers": [{"name": "s1"}, {"name": "s1"}]}, "two peers of one name"),
        ({"test_id": "t1", "peers": [{"name": f"p{i}"} for i in range(20_001)]}, "at most 20,000"),
        ({"test_id": "t1", "peers": [{"name": "s1", "errors": [1]}]}, "must be an object"),
        ({"test_id": "t1", "peers": [{"name": "r1", "latency_le_us": 5}]}, "a list"),
        ({"test_id": "t1", "peers": [{"name": "r1", "latency_le_us": "123"}]}, "a list"),
        ({"test_id": "t1", "points": [{"elapsed_s": 1.0}]}, "needs its elapsed_s"),
        ({"test_id": "t1", "points": [{"elapsed_s": float("inf"), "send_rate": 1, "receive_rate": 1}]}, "finite"),
        ({"test_id": "t1", "state": "finished", "summary": {"peers": [1]}}, "by name"),
        ({"test_id": "t1", "state": "finished", "summary": {"sent": 10**400}}, "a count"),
        ({"test_id": "t1", "elapsed_s": "soon"}, "finite"),
        ({"test_id": "t1", "expected_s": float("inf")}, "finite"),
    ],
)
def test_what_is_not_a_live_update_is_refused_saying_why(body: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        LiveUpdate.from_json(body)  # type: ignore[arg-type]
