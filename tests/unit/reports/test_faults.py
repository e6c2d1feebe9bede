"""Fault effects against a hand-worked scenario: 100 msg/s, the broker gone from 5.0 s to 7.5 s."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from protocol.ratefile import RateFileWriter
from protocol.results import PeerRecord, ReceiverAccount, SenderAccount
from reports.faults import (
    Cells,
    Gather,
    PeerEvents,
    Window,
    _FileCells,
    fault_effects,
    gather_in_memory,
    peer_events,
    windows_from_events,
)

S = 1_000_000  # µs


def _traffic(delayed_us: tuple[int, int] | None = None) -> Gather:
    """`delayed_us`: messages intended in [from, to) take 20 ms more (a latency fault)."""
    intended = np.arange(2000) * 10_000  # 0.00 s .. 19.99 s, every 10 ms
    # Sent on time; everything intended in [5.0 s, 7.5 s) is lost; the rest arrives 1 ms later.
    arrived = intended[(intended < 5 * S) | (intended >= 7.5 * S)]
    latency = np.full(len(arrived), 1000)
    if delayed_us is not None:
        latency[(arrived >= delayed_us[0]) & (arrived < delayed_us[1])] += 20_000
    # Two senders and two receivers, each with a share of the files, as Spark reads them.
    return gather_in_memory(
        [
            ("sender", intended[::2], intended[::2]),
            ("sender", intended[1::2], intended[1::2]),
            ("receiver", arrived[:700], arrived[:700] + latency[:700]),
            ("receiver", arrived[700:], arrived[700:] + latency[700:]),
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


def test_latency_injected_inside_the_window_is_its_p99_and_not_its_neighbours() -> None:
    # +20 ms on everything intended in [12 s, 14 s): during reads 21 ms, before and after 1 ms.
    window = Window("a1@lab", "latency", "proxy", 12 * S, 14 * S, "ms=20")
    (row,) = fault_effects([window], _traffic(delayed_us=(12 * S, 14 * S)), EVENTS)
    assert (row["p99_before_ms"], row["p99_after_ms"]) == (1.0, 1.0)
    # 21,000 µs to the histogram's precision there (3 digits: buckets of 16 µs from 16,384 µs).
    assert row["p99_during_ms"] == pytest.approx(21.0, abs=0.016)
    assert row["lost"] == 0 and row["outage_s"] == 0.0


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


def test_spark_tasks_turn_each_listed_rate_file_into_its_cells(tmp_path: Path) -> None:
    # What Spark's Python workers run: the listed files read, each one's cells a record batch.
    # A per-file function with a known answer: one cell (window 3, kind 7, key = the file's
    # row count) valued by its first ata; receivers get a second cell.
    def per_file(role: str, eta: np.ndarray, ata: np.ndarray) -> Cells:
        rows = [3, 3] if role == "receiver" else [3]
        return Cells(
            np.array(rows), np.array([7, 8][: len(rows)]), np.full(len(rows), len(eta)), ata[: len(rows)], ata[:1]
        )

    paths = []
    for stem, base in (("sender", 5 * S), ("receiver", 9 * S)):
        writer = RateFileWriter(tmp_path / stem, stem, {})
        writer.write_many(np.arange(4) * 1000 + base, np.arange(4) * 1000 + base + 10)
        writer.close()
        paths += [(stem, str(p)) for p in writer.paths]
    listing = pa.RecordBatch.from_pydict({"role": [r for r, _ in paths], "path": [p for _, p in paths]})
    batches = list(_FileCells(per_file)(iter([listing])))
    assert [b.schema.names for b in batches] == [["window", "kind", "key", "value"]] * 2
    assert [b.to_pydict() for b in batches] == [
        {"window": [3], "kind": [7], "key": [4], "value": [5 * S + 10]},
        {"window": [3, 3], "kind": [7, 8], "key": [4, 4], "value": [9 * S + 10, 9 * S + 1010]},
    ]
    assert all(b.schema.field(name).type == pa.int64() for b in batches for name in b.schema.names)


def test_peer_events_add_up_duplicates_and_sort_the_connection_events() -> None:
    def receiver(duplicates: dict[str, int], reconnects_ns: tuple[int, ...]) -> PeerRecord:
        account = ReceiverAccount(received=1, duplicates_per_s=duplicates, reconnects_ns=reconnects_ns)
        return PeerRecord("r", "receiver", receiver=account)

    sender = PeerRecord(
        "s",
        "sender",
        sender=SenderAccount(
            sent=1, warm_up_end_ns=0, warm_up_s=0.0, disconnects_ns=(9_000_999, 2_000_000), reconnects_ns=(8_000,)
        ),
    )
    peers = [
        (Path("r1"), receiver({"8": 2, "9": 1}, (7_000_500,))),
        (Path("s1"), sender),
        (Path("r2"), receiver({"9": 4}, (3_000,))),
        (Path("i1"), PeerRecord("i", "inspector")),
    ]
    events = peer_events(peers)
    assert events.duplicates_per_s == {8: 2, 9: 5}
    assert events.disconnects_us.tolist() == [2_000, 9_000]  # ns to µs, in order
    assert events.reconnects_us.tolist() == [3, 8, 7_000]  # receivers' and senders' together
    assert events.disconnects_us.dtype == events.reconnects_us.dtype == np.int64
    nothing = peer_events([])
    assert nothing.duplicates_per_s == {}
    assert nothing.disconnects_us.dtype == nothing.reconnects_us.dtype == np.int64


def test_peer_events_keep_every_microsecond_of_wall_clock_nanoseconds() -> None:
    # 1.8e18 ns: a float division would round ...999.999 µs up to the next µs.
    late_ns = 1_800_000_000_000_999_999

    def sender(name: str, at_ns: int) -> tuple[Path, PeerRecord]:
        account = SenderAccount(
            sent=1, warm_up_end_ns=0, warm_up_s=0.0, disconnects_ns=(at_ns,), reconnects_ns=(at_ns,)
        )
        return Path(name), PeerRecord(name, "sender", sender=account)

    receiver = PeerRecord("r", "receiver", receiver=ReceiverAccount(received=1, reconnects_ns=(late_ns + 1,)))
    events = peer_events([sender("s1", late_ns), sender("s2", late_ns - 1000), (Path("r"), receiver)])
    assert events.disconnects_us.tolist() == [late_ns // 1000 - 1, late_ns // 1000]
    assert events.reconnects_us.tolist() == [late_ns // 1000 - 1, late_ns // 1000, late_ns // 1000 + 1]


def test_windows_without_agent_or_target_and_the_detail_they_keep() -> None:
    def at(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, UTC).isoformat()

    events = [
        {"action": "pause", "phase": "start", "time": at(10), "ms": 5, "note": "", "x": None, "duration_s": 3},
        {"action": "pause", "phase": "running", "time": at(11)},  # neither start nor end
        {"action": "pause", "phase": "end", "time": at(13), "error": None, "restored": "yes"},
        {"action": "kill", "phase": "start", "time": at(20), "error": "e", "restored": "r", "signal": "TERM"},
        {"action": "kill", "phase": "end", "time": at(21)},
        {"action": "lost", "phase": "start"},  # no time: no action
        {"action": "stray", "phase": "end", "time": at(30)},  # no start: no window
    ]
    assert windows_from_events(events) == [
        Window("", "pause", "", 10 * S, 13 * S, "ms=5", None),
        Window("", "kill", "", 20 * S, 21 * S, "signal=TERM", None),
    ]


T0 = 1_800_000_000 * S  # a wall-clock start, as rate files have: row times are µs since the epoch


def _traffic_at(t0_us: int, pause_from_us: int, pause_to_us: int, gap_us: int = 10_000) -> Gather:
    """Sent every `gap_us` from `t0_us` for 20 s, all on time; everything intended in [from, to)
    lost, the rest arriving 1 ms later."""
    intended = t0_us + np.arange(20 * S // gap_us) * gap_us
    arrived = intended[(intended < t0_us + pause_from_us) | (intended >= t0_us + pause_to_us)]
    return gather_in_memory([("sender", intended, intended), ("receiver", arrived, arrived + 1000)])


def test_a_window_is_placed_from_the_tests_first_message_and_counts_its_edges() -> None:
    # The test began at T0 (its first send); the broker was stopped from 5.0004 s to 7.0006 s
    # and messages intended in [5.0 s, 7.5 s) were lost: the last arrival before is 4.991 s, the
    # first after 7.501 s.
    window = Window("a1", "stop", "broker", T0 + 5_000_400, T0 + 7_000_600)
    span_end, after_to = T0 + 7_501_000, T0 + 17_501_000  # the outage's end; ten seconds after it
    events = PeerEvents(
        # Seconds (of the epoch) 5 to 17 are the window's: 4 and 18 are not.
        duplicates_per_s={T0 // S + 4: 100, T0 // S + 5: 1, T0 // S + 17: 2, T0 // S + 18: 200},
        disconnects_us=np.array([T0 + 5_000_399, T0 + 5_000_400, span_end, span_end + 1]),
        reconnects_us=np.array([T0 + 5_000_399, T0 + 5_000_400, after_to, after_to + 1]),
    )
    (row,) = fault_effects([window], _traffic_at(T0, 5 * S, 7_500_000), events)
    assert row == {
        "agent": "a1",
        "fault": "stop broker",
        "error": None,
        "start_s": 5.0,
        "end_s": 7.001,
        "outage_s": 2.51,
        "outage_from_s": 4.991,
        "first_publish_after_s": 0.009,  # the send intended at 7.01 s
        "first_consume_after_s": 0.5,  # 7.501 s
        # 500 arrivals from the first (0.001 s) to the fault's start: 100.01 a second.
        "rate_before_per_s": 100.0,
        # From 7.0006 s, a second's arrivals reach 95 from the step at 7.5006 s.
        "back_to_95_percent_s": 0.5,
        "p99_before_ms": 1.0,
        "p99_during_ms": None,
        "p99_after_ms": 1.0,
        # Intended in the span [5.0004 s, 7.501 s): 5.01 s to 7.50 s, 250; of them 7.50 s arrived.
        "lost": 249,
        "duplicates": 3,
        "disconnects": 2,
        "reconnects": 2,
    }


def test_a_pause_is_an_outage_only_beyond_five_typical_gaps_and_100_ms() -> None:
    window = Window("a1", "pause", "broker", T0 + 5 * S, T0 + 5 * S + 1)

    def outage(gap_us: int, lost_us: int) -> float:
        (row,) = fault_effects([window], _traffic_at(T0, 5 * S, 5 * S + lost_us, gap_us))
        return float(row["outage_s"])

    # Every 10 ms: five gaps are 50 ms, so 100 ms is the bound, and a pause of 100 ms is none.
    assert outage(10_000, 90_000) == 0.0  # arrivals 100 ms apart
    assert outage(10_000, 100_000) == 0.11
    # Every 30 ms: five gaps are 150 ms. A pause of 150 ms is none; of 180 ms, one.
    assert outage(30_000, 120_000) == 0.0
    assert outage(30_000, 150_000) == 0.18


def test_the_typical_gap_is_the_median_of_those_before_the_fault() -> None:
    # Gaps before the fault: 10 ms and 40 ms in turn (median 40 ms: five of them 200 ms; a third
    # of the way up the sorted gaps is 10 ms, five of which are 50 ms). A 190 ms pause is no outage.
    intended = T0 + np.cumsum(np.tile([10_000, 40_000], 200))
    arrived = intended[(intended < T0 + 5 * S) | (intended >= T0 + 5 * S + 140_000)]
    gather = gather_in_memory([("sender", intended, intended), ("receiver", arrived, arrived + 1000)])
    window = Window("a1", "pause", "broker", T0 + 5 * S, T0 + 5 * S + 1)
    (row,) = fault_effects([window], gather)
    assert row["outage_s"] == 0.0


def test_an_outage_ending_exactly_a_second_after_the_fault_is_found_whole() -> None:
    # Lost: intended in [5.0 s, 7.0 s); the first arrival after is 7.001 s, the end of the
    # second of slack after a fault that ended at 6.001 s.
    window = Window("a1", "stop", "broker", T0 + 5 * S, T0 + 6_001_000)
    (row,) = fault_effects([window], _traffic_at(T0, 5 * S, 7 * S))
    assert (row["outage_from_s"], row["outage_s"]) == (4.991, 2.01)


def test_a_pause_begun_within_the_second_after_the_fault_is_its_outage() -> None:
    window = Window("a1", "stop", "broker", T0 + 5 * S, T0 + 5 * S + 1)
    (row,) = fault_effects([window], _traffic_at(T0, 5_500_000, 6 * S))
    assert (row["outage_from_s"], row["outage_s"]) == (5.491, 0.51)


def test_arrivals_that_stopped_long_before_the_fault_start_its_outage_at_the_last_of_them() -> None:
    # Arrivals stop at 2 s (more than ten seconds before the fault at 15 s) and resume at 16 s.
    window = Window("a1", "stop", "broker", T0 + 15 * S, T0 + 15_500_000)
    (row,) = fault_effects([window], _traffic_at(T0, 2 * S, 16 * S))
    assert (row["outage_from_s"], row["outage_s"]) == (1.991, 14.01)


def test_each_of_two_faults_counts_its_own_loss() -> None:
    first = Window("a1", "stop", "broker", T0 + 5 * S, T0 + 5_000_001)
    second = Window("a1", "stop", "broker", T0 + 12 * S, T0 + 12_000_001)
    intended = T0 + np.arange(2000) * 10_000
    lost = ((intended >= T0 + 5 * S) & (intended < T0 + 5_500_000)) | (
        (intended >= T0 + 12 * S) & (intended < T0 + 12_300_000)
    )
    arrived = intended[~lost]
    gather = gather_in_memory([("sender", intended, intended), ("receiver", arrived, arrived + 1000)])
    one, two = fault_effects([first, second], gather)
    # Each span runs from its fault's start to its outage's end (the first arrival after it):
    # the 50 and the 30 lost; the arrival that ends each outage was intended in its span too.
    assert (one["lost"], two["lost"]) == (50, 30)
    assert (one["outage_s"], two["outage_s"]) == (0.51, 0.31)


def test_empty_rate_files_and_none_at_all_give_a_row_of_nothing() -> None:
    window = Window("a1", "stop", "broker", T0 + 5 * S, T0 + 6 * S)
    none = np.empty(0, np.int64)
    with_empties = gather_in_memory(
        [("sender", none, none), ("receiver", none, none), ("receiver", np.array([T0 + S]), np.array([T0 + S + 1000]))]
    )
    (row,) = fault_effects([window], with_empties)
    # From the one arrival (1.001 s): one in the 3.999 s before the fault.
    assert (row["start_s"], row["outage_s"], row["lost"], row["rate_before_per_s"]) == (3.999, 0.0, 0, 0.3)
    (row,) = fault_effects([window], gather_in_memory([]))
    assert row["start_s"] == round((T0 + 5 * S) / 1e6, 3)  # no first message: from the epoch
    assert (row["lost"], row["first_consume_after_s"], row["p99_before_ms"], row["back_to_95_percent_s"]) == (
        0,
        None,
        None,
        None,
    )
    assert fault_effects([], with_empties) == []


def test_a_fault_half_a_millisecond_in_rounds_from_the_tests_start() -> None:
    (row,) = fault_effects([Window("a1", "pause", "p", 500, 600)], _traffic())
    assert (row["start_s"], row["end_s"]) == (0.001, 0.001)  # 0.0005 s and 0.0006 s, from 0


def test_a_recovery_is_searched_past_a_fault_that_began_before_this_one_ended() -> None:
    # The stop (5-7 s) with a latency fault inside it (6-6.5 s), or one from its very end (7 s):
    # neither begins after the stop ended, so the stop's recovery (at 7.5 s) is searched past
    # them; one from 7.2 s would stop the search (test_a_recovery_is_searched_for_up_to_...).
    stop = Window("a1", "stop", "broker", 5 * S, 7 * S)
    for other in (
        Window("a1", "latency", "proxy", 6 * S, int(6.5 * S)),
        Window("a1", "latency", "proxy", 7 * S, 8 * S),
    ):
        assert fault_effects([stop, other], _traffic(), EVENTS)[0]["back_to_95_percent_s"] == 0.5


def test_a_fault_late_in_a_long_test_keeps_its_milliseconds() -> None:
    # One message a second for 3000 s; a stop from 1500.0004 s to 1600.0006 s, and everything
    # intended in [1500 s, 2500 s) lost: figures of a thousand seconds, to the millisecond.
    intended = T0 + np.arange(3000) * S
    arrived = intended[(intended < T0 + 1500 * S) | (intended >= T0 + 2500 * S)]
    gather = gather_in_memory([("sender", intended, intended), ("receiver", arrived, arrived + 1000)])
    (row,) = fault_effects([Window("a1", "stop", "broker", T0 + 1500 * S + 400, T0 + 1600 * S + 600)], gather)
    assert (row["start_s"], row["end_s"]) == (1500.0, 1600.001)
    assert (row["outage_from_s"], row["outage_s"]) == (1499.001, 1001.0)
    assert (row["first_publish_after_s"], row["first_consume_after_s"]) == (0.999, 900.0)
    assert row["lost"] == 1000 - 1  # intended in [1500.0004 s, 2500.001 s): 1501 s .. 2500 s; 2500 s arrived
