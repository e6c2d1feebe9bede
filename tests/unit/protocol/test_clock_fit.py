"""Clock offsets over a test: the exchange's arithmetic, the drift fit, steps, and the rule that
a latency whose clocks are not known well enough is no figure. Known answers throughout: the
true offsets are made up, and every estimate is held against them."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.clock_correction import (
    ClockFit,
    ClockStep,
    Correction,
    clock_corrections,
    fit_clock,
    peer_fit,
    untrusted_latency,
)
from protocol.clock_probe import PROBE_BYTES, Exchange, answer
from protocol.figures import TestFigures
from protocol.test_record import PeerEntry, TestRecord

S = 1_000_000  # µs in a second
T0 = 1_800_000_000 * S  # some wall time, µs


def _corrections(record: dict[str, Any]) -> dict[str, Correction]:
    """The corrections of a record's peers, given as test.json has them."""
    return clock_corrections(TestRecord.from_json(record).peers or ())


def _fit(peer: dict[str, Any]) -> ClockFit | None:
    return peer_fit(PeerEntry.from_json(peer))


def _exchange(true_offset_ns: int, out_ns: int, held_ns: int, back_ns: int, t1: int = 10**18) -> Exchange:
    """A probe sent at t1 (coordinator), taking `out_ns` there, held `held_ns` by the peer,
    `back_ns` back; the peer's clock reads `true_offset_ns` ahead."""
    t2 = t1 + out_ns + true_offset_ns
    t3 = t2 + held_ns
    t4 = t1 + out_ns + held_ns + back_ns
    return Exchange(t1, t2, t3, t4)


def test_an_exchange_gives_the_offset_and_the_round_trip_without_the_peers_hold() -> None:
    e = _exchange(true_offset_ns=50_000_000, out_ns=40_000, held_ns=300_000, back_ns=40_000)
    assert e.offset_ns == 50_000_000
    assert e.rtt_ns == 80_000
    assert e.uncertainty_ns == 41_000  # half the round trip and a µs of reading
    assert e.at_ns == 10**18 + 190_000


def test_a_lopsided_exchange_is_off_by_half_the_difference_and_its_bound_still_holds() -> None:
    # A stock broker's Nagle delay on the way back only: 40 ms one way, 0.1 ms the other.
    e = _exchange(true_offset_ns=-20_000_000, out_ns=100_000, held_ns=0, back_ns=40_000_000)
    assert e.offset_ns == -20_000_000 - (40_000_000 - 100_000) / 2
    assert abs(e.offset_ns - -20_000_000) <= e.uncertainty_ns


@given(
    offset=st.integers(-(10**12), 10**12),
    out=st.integers(0, 10**9),
    held=st.integers(0, 10**9),
    back=st.integers(0, 10**9),
)
def test_the_bound_holds_for_any_legs(offset: int, out: int, held: int, back: int) -> None:
    e = _exchange(offset, out, held, back)
    assert abs(e.offset_ns - offset) <= e.uncertainty_ns


def test_the_responder_answers_a_probe_and_nothing_else() -> None:
    body = b"MCK1" + (7).to_bytes(8, "big") + (123).to_bytes(8, "big", signed=True)
    probe = body.ljust(PROBE_BYTES, b"\0")
    reply = answer(probe, b"peer-1", received_ns=456)
    assert reply is not None and reply.endswith(b"peer-1")
    assert answer(body[:-1], b"peer-1", 456) is None
    assert answer(b"XXXX" + probe[4:], b"peer-1", 456) is None
    # No more bytes back than came: a probe shorter than its answer (a spoofed source's) has none.
    assert answer(body, b"peer-1", 456) is None
    assert answer(body.ljust(len(reply), b"\0"), b"peer-1", 456) is not None
    assert answer(body.ljust(len(reply) - 1, b"\0"), b"peer-1", 456) is None


def _samples(offset_at, times_s, error_us: float = 0.0, uncertainty_us: float = 50.0) -> list[list[float]]:
    """Samples at `times_s` (s since T0) of a clock whose offset is `offset_at(t)` µs, each
    measured `error_us` off (within its ± `uncertainty_us`, as a real exchange is)."""
    return [[T0 + t * S, offset_at(t) + error_us * (-1) ** i, uncertainty_us] for i, t in enumerate(times_s)]


def test_a_drifting_clock_is_fitted_with_its_drift() -> None:
    # 50 ms ahead and drifting 40 ppm: 2.4 ms more after a minute. One offset for the test
    # would be wrong by 1.2 ms at either end; the fit is within the samples' ± everywhere.
    def truth(t: float) -> float:
        return 50_000 + 40e-6 * t * S

    fit = fit_clock(_samples(truth, range(0, 61, 2), error_us=30))
    assert fit is not None and fit.steps == ()
    for t in (0, 15.5, 31, 60):
        assert abs(fit.at(T0 + t * S) - truth(t)) <= min(fit.uncertainty_us, 31)
    # Every line within all the samples' ± (50 µs) stays within 50 µs of the fit: the bound is
    # the narrowest band the samples leave, not the widest sample.
    assert fit.uncertainty_us <= 50


def test_a_step_of_20_ms_is_found_named_and_kept_out_of_both_sides() -> None:
    def truth(t: float) -> float:
        return 50_000 + (20_000 if t > 7 else 0)

    fit = fit_clock(_samples(truth, [0, 2, 4, 6, 8, 10, 12]))
    assert fit is not None
    (step,) = fit.steps
    assert step.size_us == pytest.approx(20_000) and step.uncertainty_us == pytest.approx(100)
    assert (step.after_us, step.before_us) == (T0 + 6 * S, T0 + 8 * S)
    assert fit.at(T0 + 3 * S) == pytest.approx(50_000) and fit.at(T0 + 11 * S) == pytest.approx(70_000)
    # Where in the 2 s gap it stepped is not known: the bound holds the whole step.
    assert fit.uncertainty_us == pytest.approx(50 + 20_000)
    assert "stepped +20.0 ms (± 0.1) within the 2.0 s before" in step.describe("r1 on hostb")


def test_a_clock_slewing_at_the_kernels_fastest_is_no_step() -> None:
    fit = fit_clock(_samples(lambda t: 500e-6 * t * S, range(0, 20, 2), uncertainty_us=10))
    assert fit is not None and fit.steps == ()
    assert fit.uncertainty_us == pytest.approx(10, abs=0.01)


@settings(max_examples=300, deadline=None)  # the corners of up to 48 samples: ms on a loaded machine
@given(
    base_us=st.floats(-1e6, 1e6),
    drift_ppm=st.floats(-200, 200),
    measured=st.lists(st.tuples(st.floats(-1, 1), st.floats(5, 5000)), min_size=3, max_size=60),
)
def test_the_fits_uncertainty_contains_the_truth_at_every_sample_and_between(
    base_us: float, drift_ppm: float, measured: list[tuple[float, float]]
) -> None:
    """A drifting clock, sampled every 2 s, each sample off by any part of its own ± (which
    varies from sample to sample, as bursts do): the truth is within the stated bound of the fit
    at every sample and between them."""

    def truth(t: float) -> float:
        return base_us + drift_ppm * 1e-6 * t * S

    times = [2 * i for i in range(len(measured))]
    samples = [[T0 + t * S, truth(t) + e * u, u] for t, (e, u) in zip(times, measured, strict=True)]
    fit = fit_clock(samples)
    assert fit is not None
    for t in [*times, *(t + 1 for t in times[:-1])]:
        assert abs(fit.at(T0 + t * S) - truth(t)) <= fit.uncertainty_us * (1 + 1e-9) + 1e-6


def _peer(name: str, role: str, host: str, samples: list[list[float]]) -> dict[str, object]:
    return {"name": name, "role": role, "host": host, "clock": {"samples": samples, "path": "udp"}}


def test_a_receivers_correction_follows_both_clocks_through_the_test() -> None:
    # Sender 1 ms ahead and steady; receiver 50 ms ahead, drifting 100 ppm: its latencies read
    # 49 ms too long at the start and 55 ms at the end of a minute.
    record = {
        "peers": [
            _peer("s1", "sender", "a", _samples(lambda t: 1000, range(0, 61, 10), uncertainty_us=40)),
            _peer("r1", "receiver", "b", _samples(lambda t: 50_000 + 100e-6 * t * S, range(0, 61, 10))),
        ]
    }
    correction = _corrections(record)["r1"]
    assert correction.at(T0) == pytest.approx(-49_000)
    assert correction.at(T0 + 30 * S) == pytest.approx(-52_000)
    assert correction.at(T0 + 60 * S) == pytest.approx(-55_000)
    assert correction.uncertainty_us == pytest.approx(90)
    assert correction.path == "udp"


def _json(**over: object) -> dict[str, object]:
    figures: dict[str, object] = {
        "latency_samples": 2400,
        "latency_us": {"p50": 2000.0},
        "latency_uncertainty_us": 150.0,
        "latency_clamped_by_correction": 0,
        "clock_problems": [],
        "clock_paths": ["udp"],
    }
    return figures | over


def _figures(**over: object) -> TestFigures:
    return TestFigures.from_json(_json(**over))


def test_a_latency_known_to_its_bound_is_a_figure() -> None:
    assert untrusted_latency(_figures(), 0.1) is None
    assert untrusted_latency(_figures(latency_uncertainty_us=0.0), 0.1) is None  # one clock
    assert untrusted_latency(_figures(latency_samples=0), 0.1) is None  # nothing to judge


def test_a_latency_whose_clocks_are_known_worse_than_its_bound_is_none() -> None:
    # The run: ± 66 ms of clocks against a p50 of 2 ms.
    why = untrusted_latency(_figures(latency_uncertainty_us=66_284.0), 0.1)
    assert why == (
        "latency across hosts not measured: clock uncertainty ± 66.284 ms against a p50 of 2.000 ms"
        " (bound 10% of the p50)"
    )
    assert untrusted_latency(_figures(latency_uncertainty_us=201.0), 0.1) is not None
    assert untrusted_latency(_figures(latency_uncertainty_us=66_284.0), 0) is None  # no bound asked


def test_a_clamped_sample_or_a_clock_step_makes_the_latency_no_figure() -> None:
    why = untrusted_latency(_figures(latency_clamped_by_correction=2377), 0.1)
    assert why == (
        "latency not measured: 2,377 samples read below zero or above an hour and were clamped"
        " (clock correction ± 0.150 ms)"
    )
    step = "the clock of r1 on hostb stepped +20.0 ms (± 0.1) within the 2.0 s before 12:00:08.000 UTC"
    assert untrusted_latency(_figures(clock_problems=[step]), 0.1) == f"latency across hosts not measured: {step}"


def test_one_slow_burst_does_not_widen_the_bound_of_the_others() -> None:
    # A stalled coordinator: one burst's best exchange was ± 77 ms, every other ± 30 µs. The
    # fit hardly moves for it (weights 1/±²), and it bounds nothing the others do not.
    samples = _samples(lambda t: 0.0, range(0, 20, 2), uncertainty_us=30)
    samples.append([T0 + 9 * S, 40_000.0, 77_000.0])
    fit = fit_clock(samples)
    assert fit is not None and fit.steps == ()
    assert fit.uncertainty_us < 100 and abs(fit.at(T0 + 9 * S)) < 30


def test_a_step_shows_through_a_wide_sample_once_the_direct_path_is_lost() -> None:
    # Direct samples (± 30 µs) until 4 s, then the clock steps +20 ms and only the broker's PING
    # measures it (± 734 µs): still a step, named, and its size in the bound.
    samples = _samples(lambda t: 50_000.0, range(0, 5, 2), uncertainty_us=30)
    samples.append([T0 + 12 * S, 70_207.7, 733.9])
    fit = fit_clock(samples)
    assert fit is not None
    (step,) = fit.steps
    assert step.size_us == pytest.approx(20_207.7) and step.uncertainty_us == pytest.approx(763.9)
    assert fit.uncertainty_us >= 20_000


def test_one_host_name_is_one_clock_only_where_the_offsets_agree() -> None:
    # A receiver on a cloned machine with the same name as its sender's, 50 ms ahead: corrected.
    sender = _peer("s1", "sender", "vm", _samples(lambda t: 0.0, range(0, 9, 2), uncertainty_us=30))
    clone = _peer("r1", "receiver", "vm", _samples(lambda t: 50_000.0, range(0, 9, 2), uncertainty_us=30))
    assert _corrections({"peers": [sender, clone]})["r1"].shift_us == pytest.approx(-50_000)
    # The same name and offsets within their ±: one clock, nothing to correct.
    beside = _peer("r1", "receiver", "vm", _samples(lambda t: 20.0, range(0, 9, 2), uncertainty_us=30))
    assert _corrections({"peers": [sender, beside]}) == {}


def test_senders_on_clocks_apart_are_a_problem_one_correction_cannot_untangle() -> None:
    # r1 and s2 on hostb, 50 ms ahead; s1 on this host: half of r1's messages read 50 ms more.
    s1 = _peer("s1", "sender", "vm", _samples(lambda t: 0.0, range(0, 9, 2), uncertainty_us=30))
    s2 = _peer("s2", "sender", "hostb", _samples(lambda t: 50_000.0, range(0, 9, 2), uncertainty_us=30))
    r1 = _peer("r1", "receiver", "hostb", _samples(lambda t: 50_000.0, range(0, 9, 2), uncertainty_us=30))
    correction = _corrections({"peers": [s1, s2, r1]})["r1"]
    (problem,) = correction.problems
    assert "senders whose clocks are 50.000 ms apart (s1 on vm, s2 on hostb)" in problem
    assert correction.uncertainty_us >= 25_000


def test_a_clock_never_measured_is_a_problem_where_the_hosts_differ() -> None:
    s1 = _peer("s1", "sender", "vm", _samples(lambda t: 0.0, range(0, 9, 2), uncertainty_us=30))
    r1 = {"name": "r1", "role": "receiver", "host": "hostb", "clock": {}}
    (problem,) = _corrections({"peers": [s1, r1]})["r1"].problems
    assert problem.startswith("the clock of r1 on hostb was never measured")


def test_a_step_is_described_with_its_size_bound_gap_and_time() -> None:
    # Samples at 12:00:05.250 and 12:00:08.125 UTC; the clock moved -1,234.5 µs ± 56.7 µs.
    before_us = datetime(2027, 1, 15, 12, 0, 8, 125_000, tzinfo=UTC).timestamp() * S
    step = ClockStep(after_us=before_us - 2_875_000, before_us=before_us, size_us=-1234.5, uncertainty_us=56.7)
    assert step.describe("r1 on hostb") == (
        "the clock of r1 on hostb stepped -1.2 ms (± 0.1) within the 2.9 s before 12:00:08.125 UTC"
    )
    assert ClockStep(0.0, 1.5 * S, 20_000.0).describe("s") == (
        "the clock of s stepped +20.0 ms (± 0.0) within the 1.5 s before 00:00:01.500 UTC"
    )


def test_a_constant_correction_is_one_shift_at_every_time() -> None:
    correction = Correction.constant(-2_000, 100.0)
    assert (correction.knots_us, correction.shifts_us, correction.uncertainty_us) == ((0.0,), (-2000.0,), 100.0)
    assert correction.at(T0) == -2000.0 and correction.shift_us == -2000.0
    assert isinstance(correction.shifts_us[0], float)
    assert Correction.constant(5).uncertainty_us == 0.0
    assert (Correction.constant(5).reason, Correction.constant(5).problems, Correction.constant(5).path) == ("", (), "")


def test_a_summary_without_the_clock_keys_is_judged_as_one_clock() -> None:
    # A summary from before the keys existed: no samples is nothing to judge; samples with no
    # uncertainty, clamps or paths recorded are one clock's, whatever the bound.
    assert untrusted_latency(TestFigures.from_json({}), 0.1) is None
    assert untrusted_latency(TestFigures.from_json({"latency_samples": 10, "latency_us": {"p50": 5.0}}), 0.1) is None
    old = {"latency_samples": 10, "latency_us": {"p50": 5.0}, "latency_uncertainty_us": 1.0}
    why = untrusted_latency(TestFigures.from_json(old), 0.1)
    assert why == (
        "latency across hosts not measured: clock uncertainty ± 0.001 ms against a p50 of 0.005 ms"
        " (bound 10% of the p50)"
    )


def test_the_bound_is_exceeded_only_beyond_it() -> None:
    assert untrusted_latency(_figures(latency_uncertainty_us=200.0), 0.1) is None  # 10 % of 2000 exactly
    assert untrusted_latency(_figures(latency_uncertainty_us=200.5), 0.1) is not None


def test_clamps_without_a_correction_carry_no_error_bar() -> None:
    assert untrusted_latency(_figures(latency_clamped_by_correction=3, latency_uncertainty_us=0.0), 0.1) == (
        "latency not measured: 3 samples read below zero or above an hour and were clamped"
    )
    assert untrusted_latency(_figures(latency_clamped_by_correction=3, latency_uncertainty_us=1234.0), 0.1) == (
        "latency not measured: 3 samples read below zero or above an hour and were clamped"
        " (clock correction ± 1.234 ms)"
    )


def test_further_clock_problems_are_counted_after_the_first() -> None:
    for problems, more in ((["a", "b"], " (and 1 more)"), (["a", "b", "c"], " (and 2 more)")):
        why = untrusted_latency(_figures(clock_problems=problems), 0.1)
        assert why == f"latency across hosts not measured: a{more}"


def test_clocks_measured_through_the_broker_say_so() -> None:
    why = untrusted_latency(_figures(latency_uncertainty_us=66_284.0, clock_paths=["mqtt", "udp"]), 0.1)
    assert why == (
        "latency across hosts not measured: clock uncertainty ± 66.284 ms against a p50 of 2.000 ms"
        " (bound 10% of the p50); the clocks were measured through the control broker, as the peers' clock"
        " ports did not answer (a firewall, or an address the coordinator cannot reach: see the daemons'"
        " --clock-address)"
    )
    figures = _json(latency_uncertainty_us=66_284.0)
    del figures["clock_paths"]  # a summary from before the paths were kept
    with_paths = _figures(latency_uncertainty_us=66_284.0)
    assert untrusted_latency(TestFigures.from_json(figures), 0.1) == untrusted_latency(with_paths, 0.1)


def test_a_peers_fit_keeps_its_path_and_an_old_record_is_one_offset_through_the_broker() -> None:
    samples = _samples(lambda t: 100.0, [0, 2], uncertainty_us=10)
    assert _fit({"clock": {"samples": samples}}).path == ""  # type: ignore[union-attr]
    assert fit_clock(samples).path == ""  # type: ignore[union-attr]
    assert _fit({"clock": {"samples": samples, "path": "udp"}}).path == "udp"  # type: ignore[union-attr]
    old = {
        "clock": {
            "before": {"offset_us": 1000.0, "uncertainty_us": 30.0},
            "after": {"offset_us": 1400.0, "uncertainty_us": 50.0},
        }
    }
    # One offset, their mean; ± the wider exchange's and half of how far it moved.
    assert _fit(old) == ClockFit((0.0,), (1200.0,), 50.0 + 200.0, (), "mqtt")
    assert _fit({"clock": {"before": {"offset_us": -5.0, "uncertainty_us": 7.0}}}) == ClockFit(
        (0.0,), (-5.0,), 7.0, (), "mqtt"
    )
    assert _fit({}) is None and _fit({"clock": {"samples": []}}) is None


def test_two_clocks_agree_up_to_the_sum_of_their_bounds() -> None:
    a = ClockFit((0.0, 10.0), (100.0, 100.0), 30.0)
    assert a.agrees_with(ClockFit((5.0,), (50.0,), 20.0))  # 50 apart, ± 30 + 20
    assert not a.agrees_with(ClockFit((5.0,), (49.0,), 20.0))
    # Compared where either was measured: b's knot at 20 finds them 200 apart there.
    assert not a.agrees_with(ClockFit((0.0, 20.0), (100.0, 300.0), 20.0))


def test_a_receiver_never_measured_beside_its_sender_is_taken_as_its_clock() -> None:
    s1 = _peer("s1", "sender", "vm", _samples(lambda t: 0.0, range(0, 9, 2), uncertainty_us=30))
    r1 = {"name": "r1", "role": "receiver", "host": "vm", "clock": {}}
    assert _corrections({"peers": [s1, r1]}) == {}
    assert _corrections({"peers": [r1 | {"role": "sender", "name": "s0"}, r1]}) == {}


def test_two_samples_a_step_apart_are_a_step() -> None:
    fit = fit_clock([[T0, 0.0, 10.0], [T0 + S, 5000.0, 10.0]])
    assert fit is not None
    (step,) = fit.steps
    assert (step.after_us, step.before_us, step.size_us, step.uncertainty_us) == (T0, T0 + S, 5000.0, 20.0)
    assert fit.knots_us == (T0, T0 + S) and fit.offsets_us == (0.0, 5000.0)
    assert fit.uncertainty_us == 10.0 + 5000.0


def test_a_step_between_drifting_lines_is_sized_in_the_middle_of_its_gap() -> None:
    # Drifting +100 ppm (100 µs a second) before a +20 ms step between 6 s and 8 s, -100 ppm
    # after it: at 7 s, the gap's middle, the line before reads 700 µs and the line after
    # 20,700 µs. The lines' slopes differ, so anywhere else in or beside the gap gives another size.
    def truth(t: float) -> float:
        return 100e-6 * t * S if t < 7 else 20_700 - 100e-6 * (t - 7) * S

    fit = fit_clock(_samples(truth, [0, 2, 4, 6, 8, 10, 12], uncertainty_us=5))
    assert fit is not None
    (step,) = fit.steps
    assert step.size_us == pytest.approx(20_000, abs=1e-6)
    assert (step.after_us, step.before_us) == (T0 + 6 * S, T0 + 8 * S)
    assert fit.knots_us == tuple(T0 + t * S for t in (0, 6, 8, 12))
    assert fit.offsets_us == pytest.approx((0.0, 600.0, 20_600.0, 20_200.0), abs=1e-6)
    assert fit.uncertainty_us == pytest.approx(5 + 20_000, abs=1e-6)


def _steps(samples: list[list[float]]) -> list[tuple[float, float]]:
    fit = fit_clock(samples)
    assert fit is not None
    return [(s.after_us, s.before_us) for s in fit.steps]


def test_a_step_is_a_move_beyond_both_samples_bounds_and_100_us() -> None:
    ms = 1000  # µs: samples this close apart leave the slew 1 µs
    # Both ± (10 + 500) and the slew (10 µs over 10 ms) allow 520 µs: 510 is no step.
    assert _steps([[T0, 0.0, 10.0], [T0 + 10 * ms, 510.0, 500.0]]) == []
    assert _steps([[T0, 0.0, 10.0], [T0 + 10 * ms, 530.0, 500.0]]) == [(T0, T0 + 10 * ms)]
    # Below 100 µs nothing is a step, and 100 µs itself is none.
    assert _steps([[T0, 0.0, 10.0], [T0 + 1, 100.0, 10.0]]) == []
    assert _steps([[T0, 0.0, 10.0], [T0 + 1, 100.5, 10.0]]) == [(T0, T0 + 1)]


def test_a_step_is_judged_against_the_tightest_of_the_last_three_samples() -> None:
    # A tight sample at -250 µs, then three loose ones (± 300) at 0: the next, at 200 µs, is
    # within the latest loose one's bound. The tight one, four back, is no longer the reference.
    ms = 1000
    samples = [[T0, -250.0, 1.0], *([T0 + k * ms, 0.0, 300.0] for k in (1, 2, 3)), [T0 + 4 * ms, 200.0, 1.0]]
    assert _steps(samples) == []


def test_samples_tighter_than_a_microsecond_bound_the_fit_by_their_own() -> None:
    fit = fit_clock(_samples(lambda t: 7.0, [0, 2, 4], uncertainty_us=0.5))
    assert fit is not None and fit.uncertainty_us == pytest.approx(0.5)


def test_a_step_is_told_in_utc_whatever_the_hosts_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+05:30
    time.tzset()
    try:
        step = ClockStep(0.0, 1000.0 * S, 1_000_000.0, 1_000_000.0)
        assert step.describe("x") == (
            "the clock of x stepped +1000.0 ms (± 1000.0) within the 1000.0 s before 00:16:40.000 UTC"
        )
    finally:
        monkeypatch.undo()
        time.tzset()


def _weighted_mean(samples: list[list[float]]) -> float:
    weights = [1 / max(u, 1.0) ** 2 for _, _, u in samples]
    return sum(w * o for w, (_, o, _) in zip(weights, samples, strict=True)) / sum(weights)


def test_samples_taken_at_one_time_are_one_offset_weighted_by_their_bounds() -> None:
    # No time to fit a drift over: the offsets' mean weighted by 1/±², here (0 + 90/9) / (1 + 1/9).
    samples = [[T0, 0.0, 1.0], [T0, 90.0, 3.0]]
    fit = fit_clock(samples)
    assert fit is not None and fit.steps == ()
    assert fit.knots_us == (T0,) and fit.offsets_us == (pytest.approx(9.0),)
    # The bound: each sample's ± plus its distance from the offset, the widest of them.
    assert fit.uncertainty_us == pytest.approx(3.0 + 81.0)


def test_a_sample_four_times_as_wide_as_the_median_still_bounds_one_wider_does_not() -> None:
    at_the_limit = [[T0, -80.0, 12.0], [T0, 0.0, 1.0], [T0, 90.0, 3.0]]  # median ± 3: 12 is 4 x 3
    mean = _weighted_mean(at_the_limit)
    assert fit_clock(at_the_limit).uncertainty_us == pytest.approx(12.0 + 80.0 + mean)  # type: ignore[union-attr]
    beyond = [[T0, -80.0, 12.5], [T0, 0.0, 1.0], [T0, 90.0, 3.0]]
    mean = _weighted_mean(beyond)
    assert fit_clock(beyond).uncertainty_us == pytest.approx(3.0 + 90.0 - mean)  # type: ignore[union-attr]


def test_a_segment_of_samples_partly_at_one_time_is_still_a_line() -> None:
    # Two samples at T0, one a second later: the line through them, not their mean.
    fit = fit_clock([[T0, 0.0, 10.0], [T0, 0.0, 10.0], [T0 + S, 50.0, 10.0]])
    assert fit is not None and fit.offsets_us == pytest.approx((0.0, 50.0))
    two = fit_clock([[T0, 0.0, 10.0], [T0 + S, 50.0, 10.0]])
    assert two is not None and two.offsets_us == pytest.approx((0.0, 50.0))
