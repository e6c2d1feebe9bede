"""The gate's verdict on hand-worked series.

Five comparable nights at 100, 100.1, 99.9, 100.05, 99.95 msg/s: median 100, absolute deviations
0, 0.1, 0.1, 0.05, 0.05, so MAD 0.05; the robust sigma is 0.0741 % of the median. A night of normal
noise crosses 37.21 of those (measured over 5 runs) once in 1,200 nights: the noise band is ±2.76 %.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from protocol.codes import ExitCode
from reports.history import FIGURES, History, Run, analyse
from reports.verdict import (
    GateRules,
    Noise,
    Threshold,
    Verdict,
    _distribution_finding,
    band_sigmas,
    judge,
    noise_of,
)

BASE = (100.0, 100.1, 99.9, 100.05, 99.95)


def _run(n: int, rate: float, *, outcome: str = "success", testbed: str = "tb", **figures: float) -> Run:
    values: dict[str, float | None] = {f.key: None for f in FIGURES}
    values |= {"receive_rate": rate, "loss_ratio": 0.0, "duplicate_ratio": 0.0} | figures
    return Run(f"run-{n:02d}", f"2026-10-{n + 1:02d}", outcome, values, reason="why", workload="w", testbed=testbed)


def _judge(newest: Run, base: tuple[float, ...] = BASE, **rules: object) -> tuple[Verdict, str]:
    runs = [_run(n, r) for n, r in enumerate(base)] + [newest]
    found = judge(analyse("t", runs), GateRules(**rules))  # type: ignore[arg-type]
    return found.verdict, found.why


def test_the_noise_is_the_median_absolute_deviation_scaled_to_a_sigma() -> None:
    noise = noise_of(list(BASE))
    assert (noise.runs, noise.median) == (5, 100.0)
    assert noise.sigma == pytest.approx(0.0007413)
    assert noise.band_sigmas == 37.2103 and noise.band == pytest.approx(37.2103 * 0.0007413)
    # One outlier night moves neither the median nor the MAD much: 40 instead of 100.
    assert noise_of([100.0, 102.0, 98.0, 101.0, 40.0]).sigma == pytest.approx(1.4826 * 2 / 100)
    assert noise_of([0.001, 0.0, 0.0], relative=False).sigma == 0.0


def test_a_drop_beyond_the_threshold_and_outside_the_noise_is_a_regression() -> None:
    verdict, why = _judge(_run(9, 94.0))
    assert verdict is Verdict.REGRESSION and verdict.exit_code == ExitCode.REGRESSION == 3
    assert why.startswith("Receive rate fell 6.0 % (threshold 5 %): run-09 against the median of 5 comparable runs")
    assert why.endswith("(noise band ±2.8 % (37.2 sigma of 5 runs))"), why


def test_a_drop_within_the_threshold_passes() -> None:
    verdict, why = _judge(_run(9, 96.0))
    assert verdict is Verdict.PASS and verdict.exit_code == 0
    assert why == "run-09 is within every threshold of 5 comparable runs"


def test_a_threshold_inside_the_noise_is_inconclusive_unless_the_night_is_outside_it() -> None:
    two = Threshold(0.02)
    verdict, why = _judge(_run(9, 99.9), throughput_drop=two)
    assert verdict is Verdict.INCONCLUSIVE and verdict.exit_code == ExitCode.INCONCLUSIVE == 5
    assert why == "Receive rate: noise band ±2.8 % (37.2 sigma of 5 runs) on this testbed, threshold 2 %"
    assert _judge(_run(9, 97.3), throughput_drop=two)[0] is Verdict.INCONCLUSIVE
    # 2.8 % down is beyond 2 % and beyond the ±2.76 % band: a regression after all.
    assert _judge(_run(9, 97.2), throughput_drop=two)[0] is Verdict.REGRESSION


def test_a_threshold_in_noise_units() -> None:
    three = Threshold.parse("3sigma")
    assert three == Threshold(3.0, in_sigmas=True) and str(three) == "3sigma"
    # As rare as 3 sigma of known noise (0.135 %), measured over 5 runs: 28.92 of their sigmas,
    # 2.14 %. 2.2 % down is beyond it, 2.1 % is not; a plain 3 sigma (0.22 %) would flag both.
    assert band_sigmas(5, three.tail) == 28.9179
    assert _judge(_run(9, 97.8), throughput_drop=three)[0] is Verdict.REGRESSION
    assert _judge(_run(9, 97.9), throughput_drop=three)[0] is Verdict.PASS


def test_thresholds_parse_or_say_why() -> None:
    assert Threshold.parse("0.05") == Threshold.parse("5%") == Threshold(0.05)
    with pytest.raises(ValueError, match="'5x' is no threshold"):
        Threshold.parse("5x")
    with pytest.raises(ValueError, match="above 0"):
        Threshold.parse("0sigma")


def test_rules_a_verdict_cannot_stand_on_are_refused() -> None:
    """A noise of 0 or 1 runs is no noise: `min_runs` 1 judged a night against one run and 0
    divided by zero. Ratio points are from 0 to 1, a change point's p above 0."""
    for rules, why in (
        ({"min_runs": 1}, "min_runs 1: a figure's noise needs at least 2 runs"),
        ({"min_runs": -3}, "min_runs -3"),
        ({"loss_rise": -0.1}, "loss_rise -0.1: ratio points from 0 to 1"),
        ({"duplicate_rise": float("nan")}, "duplicate_rise nan"),
        ({"max_change_p": 0.0}, "max_change_p 0.0: a probability above 0"),
    ):
        with pytest.raises(ValueError, match=why):
            GateRules(**rules)  # type: ignore[arg-type]
    assert Noise(1, 100.0, 0.0).band == Noise(1, 100.0, 0.0).band_for(Threshold(0.05)) == math.inf


def test_a_figure_without_noise_is_judged_against_the_rounding_of_3_significant_digits() -> None:
    """A fixed-rate run receives 40 msg/s to the message, night after night: sigma 0. Under
    `3sigma` that judged any change (a night 0.025 % short was a regression); its noise is taken
    as the rounding of a figure known to 3 significant digits, 0.029 %: the band over 5 runs is
    28.92 x 0.0289 % = 0.83 %."""
    three = Threshold(3.0, in_sigmas=True)
    flat = (40.0,) * 5
    assert _judge(_run(9, 39.99), base=flat, throughput_drop=three)[0] is Verdict.PASS
    verdict, why = _judge(_run(9, 39.6), base=flat, throughput_drop=three)
    assert verdict is Verdict.REGRESSION
    assert why.startswith("Receive rate fell 1.0 % (threshold 3sigma): run-09 against the median of 5"), why
    assert why.endswith("(noise band ±0.8 % (28.9 sigma of 5 runs))"), why
    assert _judge(_run(9, 39.7), base=flat, throughput_drop=three)[0] is Verdict.PASS


def test_too_few_comparable_runs_are_inconclusive_never_a_pass() -> None:
    verdict, why = _judge(_run(9, 100.0), base=BASE[:4])
    assert verdict is Verdict.INCONCLUSIVE
    assert why == "4 comparable runs, 5 needed (same name, workload and testbed as run-09)"
    assert judge(analyse("t", []), GateRules()).verdict is Verdict.INCONCLUSIVE


def test_runs_on_another_testbed_are_not_comparable() -> None:
    runs = [_run(n, r) for n, r in enumerate(BASE)] + [_run(9, 100.0, testbed="other")]
    history = analyse("t", runs)
    assert [history.left_out(r) for r in runs] == ["other testbed"] * 5 + [None]
    assert judge(history, GateRules()).why.startswith("0 comparable runs, 5 needed")


def test_loss_and_duplicates_gate_by_ratio_points() -> None:
    verdict, why = _judge(_run(9, 100.0, loss_ratio=0.0001))
    assert verdict is Verdict.REGRESSION
    assert why.startswith("Loss (lost / sent) rose from 0.0000% to 0.0100% (threshold +0.0000% points)")
    assert _judge(_run(9, 100.0, loss_ratio=0.0001), loss_rise=0.001)[0] is Verdict.PASS
    verdict, why = _judge(_run(9, 100.0, duplicate_ratio=0.002))
    assert verdict is Verdict.REGRESSION and why.startswith("Duplicates (duplicates / sent) rose")


def test_a_failed_newest_run_is_a_regression_and_an_invalid_one_inconclusive() -> None:
    verdict, why = _judge(_run(9, 100.0, outcome="failure"))
    assert (verdict, why) == (Verdict.REGRESSION, "the newest run run-09 failed: why")
    verdict, why = _judge(_run(9, 100.0, outcome="invalid"))
    assert (verdict, why) == (Verdict.INCONCLUSIVE, "the newest run run-09 is invalid: why")


def test_a_latency_rise_counts_against_its_own_threshold() -> None:
    base = [_run(n, 100.0, latency_p99_us=p) for n, p in enumerate((1000.0, 1001.0, 999.0, 1000.5, 999.5))]
    # Median 1000, MAD 0.5: band ±2.76 %; 12 % up is beyond the 10 % threshold, 8 % is not.
    for p99, expected in ((1120.0, Verdict.REGRESSION), (1080.0, Verdict.PASS)):
        found = judge(analyse("t", [*base, _run(9, 100.0, latency_p99_us=p99)]), GateRules())
        assert found.verdict is expected, found.why
    assert found.noise["latency_p99_us"].band == pytest.approx(37.2103 * 1.4826 * 0.5 / 1000)


def test_a_regression_keeps_its_doubts_apart() -> None:
    """The rate fell beyond its threshold; the latency p99, present in two runs only, cannot be
    judged: the verdict is the regression, and the latency's line is a doubt, not a regression."""
    base = [_run(n, r) for n, r in enumerate(BASE)]
    base[3] = _run(3, BASE[3], latency_p99_us=1000.0)
    found = judge(analyse("t", [*base, _run(9, 90.0, latency_p99_us=1010.0)]), GateRules())
    assert found.verdict is Verdict.REGRESSION and found.why.startswith("Receive rate fell 10.0 %")
    assert found.doubts == ["Latency p99: 1 comparable run since its last change point, 5 needed"]
    assert found.findings == [found.findings[0], *found.doubts] and found.findings[0].startswith("Receive rate")


def test_a_threshold_in_noise_units_judges_a_change_point_by_the_noise_it_can_know() -> None:
    """Eight latencies of 1 ms, then four of 40 ms: a change point at the ninth (p 0.005), after
    which three runs are too few to know the figure's noise. Under `3sigma` the change is judged
    by the noise of all twelve (median 1 ms, MAD 0: taken as the rounding noise of 3 significant
    digits, 0.029 %, so a rise beyond 0.087 % counts), not read as a 300 % fraction.
    It is news on this night only: with three of 40 ms it was a change point of p 0.01, which the
    gate does not count, and a night later it is the level that night is judged against."""
    rates = (*BASE, *BASE, 100.02, 99.98, 100.0)
    runs = [_run(n, r, latency_p99_us=1000.0 if n < 8 else 40_000.0) for n, r in enumerate(rates)]
    three = GateRules(latency_rise=Threshold(3.0, in_sigmas=True))
    ([before],) = [analyse("t", runs[:11]).shifts["latency_p99_us"]]
    assert (before.run, before.p_value) == (9, 0.01)
    assert judge(analyse("t", runs[:11]), three).verdict is Verdict.INCONCLUSIVE
    history = analyse("t", runs[:12])
    assert [(s.run, s.p_value) for s in history.shifts["latency_p99_us"]] == [(9, 0.005)]
    found = judge(history, three)
    assert found.verdict is Verdict.REGRESSION
    assert found.why.startswith("Latency p99 rose 3900.0 % (threshold 0.0866 %) from run 9 (run-08) on"), found.why
    assert found.doubts == ["Latency p99: 3 comparable runs since its last change point, 5 needed"]
    later = judge(analyse("t", runs), three)
    assert later.verdict is Verdict.INCONCLUSIVE and later.findings == [
        "Latency p99: 4 comparable runs since its last change point, 5 needed"
    ]


def _curve(scale: float, tail: float = 1.0) -> tuple[tuple[float, float], ...]:
    """A latency curve in µs: 1 ms at p50 rising to 20 ms at p99.99; `tail` scales p99.99."""
    points = {10: 600.0, 25: 800.0, 50: 1000.0, 75: 1300.0, 90: 2000.0, 95: 2600.0, 99: 5000.0, 99.5: 6500.0}
    points |= {99.9: 9000.0, 99.95: 12_000.0, 99.99: 20_000.0 * tail, 99.999: 30_000.0, 100: 40_000.0}
    return tuple((float(p), us * scale) for p, us in points.items())


def _night(n: int, scale: float, tail: float = 1.0) -> Run:
    """A night whose scalar latency figures are its curve's p50, p99 and p99.9."""
    curve = _curve(scale, tail)
    run = _run(n, 100.0, latency_p50_us=1000 * scale, latency_p99_us=5000 * scale, latency_p999_us=9000 * scale)
    return Run(**{**run.__dict__, "distribution": curve})


def test_a_tail_that_moved_where_p99_and_p999_did_not_is_a_regression() -> None:
    """The curve's p99.99 rose 60 % (20 to 32 ms) while p50, p99 and p99.9 stayed within 1 %."""
    scales = (1.0, 1.001, 0.999, 1.0005, 0.9995)
    runs = [_night(n, s) for n, s in enumerate(scales)] + [_night(9, 1.005, tail=1.6)]
    found = judge(analyse("t", runs), GateRules())
    assert found.verdict is Verdict.REGRESSION, found.why
    assert found.why.startswith("Latency p99.99 rose 60.8 % (32.160 ms against 20.000 ms; threshold 10 %,"), found.why
    # 5 runs 0.074 % apart (sigma): a band of 37.2 of them, 2.8 %, which 60.8 % crosses.
    assert found.why.endswith("noise band ±2.8 % of 5 runs): run-09's latency curve against their median"), found.why
    # A tail that noisy moved too little to tell: 5 runs 20 % apart make a band of 1,100 %.
    wide = [_night(n, s, tail=t) for n, (s, t) in enumerate(zip(scales, (1.0, 1.2, 0.8, 1.1, 0.9), strict=True))]
    assert judge(analyse("t", [*wide, runs[-1]]), GateRules()).verdict is Verdict.PASS
    # The same night without the tail's rise passes; so does a rise within the noise of a noisy tail.
    calm = [*runs[:-1], _night(9, 1.005)]
    assert judge(analyse("t", calm), GateRules()).verdict is Verdict.PASS
    noisy = [_night(n, 1.0, tail=t) for n, t in enumerate((1.0, 1.5, 0.7, 1.3, 0.8))] + [_night(9, 1.0, tail=1.6)]
    assert judge(analyse("t", noisy), GateRules()).verdict is Verdict.PASS


def test_runs_without_a_curve_are_not_judged_by_one() -> None:
    """A closed system, an index made before curves were kept: the scalar figures judge alone."""
    runs = [_night(n, s) for n, s in enumerate((1.0, 1.02, 0.98, 1.01))] + [_run(5, 100.0), _night(9, 1.0, 1.6)]
    found = judge(analyse("t", runs), GateRules())
    assert not [f for f in found.findings if "curve" in f], found.findings  # 4 curves, 5 needed


def test_the_band_is_where_one_night_in_1200_of_normal_noise_reaches() -> None:
    """The bands drawn again from nights themselves: the quantile of (new - median) / (1.4826 x
    MAD) over n normal runs, against the band's average of normal tails over drawn medians and
    MADs. And as rare as 3 sigma of known noise, 0.135 %."""
    rng = np.random.default_rng(11)
    three = Threshold(3.0, in_sigmas=True).tail
    assert three == pytest.approx(0.0013499, abs=1e-7)
    for runs, tail in ((10, 0.01 / 12), (19, 0.01 / 12), (19, three), (40, 0.01 / 12)):
        past, new = rng.standard_normal((400_000, runs)), rng.standard_normal(400_000)
        median = np.median(past, axis=1)
        mad = 1.4826 * np.median(np.abs(past - median[:, None]), axis=1)
        drawn = float(np.quantile((new - median) / mad, 1 - tail))
        assert drawn == pytest.approx(band_sigmas(runs, tail), rel=0.08), (runs, tail, drawn)
    # Known noise would need 3.14 sigmas; the fewer runs measured it, the wider.
    assert band_sigmas(1) == float("inf")
    assert band_sigmas(5) > 30 > band_sigmas(10) > 7 > band_sigmas(19) > 5 > band_sigmas(100) > 3.14
    assert band_sigmas(500) == band_sigmas(100)


def test_eight_percentiles_of_noise_cry_wolf_under_once_in_100_nights() -> None:
    """A/A: 400 histories of 12 nights whose curve percentiles each move by 5 % normal noise of
    their own, the 12th judged. A plain 3 sigma band on each percentile cried wolf in about 1
    night of 10 here (39 of 400); the curve's band in at most 1 of 100 (4)."""
    rng = np.random.default_rng(2026)
    base = dict(_curve(1.0))
    alarms = plain_alarms = 0
    for _ in range(400):
        runs = [
            Run(
                f"n{n:02d}",
                f"{n:02d}",
                "success",
                {},
                distribution=tuple((p, us * (1 + 0.05 * rng.standard_normal())) for p, us in base.items()),
            )
            for n in range(12)
        ]
        history = History("aa", runs)
        alarms += _distribution_finding(history, runs[:-1], GateRules()) is not None
        newest = dict(runs[-1].distribution)
        plain_alarms += any(
            newest[p] / (n := noise_of([dict(r.distribution)[p] for r in runs[:-1]])).median - 1
            > max(0.10, 3 * n.sigma)
            for p in (10.0, 25.0, 75.0, 90.0, 95.0, 99.5, 99.95, 99.99)
        )
    assert alarms <= 4 < plain_alarms, (alarms, plain_alarms)


def test_the_recovery_after_faults_is_gated_against_its_own_threshold() -> None:
    """Nights with a broker restart whose arrivals were back in 2 s (give or take 0.1): one that
    took 5 s rose 150 %, beyond the default 100 %; 3.5 s (75 %) passes, and a test without
    faults has no recovery to judge."""
    base = [_run(n, r, recovery_s=s) for n, (r, s) in enumerate(zip(BASE, (2.0, 2.0, 2.1, 1.9, 2.0), strict=True))]
    found = judge(analyse("t", [*base, _run(9, 100.0, recovery_s=5.0)]), GateRules())
    assert found.verdict is Verdict.REGRESSION
    assert found.why.startswith("Recovery after faults rose 150.0 % (threshold 100 %): run-09"), found.why
    assert judge(analyse("t", [*base, _run(9, 100.0, recovery_s=3.5)]), GateRules()).verdict is Verdict.PASS
    assert (
        judge(analyse("t", [*base, _run(9, 100.0, recovery_s=3.5)]), GateRules(recovery_rise=Threshold(0.5))).verdict
        is Verdict.REGRESSION
    )
    assert (
        "recovery_s" not in judge(analyse("t", [_run(n, r) for n, r in enumerate((*BASE, 100.0))]), GateRules()).noise
    )


def test_a_latency_the_newest_run_could_not_trust_is_no_pass() -> None:
    """Nights kept as successes with `untrusted_latency="warn"` have no latency figure. Where no
    night had one, the gate judged the rate alone and said PASS, "within every threshold"."""
    base = [replace(_run(n, r), latency_untrusted="a clock stepped") for n, r in enumerate(BASE)]
    newest = replace(_run(9, 100.0), latency_untrusted="3 samples clamped")
    found = judge(analyse("t", [*base, newest]), GateRules())
    assert (found.verdict, found.why) == (
        Verdict.INCONCLUSIVE,
        "Latency p50: no figure in run-09 (3 samples clamped) (and 2 more)",
    )
    assert judge(analyse("t", [*base, _run(9, 100.0)]), GateRules()).verdict is Verdict.PASS  # none asked


def test_a_level_of_0_is_nothing_to_judge_a_change_against() -> None:
    """A change relative to 0 read as none: nights that received nothing passed any night."""
    verdict, why = _judge(_run(9, 50.0), base=(0.0,) * 5)
    assert (verdict, why) == (
        Verdict.INCONCLUSIVE,
        "Receive rate: 0 over 5 comparable runs: no level to judge a change against",
    )


def test_thresholds_beyond_what_the_draws_can_tell_are_refused() -> None:
    """A band's draws reach about 5 sigma: 10sigma and 100sigma judged alike. A drop of 100 % or
    more can never happen: the figure would never be judged."""
    assert Threshold.parse("5sigma") == Threshold(5.0, in_sigmas=True)
    with pytest.raises(ValueError, match="at most 5sigma"):
        Threshold.parse("6sigma")
    assert Threshold.parse("100%") == Threshold(1.0)  # a rise of 100 %: twice
    for text in ("100%", "1", "5"):
        with pytest.raises(ValueError, match="a drop is less than all of it"):
            Threshold.parse(text, fraction_under_1=True)
