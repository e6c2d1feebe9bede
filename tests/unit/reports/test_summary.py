"""The figures of a test folder against answers worked out by hand."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hdrh.log import HistogramLogWriter
from support.synthetic import T0_US, edit_peer_json, one_loss_one_duplicate

from protocol.figures import LittlesLaw, Rate, SenderFigures, TimeFigures
from protocol.hdr import new_histogram
from protocol.sequences import SequenceTracker, dump_bitsets
from protocol.test_record import TestRecord
from reports.summary import (
    DISTRIBUTION,
    _nagle_hints,
    generator_bound,
    inspector_shortfalls,
    rate_of,
    read_peers,
    read_test_record,
    summarize,
)


def rate_over_seconds(times_us: list[int]) -> Rate:
    return rate_of(Counter(t // 1_000_000 for t in times_us))


def test_rates_count_whole_seconds_only() -> None:
    # 3 in second 0 (partial), 10 / 8 / 10 in seconds 1-3, 1 in second 4 (partial).
    times = [T0_US + 700_000 + i * 100_000 for i in range(3)]
    times += [T0_US + s * 1_000_000 + i * 100_000 for s, n in ((1, 10), (2, 8), (3, 10)) for i in range(n)]
    times += [T0_US + 4_000_000]
    assert rate_over_seconds(times).to_json() == {"mean": pytest.approx(28 / 3), "min": 8.0, "max": 10.0}
    assert rate_over_seconds([]) == Rate(mean=0.0, min=0.0, max=0.0)
    # Under a second of data: the count itself, not a division by zero.
    assert rate_over_seconds([T0_US, T0_US + 10]).mean == 2.0


def test_the_second_a_warm_up_is_cut_at_is_whole() -> None:
    # 50 msg/s for 4 s from 0.61 s, 2 s of warm-up: counted from second 3 (the cut), 50 in it
    # and 30 in the 0.61 s of second 4. Second 3 is whole; it was left out as a first second,
    # and the 80 of the one and a part read as 80 (70 once rounded to whole intervals) a second.
    counts = Counter({3: 50, 4: 30})
    assert rate_of(counts, cut_s=3) == Rate(mean=50.0, min=50.0, max=50.0)
    assert rate_of(counts).mean == 80.0  # without the cut: under a whole second between, the count
    # A cut before the first count (nothing came in its first second) takes nothing whole.
    assert rate_of(Counter({5: 10, 6: 50, 7: 20}), cut_s=4) == Rate(mean=50.0, min=50.0, max=50.0)
    # A run that ended 0.18 s into the cut's second has no whole one: 8 in 0.18 s.
    assert rate_of(Counter({3: 8}), cut_s=3, span_s=0.18) == Rate(mean=8 / 0.18, min=8 / 0.18, max=8 / 0.18)
    assert rate_of(Counter({3: 8}), cut_s=3).mean == 8.0  # the time unknown: the count
    # Without a cut, from the first message to the last: 20 at 20 msg/s span 0.95 s, 19 gaps.
    assert rate_of(Counter({7: 6, 8: 14}), span_s=0.95).mean == pytest.approx(20.0)


def test_a_test_folder_with_one_loss_and_one_duplicate(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    s = summarize(test)
    assert (s.sent, s.received, s.lost, s.duplicates) == (40, 39, 1, 1)
    # Sends at 10/s: seconds 1, 2 and 3 are whole and hold 10 each.
    assert s.send_rate == Rate(mean=10.0, min=10.0, max=10.0)
    # Latency from the HDR logs: each receiver records what is new to it, so the duplicate across
    # receivers is there too: 40 values 1000, 26000, ..., 976000 µs; p50 is the 20th, 476000 µs.
    assert s.latency_samples == 40
    assert s.latency_us.p50 == pytest.approx(476_000, rel=1e-3)
    assert s.latency_us.max == pytest.approx(976_000, rel=1e-3)
    assert {p.name for p in s.peers} == {"s1", "r1", "r2"}


def test_the_summary_merges_the_writers_pieces_without_reading_a_row(tmp_path: Path) -> None:
    """Rows read (the pieces moved away) and pieces merged (the rate files emptied) give the
    same figures, and the known answer; a warm-up cut falls at the next whole second."""
    test = one_loss_one_duplicate(tmp_path)
    sender = test / "sender" / "s1"
    # Warm-up to T0 + 1.3 s: the cut is T0 + 2 s, leaving the sends of seconds 2, 3 and 4.
    warm_up = {"warm_up_s": 1.3, "warm_up_end_ns": (T0_US + 1_300_000) * 1000}
    edit_peer_json(sender / "peer.json", lambda info: info.update(warm_up))
    merged = summarize(test)
    # 10/s from T0 + 0.25 s, cut at T0 + 2 s: second 2 is the first (left out as partial),
    # second 3 whole with 10, second 4 the last (2).
    assert merged.send_rate == Rate(mean=10.0, min=10.0, max=10.0)
    # From the first send (T0 + 0.25 s + 10 µs) to the last arrival: message 38, sent at
    # T0 + 4.05 s, 976 ms on the way.
    assert merged.duration_s == pytest.approx(4.05 + 0.976 - 0.25001)

    pieces = sorted(test.glob("*/*/*-seconds.json"))
    assert len(pieces) == 3  # one per writer: s1, r1, r2
    # The same rows as a folder from before pieces existed: read row by row.
    rows_read = one_loss_one_duplicate(tmp_path / "again")
    edit_peer_json(rows_read / "sender" / "s1" / "peer.json", lambda info: info.update(warm_up))

    def without_pieces(peer: dict[str, Any]) -> None:
        peer["files"] = [name for name in peer["files"] if not name.endswith("-seconds.json")]

    for path in rows_read.glob("*/*/peer.json"):
        (path.parent / f"{path.parent.parent.name}-seconds.json").unlink()
        edit_peer_json(path, without_pieces)
    assert summarize(rows_read) == merged

    # Records of before file checks, whose rate files are emptied: a row read now would fail
    # ("not a Maestro rate file"), so the figures come from the pieces alone.
    for path in test.glob("*/*/peer.json"):
        edit_peer_json(path, lambda _: None, checked=False)
    for rate_file in test.glob("*/*/*.csv.gz"):
        rate_file.write_bytes(b"")
    assert summarize(test) == merged


def test_a_saturated_sender_marks_the_run_generator_bound(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    assert generator_bound(read_peers(test)) == []
    saturated = {
        "self_monitor": {"cpu_percent_mean": 97.0, "loop_lag_ms_max": 12.0},
        "schedule_lag_us": {"99": 250_000},
    }
    edit_peer_json(test / "sender" / "s1" / "peer.json", lambda info: info.update(saturated))
    (why,) = generator_bound(read_peers(test))
    assert why.startswith("sender s1 used 97 % of a core") and "schedule lag p99 250.0 ms" in why
    # ... and summary.json says so on the sender's row: not a SUT figure.
    (sender,) = [p for p in summarize(test).peers if p.role == "sender"]
    assert sender.generator_bound == why


@pytest.mark.parametrize(
    ("cpu", "lag_us", "hinted"),
    [(67.0, 613_000, True), (67.0, 99_000, False), (97.0, 613_000, False)],
    ids=["held-back", "on-schedule", "generator-bound"],
)
def test_a_sender_far_behind_its_schedule_and_not_busy_was_held_back_by_the_sut(
    tmp_path: Path, cpu: float, lag_us: int, hinted: bool
) -> None:
    test = one_loss_one_duplicate(tmp_path)
    monitor = {"self_monitor": {"cpu_percent_mean": cpu, "loop_lag_ms_max": 25.0}, "schedule_lag_us": {"99": lag_us}}
    edit_peer_json(test / "sender" / "s1" / "peer.json", lambda info: info.update(monitor))
    hints = summarize(test).hints
    if hinted:
        (hint,) = hints
        assert hint.startswith("sender s1 fell 613 ms behind its schedule at p99 while its process was not the limit")
    else:
        assert hints == ()  # on schedule; or the generator's own limit, which generator_bound names


def test_out_of_order_deliveries_are_summed_over_the_receivers(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    for receiver, late in (("r1", 2), ("r2", 1)):

        def arrived_late(info: dict[str, Any], late: int = late) -> None:
            for counts in info["per_sender"].values():
                counts["out_of_order"] = late

        edit_peer_json(test / "receiver" / receiver / "peer.json", arrived_late)
    (row,) = summarize(test).per_sender
    assert (row.lost, row.duplicates, row.out_of_order) == (1, 1, 3)


@pytest.mark.parametrize(
    ("samples", "errors", "flagged"),
    [
        (61, 0, None),  # 60 s at 1 s: 61 expected
        (31, 5, None),  # half and a bit: thin, not flagged
        (30, 31, "inspector rabbitmq on i1 collected 30 of about 61 samples (31 failed; last error: 401)"),
        (0, 61, "inspector rabbitmq on i1 collected no sample (61 failed; last error: 401)"),
    ],
)
def test_an_inspector_that_collected_too_little_is_flagged(
    tmp_path: Path, samples: int, errors: int, flagged: str | None
) -> None:
    test = one_loss_one_duplicate(tmp_path)
    folder = test / "inspector" / "i1"
    folder.mkdir(parents=True)
    inspector = {"interval_s": 1.0, "samples": samples, "errors": errors, "last_error": "401" if errors else None}
    info = {"name": "i1", "role": "inspector", "host": "h", "started_ns": 0, "ended_ns": 60 * 10**9}
    (folder / "peer.json").write_text(json.dumps(info | {"inspectors": {"rabbitmq": inspector}}))
    (row,) = [p for p in summarize(test).peers if p.role == "inspector"]
    # Written only where there is something to say (PeerFigures.to_json).
    assert row.inspector_shortfall == ((flagged,) if flagged else ())
    assert row.to_json().get("inspector_shortfall") == ([flagged] if flagged else None)
    assert inspector_shortfalls(read_peers(test)) == ([flagged] if flagged else [])


def _bucket_top(value: int) -> float:
    """The highest value of `value`'s bucket at 3 significant digits, as HdrHistogram reports a
    percentile: below 2048 every µs has its own; from 2**k on (k >= 11), 2**(k-10) share one."""
    unit = 1 << max(0, value.bit_length() - 11)
    return float((value // unit + 1) * unit - 1)


def test_the_whole_summary_of_the_known_answers_folder(tmp_path: Path) -> None:
    s = summarize(one_loss_one_duplicate(tmp_path))
    # 40 latencies 1000, 26000, ... 976000 µs; a percentile p is the ceil(40 p / 100)-th of them.
    latencies = [1000 + 25_000 * i for i in range(40)]

    def at(p: float) -> float:
        return _bucket_top(latencies[max(1, math.ceil(len(latencies) * p / 100)) - 1])

    assert s.to_json() == {
        "test_id": "t1",
        # From the first send (T0 + 0.25 s + 10 µs) to the last arrival: message 38, sent at
        # T0 + 4.05 s, 976 ms on the way.
        "duration_s": pytest.approx(5.026 - 0.25001, abs=1e-9),
        "sent": 40,
        "received": 39,
        "lost": 1,
        "duplicates": 1,
        "foreign": {},
        "skipped_by_sut": 0,
        # Sends 8, 10, 10, 10, 2 in seconds 0-4; arrivals (r1 at 0.251 + 0.125 k s, r2 at
        # 2.651 + 0.125 k s) 6, 8, 9, 8, 8, 1 in seconds 0-5: the first and last are partial.
        "send_rate": {"mean": 10.0, "min": 10.0, "max": 10.0},
        "receive_rate": {"mean": 8.25, "min": 8.0, "max": 9.0},
        "latency_us": {"p50": at(50), "p90": at(90), "p99": at(99), "p999": at(99.9), "max": at(100)},
        "latency_samples": 40,
        "latency_distribution_us": [[p, at(p) if p else 1000.0] for p in DISTRIBUTION],
        "per_sender": [
            {
                "sender": "s1/0",
                "key": "00000000000000a1",
                "sut": None,  # the synthetic sender names no URL, and counted neither of these
                "intended": None,
                "expected": 40,
                "accepted": None,
                "received": 39,
                "lost": 1,
                "lost_percent": 2.5,
                "duplicates": 1,
                "out_of_order": 0,
            }
        ],
        "accounting": {
            "intended": None,
            "sent": 40,
            "accepted": None,
            "received": 39,
            "per_sender": [
                {
                    "sender": "s1/0",
                    "sut": None,
                    "queue": None,
                    "topic": None,
                    "guarantee": "at-most-once",  # nothing acknowledged: what it may drop, not judged
                    "intended": None,
                    "sent": 40,
                    "accepted": None,
                    "received": 39,
                }
            ],
            "sut_counters": [],
        },
        "peers": [
            {"name": "r1", "role": "receiver", "host": "h", "failure": None, "received": 20},
            {"name": "r2", "role": "receiver", "host": "h", "failure": None, "received": 20},
            {"name": "s1", "role": "sender", "host": "h", "failure": None, "sent": 40},
        ],
        "latency_clamped_by_correction": 0,
        "hints": [],
        "latency_uncertainty_us": 0.0,
        "clock_problems": [],
        "clock_paths": [],
        "load_model": "open",
        "latency_untrusted": None,  # the verdict's (coordinator.outcome.results.judge), not the summary's
    }
    assert at(50) == 476_159.0 and at(100) == 976_383.0  # the rule, once by hand


def _edit(path: Path, **changes: object) -> None:
    edit_peer_json(path, lambda info: info.update(changes))


def test_streams_nobody_received_and_streams_nobody_sent_have_rows(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    # s1's second client sent 5 that no receiver saw; r1 saw 3 of a sender no peer.json names.
    _edit(
        test / "sender" / "s1" / "peer.json",
        sent=45,
        senders={"00000000000000a1": {"client": 0, "sent": 40}, "00000000000000b2": {"client": 1, "sent": 5}},
    )
    sequences = test / "receiver" / "r1" / "receiver-sequences.json"
    unknown = SequenceTracker()
    for sequence in (0, 1, 2):
        unknown.record(sequence)
    sequences.write_text(json.dumps(json.loads(sequences.read_text()) | dump_bitsets({0xC3: unknown})))
    info = json.loads((test / "receiver" / "r1" / "peer.json").read_text())
    info["per_sender"]["00000000000000c3"] = {"deliveries": 3}
    _edit(test / "receiver" / "r1" / "peer.json", per_sender=info["per_sender"], foreign={"no header": 2})
    _edit(test / "receiver" / "r2" / "peer.json", foreign={"no header": 1, "other test": 4}, skipped_by_sut=3)
    _edit(test / "receiver" / "r1" / "peer.json", skipped_by_sut=2)
    s = summarize(test)
    assert (s.sent, s.received, s.lost, s.duplicates) == (45, 39 + 3, 1 + 5, 1)
    assert s.foreign == {"no header": 3, "other test": 4} and s.skipped_by_sut == 5
    rows = {row.key: row for row in s.per_sender}
    assert list(rows) == ["00000000000000a1", "00000000000000b2", "00000000000000c3"]
    assert rows["00000000000000b2"] == SenderFigures(
        sender="s1/1",
        key="00000000000000b2",
        sut=None,
        intended=None,
        expected=5,
        accepted=None,
        received=0,
        lost=5,
        lost_percent=100.0,
        duplicates=0,
        out_of_order=0,
    )
    assert rows["00000000000000c3"] == SenderFigures(
        sender="00000000000000c3",  # no peer names it: its key stands for it
        key="00000000000000c3",
        sut=None,
        intended=None,
        expected=0,
        accepted=None,
        received=3,
        lost=0,
        lost_percent=0.0,
        duplicates=0,
        out_of_order=0,
    )


def test_a_closed_systems_figures_merge_its_requesters(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    t0_ms = T0_US // 1000
    # Warm-up to T0 + 1.3005 s: the response log's interval at T0 + 1.3 s (its stamps are whole
    # ms) is the first after it; the one at T0 is left out.
    with (test / "sender" / "s1" / "requester-response.hlog").open("w") as f:
        writer = HistogramLogWriter(f)
        for start_ms, value, count in ((t0_ms, 50_000, 1), (t0_ms + 1300, 100_000, 3)):
            interval = new_histogram()
            interval.record_value(value, count)
            interval.set_start_time_stamp(start_ms)
            interval.set_end_time_stamp(start_ms + 1000)
            writer.output_interval_histogram(interval)

    def requester(**figures: object) -> dict[str, object]:
        return {"timed_out": 0, "late": 0, "duplicates": 0, "outstanding": 1} | figures

    _edit(
        test / "sender" / "s1" / "peer.json",
        warm_up_s=1.3,
        warm_up_end_ns=(T0_US + 1_300_500) * 1000,
        request_reply=requester(
            clients=2, replies=40, timed_out=1, late=2, duplicates=3, skipped_by_sut=4, foreign={"x": 1},
            think_time_mean_s=0.5, think_time_measured_s=0.6,
        ),
    )  # fmt: skip
    folder = test / "sender" / "s2"
    folder.mkdir()
    (folder / "peer.json").write_text(
        json.dumps(
            {
                "name": "s2",
                "role": "sender",
                "sent": 12,
                "request_reply": requester(
                    clients=1, outstanding=2, replies=10, late=1, skipped_by_sut=1, think_time_mean_s=1.0
                ),
            }
        )
    )
    with (test / "sender" / "s1" / "requester-request-leg.hlog").open("w") as f:
        writer = HistogramLogWriter(f)
        leg = new_histogram()
        leg.record_value(41_000, 2)
        leg.set_start_time_stamp(t0_ms + 2000)
        leg.set_end_time_stamp(t0_ms + 3000)
        writer.output_interval_histogram(leg)
    s = summarize(test)
    assert s.load_model == "closed"
    # s2 names no stream of its own: s1's is the only one, and keeps its name.
    assert s.sent == 40 and [row.sender for row in s.per_sender] == ["s1/0"]
    rr = s.request_reply
    assert rr is not None
    (hint,) = rr.hints
    assert hint.startswith("100% of the request leg samples lie at 36-50 ms")
    assert (rr.replies, rr.timed_out, rr.late, rr.duplicates, rr.skipped_by_sut, rr.requests) == (50, 1, 3, 3, 5, 52)
    assert rr.foreign == {"x": 1}
    # Waiting: 2 x 1 + 1 x 2 = 4; think time weighted by them: (2 x 0.5 + 2 x 1.0) / 4 planned,
    # (2 x 0.6 + 2 x 1.0) / 4 lived (s2 measured none: its plan stands in).
    assert (rr.think_time_mean_s, rr.think_time_measured_s) == (0.75, 0.8)
    assert rr.throughput_per_s == 10.0  # the answered requests' rate, after warm-up
    assert rr.response_time_us == TimeFigures(
        p50=100_031.0,
        p90=100_031.0,
        p99=100_031.0,
        p999=100_031.0,
        mean=100_000.0,
        max=100_031.0,
        samples=3,
    )
    assert rr.request_leg_us.samples == 2 and rr.reply_leg_us.samples == 0
    assert rr.legs_uncertainty_us == 0.0
    # Little's law: 10/s x (0.1 s + 0.8 s) = 9 against the 4 waiting.
    law = rr.littles_law
    assert (law.clients, law.throughput_x_time, law.deviation_percent) == (4.0, pytest.approx(9.0), 125.0)


def test_the_peers_and_record_a_caller_read_already_are_the_ones_summed(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    peers = read_peers(test)
    senders_only = [(d, p) for d, p in peers if p.role == "sender"]
    s = summarize(test, peers=senders_only)
    assert (s.sent, s.received, s.lost) == (40, 0, 40)
    # A record whose receivers run 1 ms behind the sender: their latencies move by +1 ms.
    clock = {"before": {"offset_us": 0.0, "uncertainty_us": 5.0}}
    behind = {"before": {"offset_us": -1000.0, "uncertainty_us": 5.0}}
    record = {
        "peers": [{"name": "s1", "role": "sender", "host": "a", "clock": clock}]
        + [{"name": r, "role": "receiver", "host": "b", "clock": behind} for r in ("r1", "r2")]
    }
    assert summarize(test, record=TestRecord.from_json(record)).latency_uncertainty_us == 10.0
    assert summarize(test).latency_uncertainty_us == 0.0  # no test.json in the folder


def test_a_warm_up_under_a_second_is_still_cut(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    _edit(test / "sender" / "s1" / "peer.json", warm_up_s=0.5, warm_up_end_ns=(T0_US + 3_000_000) * 1000)
    # Cut at T0 + 3 s: sends of seconds 3 (10: whole, the cut's) and 4 (2, the last: partial)
    # only; the rate is second 3's, the 10 a second sent (12 when the two were taken as one).
    assert summarize(test).send_rate == Rate(mean=10.0, min=10.0, max=10.0)


def test_a_requester_without_clients_divides_by_none(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    rr = {"clients": 0, "outstanding": 1, "replies": 0, "timed_out": 0, "late": 0, "duplicates": 0}
    _edit(test / "sender" / "s1" / "peer.json", request_reply=rr)
    figures = summarize(test).request_reply
    assert figures is not None
    assert (figures.think_time_mean_s, figures.think_time_measured_s) == (0.0, 0.0)
    assert figures.littles_law == LittlesLaw(clients=0.0, throughput_x_time=0.0, deviation_percent=0.0)


def test_a_folder_with_no_peers_or_no_senders_lasted_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    s = summarize(empty)
    assert (s.duration_s, s.sent, s.received, s.latency_samples) == (0.0, 0, 0, 0)
    test = one_loss_one_duplicate(tmp_path)
    for path in (test / "sender" / "s1").iterdir():
        path.unlink()
    (test / "sender" / "s1").rmdir()
    s = summarize(test)
    assert (s.duration_s, s.sent, s.received, s.lost) == (0.0, 0, 39, 0)


def test_a_warm_up_ending_half_a_microsecond_after_a_second_cuts_at_that_second(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    _edit(test / "sender" / "s1" / "peer.json", warm_up_s=2.0, warm_up_end_ns=(T0_US + 2_000_000) * 1000 + 500)
    # Cut at T0 + 2 s (the µs the warm-up ended in): seconds 2 (first), 3 (10, whole), 4 (last).
    assert summarize(test).send_rate == Rate(mean=10.0, min=10.0, max=10.0)


def test_clock_paths_and_the_uncertainty_to_a_tenth(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    sender_clock = {"samples": [[T0_US, 0.0, 5.02]], "path": "udp"}
    behind = {"before": {"offset_us": -1000.0, "uncertainty_us": 5.02}}
    record = {
        "peers": [{"name": "s1", "role": "sender", "host": "a", "clock": sender_clock}]
        + [{"name": r, "role": "receiver", "host": "b", "clock": behind} for r in ("r1", "r2")]
    }
    s = summarize(test, record=TestRecord.from_json(record))
    assert s.clock_paths == ("mqtt", "udp")  # the receivers' through the broker, the sender's direct
    assert s.latency_uncertainty_us == 10.0 and isinstance(s.latency_uncertainty_us, float)


def test_a_second_without_arrivals_counts_as_zero_in_the_rates() -> None:
    # Seconds 1 and 3 whole with 10 each, second 2 silent (a broker restart): min 0, mean 20 / 3.
    times = [T0_US + 500_000] + [T0_US + s * 1_000_000 + i * 100_000 for s in (1, 3) for i in range(10)]
    times += [T0_US + 4_000_000]
    assert rate_over_seconds(times).to_json() == {"mean": pytest.approx(20 / 3), "min": 0.0, "max": 10.0}


def test_test_json_is_read_through_the_folder_descriptor_and_never_through_a_link(tmp_path: Path) -> None:
    folder = tmp_path / "t1"
    folder.mkdir()
    (folder / "test.json").write_text(json.dumps({"test_id": "t1", "outcome": "success"}))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # Through the descriptor alone: the path given is not read.
        assert read_test_record(Path("/nonexistent"), dir_fd=fd) == TestRecord("t1", outcome="success")
    finally:
        os.close(fd)
    # A link named test.json, to a record elsewhere, is not followed, by path or by descriptor.
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"test_id": "elsewhere"}))
    linked = tmp_path / "t2"
    linked.mkdir()
    (linked / "test.json").symlink_to(outside)
    assert read_test_record(linked) is None
    fd = os.open(linked, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_test_record(Path("/nonexistent"), dir_fd=fd) is None
    finally:
        os.close(fd)
    # A record that is not an object is no record.
    (folder / "test.json").write_text("[1, 2]")
    assert read_test_record(folder) is None


@pytest.mark.parametrize(
    ("run", "flagged"),
    [
        ((1_795_000_000 * 10**9, 60.0, 1.0, 30), "30 of about 61"),  # on the wall clock, as peers record
        ((0, 59.0, 1.0, 30), None),  # 60 expected: exactly half is not under half
        ((0, 60.0, 0.0, 1), None),  # no interval: one sample at the start is all
        ((0, 0.5, 0.125, 2), "2 of about 5"),  # under a second at 125 ms
    ],
)
def test_an_inspectors_expected_samples_at_their_edges(
    tmp_path: Path, run: tuple[int, float, float, int], flagged: str | None
) -> None:
    started_ns, ran_s, interval_s, samples = run  # started (ns), ran for (s), interval (s), samples
    test = one_loss_one_duplicate(tmp_path)
    folder = test / "inspector" / "i1"
    folder.mkdir(parents=True)
    inspector = {"interval_s": interval_s, "samples": samples, "errors": 0, "last_error": None}
    ended_ns = started_ns + int(ran_s * 1e9)
    info = {"name": "i1", "role": "inspector", "host": "h", "started_ns": started_ns, "ended_ns": ended_ns}
    (folder / "peer.json").write_text(json.dumps(info | {"inspectors": {"rabbitmq": inspector}}))
    expected = [f"inspector rabbitmq on i1 collected {flagged} samples (0 failed)"] if flagged else []
    assert inspector_shortfalls(read_peers(test)) == expected


@pytest.mark.parametrize(
    ("cpu", "loop_ms", "bound"),
    [(89.9, 99.9, False), (90.0, 0.0, True), (0.0, 100.0, True)],
)
def test_generator_bound_from_90_percent_of_a_core_or_a_loop_100_ms_late(
    tmp_path: Path, cpu: float, loop_ms: float, bound: bool
) -> None:
    test = one_loss_one_duplicate(tmp_path)
    busy = {"self_monitor": {"cpu_percent_mean": cpu, "loop_lag_ms_max": loop_ms}, "schedule_lag_us": None}
    edit_peer_json(test / "sender" / "s1" / "peer.json", lambda info: info.update(busy))
    found = generator_bound(read_peers(test))
    assert found == (
        [
            f"sender s1 used {cpu:.0f} % of a core on average (event loop up to {loop_ms:.0f} ms late, schedule "
            "lag p99 0.0 ms): these figures show the generator's limit, not the SUT's"
        ]
        if bound
        else []
    )


def _nagle(share_at_40_ms: int, of: int) -> Any:
    histogram = new_histogram()
    histogram.record_value(40_000, share_at_40_ms)
    histogram.record_value(1_000, of - share_at_40_ms)
    return histogram


def test_a_nagle_hint_from_a_quarter_of_the_samples_at_36_to_50_ms() -> None:
    hint = (
        "25% of the reply leg samples lie at 36-50 ms: the mark of Nagle's algorithm against delayed ACKs (40 ms) "
        "on some connection of the path; TCP_NODELAY on the client or the broker (Mosquitto: set_tcp_nodelay true) "
        "removes it"
    )
    assert _nagle_hints({"reply leg": _nagle(25, 100)}) == [hint]
    assert _nagle_hints({"reply leg": _nagle(24, 100)}) == []
    assert _nagle_hints({"reply leg": _nagle(1, 10)}) == []
