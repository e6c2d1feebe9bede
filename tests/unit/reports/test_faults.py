"""Fault effects against a hand-worked scenario: 100 msg/s, the broker gone from 5.0 s to 7.5 s."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from reports.faults import Gather, PeerEvents, Window, fault_effects, gather_in_memory, windows_from_events

S = 1_000_000  # µs


def _traffic() -> Gather:
    intended = np.arange(2000) * 10_000  # 0.00 s .. 19.99 s, every 10 ms
    # Sent on time; everything intended in [5.0 s, 7.5 s) is lost; the rest arrives 1 ms later.
    arrived = intended[(intended < 5 * S) | (intended >= 7.5 * S)]
    # Two senders and two receivers, each with a share of the files, as Spark reads them.
    return gather_in_memory(
        [
            ("sender", intended[::2], intended[::2]),
            ("sender", intended[1::2], intended[1::2]),
            ("receiver", arrived[:700], arrived[:700] + 1000),
            ("receiver", arrived[700:], arrived[700:] + 1000),
        ]
    )


EVENTS = PeerEvents(
    duplicates_per_s={8: 3, 30: 5},
    disconnects_us=np.array([int(5.2 * S)]),
    reconnects_us=np.array([int(7.6 * S), int(40 * S)]),  # the second is long after
)


def test_a_stop_window_gets_its_outage_recovery_latency_and_loss() -> None:
    window = Window("a1@lab", "stop", "broker", 5 * S, 7 * S, "duration_s=2")
    (row,) = fault_effects([window], _traffic(), EVENTS)
    assert row["fault"] == "stop broker (duration_s=2)"
    assert (row["start_s"], row["end_s"]) == (5.0, 7.0)
    assert row["outage_from_s"] == 4.991  # the last arrival before the gap
    assert row["outage_s"] == 2.51  # ... to the first after it, 7.501 s
    assert row["first_publish_after_s"] == 0.0
    assert row["first_consume_after_s"] == 0.501
    assert row["rate_before_per_s"] == 100.0  # 500 arrivals over the 4.999 s the test had
    # From 7.0 s: [7.5 s, 8.5 s) is the first second with 95 of them (100).
    assert row["back_to_95_percent_s"] == 0.5
    assert (row["p99_before_ms"], row["p99_during_ms"], row["p99_after_ms"]) == (1.0, None, 1.0)
    assert row["lost"] == 250  # intended in [5.0 s, 7.5 s)
    assert row["duplicates"] == 3  # second 8 is inside, second 30 is not
    assert row["disconnects"] == 1
    assert row["reconnects"] == 1


def test_a_fault_without_effect_shows_none() -> None:
    window = Window("a1@lab", "latency", "proxy", 12 * S, 14 * S)
    (row,) = fault_effects([window], _traffic(), EVENTS)
    assert row["outage_s"] == 0.0 and row["outage_from_s"] is None
    assert row["lost"] == 0 and row["duplicates"] == 0 and row["disconnects"] == 0
    assert row["first_consume_after_s"] == 0.001
    assert row["back_to_95_percent_s"] == 0.0
    assert row["p99_during_ms"] == 1.0


def test_windows_pair_each_start_with_its_end() -> None:
    def at(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, UTC).isoformat()

    events = [
        {"agent": "a1", "action": "latency", "phase": "start", "target": "p", "time": at(10), "ms": "20"},
        {"agent": "a1", "action": "restart", "phase": "start", "target": "b", "time": at(11)},
        {"agent": "a1", "command": "h", "exit_code": 0, "output": ""},
        {"agent": "a1", "action": "restart", "phase": "end", "target": "b", "time": at(12.5)},
        {"agent": "a1", "action": "latency", "phase": "end", "target": "p", "time": at(40), "restored": "x"},
        {"agent": "a1", "action": "kill", "phase": "start", "target": "c", "time": at(50)},
        {"agent": "a1", "action": "kill", "phase": "end", "target": "c", "time": at(50), "error": "not running"},
    ]
    windows = windows_from_events(events)
    assert [(w.action, w.start_us, w.end_us, w.detail, w.error) for w in windows] == [
        ("latency", 10 * S, 40 * S, "ms=20", None),
        ("restart", 11 * S, int(12.5 * S), "", None),
        ("kill", 50 * S, 50 * S, "", "not running"),
    ]


def test_a_recovery_is_searched_for_up_to_the_next_faults_start_only() -> None:
    # The rate is back at 7.5 s; a second fault from 7.2 s would have it counted as the first's.
    stop = Window("a1@lab", "stop", "broker", 5 * S, 7 * S)
    then = Window("a1@lab", "latency", "proxy", int(7.2 * S), 9 * S)
    first, second = fault_effects([then, stop], _traffic(), EVENTS)
    assert first["fault"] == "stop broker" and first["back_to_95_percent_s"] is None
    # The second's "before" starts where the first's outage ended (7.501 s): nothing arrived in it.
    assert second["rate_before_per_s"] == 0.0 and second["back_to_95_percent_s"] is None
