"""Latency across hosts, corrected by measured clock offsets: hand-worked answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.synthetic import edit_peer_json, one_loss_one_duplicate

from protocol.clock_correction import untrusted_latency
from protocol.figures import TestFigures
from protocol.hdr import new_histogram
from protocol.results import ReceiverAccount
from protocol.test_record import TestRecord
from reports.clocks import Correction, clock_corrections, left_to_shift, shifted
from reports.summary import summarize


def _corrections(record: dict[str, Any]) -> dict[str, Correction]:
    """The corrections of a record's peers, given as test.json has them."""
    return clock_corrections(TestRecord.from_json(record).peers or ())


def _peer(
    name: str, role: str, host: str, offset_us: float, uncertainty_us: float, *, drift_us: float = 0
) -> dict[str, Any]:
    before = {"offset_us": offset_us, "uncertainty_us": uncertainty_us, "rtt_us": 2 * uncertainty_us}
    after = {**before, "offset_us": offset_us + drift_us}
    return {"name": name, "role": role, "host": host, "clock": {"before": before, "after": after}}


def test_a_receiver_on_another_host_is_shifted_by_the_offset_difference() -> None:
    # Sender clock 5 ms ahead of the coordinator's, receiver 3 ms behind: its latencies read
    # 8 ms short, and the correction adds them back, ± the two uncertainties.
    record = {"peers": [_peer("s1", "sender", "a", 5000, 300), _peer("r1", "receiver", "b", -3000, 200)]}
    (correction,) = _corrections(record).values()
    assert (correction.shift_us, correction.uncertainty_us) == (8000, 500)
    assert correction.reason == "receiver on b, senders on a" and correction.problems == ()


def test_one_host_means_one_clock_and_no_correction_where_the_offsets_agree() -> None:
    record = {"peers": [_peer("s1", "sender", "a", 5000, 300), _peer("r1", "receiver", "a", 4900, 200)]}
    assert _corrections(record) == {}
    # Offsets apart by more than their ± are two clocks, whatever the host names say.
    record = {"peers": [_peer("s1", "sender", "a", 5000, 300), _peer("r1", "receiver", "a", -3000, 200)]}
    assert _corrections(record)["r1"].shift_us == 8000
    # A receiver with a sender beside it and one elsewhere, on clocks 5 ms apart: one shift
    # cannot fit both, and that is named.
    record = {"peers": [_peer("s1", "sender", "a", 5000, 300), _peer("r1", "receiver", "a", 4900, 200)]}
    record["peers"].append(_peer("s2", "sender", "b", 0, 100))
    (problem,) = _corrections(record)["r1"].problems
    assert "senders whose clocks are 5.000 ms apart" in problem


def test_senders_on_several_hosts_and_drift_widen_the_uncertainty() -> None:
    record = {
        "peers": [
            _peer("s1", "sender", "a", 4000, 300),
            _peer("s2", "sender", "c", 6000, 100),
            _peer("r1", "receiver", "b", -3000, 200, drift_us=400),
        ]
    }
    (correction,) = _corrections(record).values()
    # Senders' mean 5000; receiver's mean -2800 (drifted 400 over the run).
    assert correction.shift_us == 7800
    # 200 + 200 (half the drift) + 300 (the worst sender) + 1000 (half the senders' spread).
    assert correction.uncertainty_us == 1700


def test_the_summary_carries_the_corrected_latency_and_its_error_bar(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path)
    peers = [_peer("s1", "sender", "a", 5000, 300)]
    peers += [_peer(r, "receiver", "b", -3000, 200) for r in ("r1", "r2")]
    (test / "test.json").write_text(json.dumps({"peers": peers}))
    s = summarize(test)
    # As measured (test_summary): p50 476000 µs, max 976000 µs; each 8000 µs more now.
    assert s.latency_us.p50 == pytest.approx(484_000, rel=1e-3)
    assert s.latency_us.max == pytest.approx(984_000, rel=1e-3)
    receivers = {p.name: p for p in s.peers if p.role == "receiver"}
    assert receivers["r1"].latency_correction_us == 8000 and receivers["r1"].latency_uncertainty_us == 500
    assert s.latency_clamped_by_correction == 0


@pytest.mark.parametrize(("replier_host", "replier_offset_us", "uncertainty_us"), [("b", -3000, 500), ("a", 5100, 0)])
def test_a_closed_systems_legs_carry_the_clocks_uncertainty(
    tmp_path: Path, replier_host: str, replier_offset_us: float, uncertainty_us: float
) -> None:
    # Requester on a, repliers on b: each leg crosses the two clocks and was corrected by their
    # offsets, ± the two uncertainties (300 + 200). On one host: one clock, nothing to carry.
    test = one_loss_one_duplicate(tmp_path)
    request_reply = {"clients": 1, "outstanding": 1, "replies": 40, "timed_out": 0, "late": 0, "duplicates": 0}
    edit_peer_json(test / "sender" / "s1" / "peer.json", lambda info: info.update(request_reply=request_reply))
    peers = [_peer("s1", "sender", "a", 5000, 300)]
    peers += [_peer(r, "receiver", replier_host, replier_offset_us, 200) for r in ("r1", "r2")]
    (test / "test.json").write_text(json.dumps({"peers": peers}))
    rr = summarize(test).request_reply
    assert rr is not None and rr.legs_uncertainty_us == uncertainty_us


@pytest.mark.parametrize(("applied_us", "p50_us"), [(8000, 476_000), (5000, 479_000), (0, 484_000)])
def test_what_a_receiver_added_as_it_recorded_is_not_added_again(tmp_path: Path, applied_us: int, p50_us: int) -> None:
    # The receivers recorded their samples already moved by `applied_us` (their peer.json says
    # so): the summary adds only what is left of the 8000 µs correction.
    test = one_loss_one_duplicate(tmp_path)
    for receiver in ("r1", "r2"):
        edit_peer_json(
            test / "receiver" / receiver / "peer.json", lambda info: info.update(latency_shift_us=applied_us)
        )
    peers = [_peer("s1", "sender", "a", 5000, 300)]
    peers += [_peer(r, "receiver", "b", -3000, 200) for r in ("r1", "r2")]
    (test / "test.json").write_text(json.dumps({"peers": peers}))
    assert summarize(test).latency_us.p50 == pytest.approx(p50_us, rel=1e-3)


def _behind(tmp_path: Path, receiver_shift_us: int) -> TestFigures:
    """The known answers' test with its receivers' clocks 500 ms behind the sender's: each
    latency reads 500 ms short, below zero (synthetic's 1 ms .. 976 ms become -499 ms ..)."""
    test = one_loss_one_duplicate(
        tmp_path, latencies_us=range(1000 - 500_000, 1_000_000 - 500_000, 25_000), receiver_shift_us=receiver_shift_us
    )
    peers = [_peer("s1", "sender", "a", 0, 30)]
    peers += [_peer(r, "receiver", "b", -500_000, 20) for r in ("r1", "r2")]
    (test / "test.json").write_text(json.dumps({"peers": peers}))
    return summarize(test)


def test_a_receiver_behind_its_senders_that_corrected_as_it_recorded_has_the_true_latency(tmp_path: Path) -> None:
    s = _behind(tmp_path, receiver_shift_us=500_000)
    # As measured on one clock (test_summary): p50 476000 µs, max 976000 µs.
    assert s.latency_us.p50 == pytest.approx(476_000, rel=1e-3)
    assert s.latency_us.max == pytest.approx(976_000, rel=1e-3)
    assert s.latency_clamped_by_correction == 0
    assert untrusted_latency(s, 0.1) is None


def test_clamped_first_and_corrected_after_would_read_the_skew_and_is_no_figure(tmp_path: Path) -> None:
    # A receiver that recorded as measured (no correction given): the 20 samples below zero
    # (r1's, of true latencies 1-476 ms) were clamped to 1 µs, and shifting afterwards makes
    # them all read 500 ms: a p50 of 500 ms where the truth is 476.
    s = _behind(tmp_path, receiver_shift_us=0)
    assert s.latency_clamped_by_correction == 20
    assert s.latency_us.p50 == pytest.approx(500_000, rel=1e-3)
    why = untrusted_latency(s, 0.1)
    assert why is not None and why.startswith("latency not measured: 20 samples read below zero")


def test_a_latency_with_its_mode_at_40_ms_gets_nagles_hint(tmp_path: Path) -> None:
    test = one_loss_one_duplicate(tmp_path, latencies_us=[41_000 + 50 * i for i in range(40)])
    (hint,) = summarize(test).hints
    assert hint.startswith("100% of the latency samples lie at 36-50 ms: the mark of Nagle's algorithm")
    assert summarize(one_loss_one_duplicate(tmp_path, test_id="t2")).hints == ()


def test_a_sample_the_receiver_clamped_is_not_counted_again_when_the_report_shifts_it(tmp_path: Path) -> None:
    # r1's 20 samples read below zero and were clamped (and counted) as it recorded; the report
    # then moves every sample by -2 ms: of r2's, the 1 ms one goes below zero (one more), and
    # r1's, at 1 µs already, are not counted twice: 21, not 41.
    test = one_loss_one_duplicate(tmp_path, latencies_us=range(1000 - 500_000, 1_000_000 - 500_000, 25_000))
    for receiver in ("r1", "r2"):
        edit_peer_json(test / "receiver" / receiver / "peer.json", lambda info: info.update(latency_shift_us=0))
    (test / "test.json").write_text(
        json.dumps(
            {"peers": [_peer("s1", "sender", "a", 0, 30)] + [_peer(r, "receiver", "b", 2000, 20) for r in ("r1", "r2")]}
        )
    )
    assert summarize(test).latency_clamped_by_correction == 20 + 1


def test_what_is_left_to_shift_is_the_correction_at_the_intervals_middle_less_what_was_added() -> None:
    # A correction from 0 to +1000 µs over ten seconds; an interval from 2 s to 4 s: 300 µs at 3 s.
    correction = Correction((0.0, 10_000_000.0), (0.0, 1000.0), 50.0)
    interval = new_histogram()
    interval.set_start_time_stamp(2000)
    interval.set_end_time_stamp(4000)
    receiver = ReceiverAccount(received=1, latency_shift_us=120)
    assert left_to_shift(correction, receiver, interval) == 300.0 - 120
    assert left_to_shift(None, receiver, interval) == 0.0  # what the receiver added stands


def test_a_shift_to_one_microsecond_exactly_is_no_clamp_and_clamps_add_up() -> None:
    histogram = new_histogram()
    for value, count in ((3, 2), (5, 4), (900, 1)):
        histogram.record_value(value, count)
    histogram.set_start_time_stamp(1000)
    histogram.set_end_time_stamp(2000)
    moved, clamped = shifted(histogram, -2)
    assert clamped == 0 and moved.get_min_value() == 1 and moved.get_total_count() == 7
    moved, clamped = shifted(histogram, -6)  # 3 and 5 fall below 1 µs: 2 + 4 samples
    assert clamped == 6
    assert [(i.value_iterated_to, i.count_at_value_iterated_to) for i in moved.get_recorded_iterator()] == [
        (1, 6),
        (894, 1),
    ]
    assert (moved.get_start_time_stamp(), moved.get_end_time_stamp()) == (1000, 2000)
    assert shifted(histogram, 0.4) == (histogram, 0)  # rounds to no shift
