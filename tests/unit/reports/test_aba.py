"""The A-B-A verdict on hand-worked legs.

Baselines of 100, 100.5, 99.5 and 100.2, 99.8, 100 msg/s: their mean is 100. Each run about its
own leg's mean (a candidate of m, m + 0.5, m - 0.5 adds 0.25 + 0.25): squares 0.5 + 0.5 + 0.08 =
1.08 over 9 - 3 = 6 degrees of freedom, a sigma of 0.4243 % of 100. The candidate's mean against
the baselines' spreads sqrt(1/3 + 1/6) of that, 0.3 %; Student's t with 6 degrees of freedom
passes 4.312 once in 400: the noise band is ±1.29 %.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reports import aba
from reports.aba import AbaRun, Legs, judge_aba, read_legs, t_quantile
from reports.history import FIGURES
from reports.verdict import GateRules, Threshold, Verdict

FIRST = (100.0, 100.5, 99.5)
SECOND = (100.2, 99.8, 100.0)


def _runs(leg: str, rates: tuple[float, ...], **figures: float) -> tuple[AbaRun, ...]:
    values: dict[str, float | None] = {f.key: None for f in FIGURES}
    values |= {"loss_ratio": 0.0, "duplicate_ratio": 0.0} | figures
    return tuple(AbaRun(f"t.{leg}-{n:02d}", "success", values | {"receive_rate": r}) for n, r in enumerate(rates, 1))


def _legs(candidate_mean: float, first: tuple[float, ...] = FIRST, second: tuple[float, ...] = SECOND) -> Legs:
    m = candidate_mean
    return Legs(_runs("a1", first), _runs("b", (m, m + 0.5, m - 0.5)), _runs("a2", second))


def test_students_t_is_drawn_to_its_table() -> None:
    # t(0.9975; 6) = 4.317, t(0.9975; 27) = 3.057, t(0.99865; 6) = 4.904 (3 sigma's tail).
    assert t_quantile(6, 0.0025) == pytest.approx(4.317, rel=0.01)
    assert t_quantile(27, 0.0025) == pytest.approx(3.057, rel=0.01)
    assert t_quantile(6, Threshold(3.0, in_sigmas=True).tail) == pytest.approx(4.904, rel=0.01)


def test_a_candidate_worse_than_both_baselines_beyond_threshold_and_noise_is_a_regression() -> None:
    found = judge_aba(_legs(94.0), GateRules())
    assert found.verdict is Verdict.REGRESSION and found.exit_code == 3
    assert found.why == (
        "Receive rate fell 6.0 % (threshold 5 %): the candidate's mean against both baselines' (first baseline "
        "100.000, candidate 94.000, second baseline 100.000 msg/s; noise band ±1.3 % over 9 runs)"
    )
    noise = judge_aba(_legs(97.0), GateRules())
    assert noise.verdict is Verdict.PASS and noise.exit_code == 0
    assert (
        noise.why
        == "the candidate is within every threshold of both baselines: 3 candidate runs against 3 + 3 baseline runs"
    )
    assert noise.noise["receive_rate"].sigma == pytest.approx(0.0042426, rel=1e-4)


def test_a_threshold_inside_the_noise_band_is_inconclusive_unless_the_candidate_is_beyond_both() -> None:
    one = GateRules(throughput_drop=Threshold(0.01))
    found = judge_aba(_legs(98.8), one)
    assert found.verdict is Verdict.INCONCLUSIVE and found.exit_code == 5
    assert found.why == "Receive rate: noise band ±1.3 % over 9 runs, threshold 1 %: more runs a leg would tell"
    assert judge_aba(_legs(98.5), one).verdict is Verdict.REGRESSION
    # In noise units the threshold is the band: as rare as 3 sigma, t's 4.905 x 0.3 % = 1.47 %.
    three = GateRules(throughput_drop=Threshold(3.0, in_sigmas=True))
    found = judge_aba(_legs(98.4), three)
    assert found.verdict is Verdict.REGRESSION
    assert found.why.startswith("Receive rate fell 1.6 % (threshold 3sigma): the candidate's mean"), found.why
    assert judge_aba(_legs(98.6), three).verdict is Verdict.PASS


def test_legs_without_noise_are_judged_against_the_rounding_of_3_significant_digits() -> None:
    """Every run at 40.000 msg/s (a fixed rate, to the message): a pooled sigma of 0, under
    which `3sigma` judged a candidate 0.025 % short a regression. Taken as 0.029 %, t(0.99865; 6)
    = 4.905 x 0.029 % x sqrt(1/3 + 1/6) = ±0.10 %."""
    flat = (40.0, 40.0, 40.0)
    three = GateRules(throughput_drop=Threshold(3.0, in_sigmas=True))
    assert judge_aba(Legs(_runs("a1", flat), _runs("b", (39.99,) * 3), _runs("a2", flat)), three).verdict is (
        Verdict.PASS
    )
    found = judge_aba(Legs(_runs("a1", flat), _runs("b", (39.9,) * 3), _runs("a2", flat)), three)
    assert found.verdict is Verdict.REGRESSION and "noise band ±0.1 % over 9 runs" in found.why, found.why


def test_the_candidate_is_judged_against_each_baseline_and_drifting_baselines_judge_nothing() -> None:
    # Baselines at 103 and 97: 6 % apart, beyond the 5 % cap and their own band: each run 0.5 %
    # off its leg's mean, t(0.99875; 6) = 4.991 x 0.5 % x sqrt(1/3 + 1/3) = ±2.0 %.
    first, second = (103.0, 103.5, 102.5), (97.0, 97.5, 96.5)
    found = judge_aba(_legs(100.0, first, second), GateRules())
    assert found.verdict is Verdict.INCONCLUSIVE
    assert found.why == "Receive rate: the baselines drifted 6.0 % apart (cap 5 %, their noise band ±2.0 %)"
    # With a 10 % cap they stand: 94.5 is 5.5 % under their mean but only 2.6 % under the second.
    loose = judge_aba(_legs(94.5, first, second), GateRules(), max_drift=Threshold(0.10))
    assert loose.verdict is Verdict.PASS, loose.why
    assert judge_aba(_legs(91.0, first, second), GateRules(), max_drift=Threshold(0.10)).verdict is Verdict.REGRESSION


def test_loss_a_failed_candidate_and_an_unmeasured_baseline() -> None:
    legs = _legs(100.0)
    lossy = Legs(
        legs.first,
        tuple(AbaRun(r.test_id, r.outcome, {**r.figures, "loss_ratio": 0.001}) for r in legs.candidate),
        legs.second,
    )
    found = judge_aba(lossy, GateRules())
    assert found.verdict is Verdict.REGRESSION and found.why.startswith(
        "Loss (lost / sent) rose from 0.0000% to 0.1000%"
    )
    failed = Legs(
        legs.first, (AbaRun("t.b-01", "failure", legs.candidate[0].figures), *legs.candidate[1:]), legs.second
    )
    assert judge_aba(failed, GateRules()).why == "the candidate's run t.b-01 failed"
    unmeasured = Legs(
        legs.first, legs.candidate, (*legs.second[:2], AbaRun("t.a2-03", "invalid", {}, "is invalid: why"))
    )
    found = judge_aba(unmeasured, GateRules())
    assert (found.verdict, found.why) == (Verdict.INCONCLUSIVE, "t.a2-03 (second baseline) is invalid: why")
    short = Legs(legs.first[:1], legs.candidate, legs.second)
    assert judge_aba(short, GateRules()).why == "the first baseline has 1 run, 2 needed"


def test_a_candidate_that_failed_where_the_baselines_failed_too_tells_nothing() -> None:
    """Every run failed (the SUT was down all night): the candidate's failure is the testbed's,
    not a regression."""
    legs = _legs(100.0)

    def failed(runs: tuple[AbaRun, ...]) -> tuple[AbaRun, ...]:
        return tuple(AbaRun(r.test_id, "failure", r.figures, "failed: the SUT refused connections") for r in runs)

    found = judge_aba(Legs(failed(legs.first), failed(legs.candidate), failed(legs.second)), GateRules())
    assert (found.verdict, found.why) == (
        Verdict.INCONCLUSIVE,
        "t.a1-01 (first baseline) failed: the SUT refused connections",
    )
    alone = judge_aba(Legs(legs.first, failed(legs.candidate), legs.second), GateRules())
    assert (alone.verdict, alone.why) == (
        Verdict.REGRESSION,
        "the candidate's run t.b-01 failed: the SUT refused connections",
    )


def test_a_latency_no_run_could_trust_is_no_pass() -> None:
    """Runs kept as successes with `untrusted_latency="warn"` have no latency figure: the
    latency was not judged, and the verdict says so rather than PASS on the rate alone."""
    legs = _legs(100.0)

    def untrusted(runs: tuple[AbaRun, ...]) -> tuple[AbaRun, ...]:
        return tuple(AbaRun(r.test_id, r.outcome, r.figures, None, "a clock stepped") for r in runs)

    found = judge_aba(Legs(untrusted(legs.first), untrusted(legs.candidate), untrusted(legs.second)), GateRules())
    assert found.verdict is Verdict.INCONCLUSIVE
    assert found.why == "Latency p50: no figure in t.a1-01 (a clock stepped) (and 2 more)"
    assert judge_aba(legs, GateRules()).verdict is Verdict.PASS  # no latency measured at all: not asked


def _aa_alarms(checks: int) -> int:
    """REGRESSION verdicts over A/A/A checks of 5 runs a leg, four figures each with its own
    normal noise (this machine's: rate 6.4 %, p50 4.4 %, p99 and p99.9 24.3 %), under 3sigma
    thresholds (so that no figure is INCONCLUSIVE)."""
    rng = np.random.default_rng(2026)
    sigmas = {"receive_rate": 0.064, "latency_p50_us": 0.044, "latency_p99_us": 0.243, "latency_p999_us": 0.243}
    three = Threshold(3.0, in_sigmas=True)
    rules = GateRules(throughput_drop=three, latency_rise=three)
    alarms = 0
    for _ in range(checks):
        legs = []
        for leg in ("a1", "b", "a2"):
            runs = []
            for n in range(5):
                figures = {key: 1000.0 * (1 + s * rng.standard_normal()) for key, s in sigmas.items()}
                runs.append(AbaRun(f"t.{leg}-{n}", "success", figures | {"loss_ratio": 0.0, "duplicate_ratio": 0.0}))
            legs.append(tuple(runs))
        alarms += judge_aba(Legs(*legs), rules).verdict is Verdict.REGRESSION
    return alarms


def test_candidates_without_a_change_cry_wolf_under_once_in_100_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each figure's band is crossed as rarely as 3 sigma (0.135 %), the four together in about
    0.5 % of checks: 7 of 2,000 here. With the normal quantile for a band, as if 12 degrees of
    freedom knew the noise exactly, 49."""
    alarms = _aa_alarms(2_000)
    assert 2 <= alarms <= 20, alarms
    monkeypatch.setattr(aba, "t_quantile", lambda df, tail: 3.0)
    assert _aa_alarms(2_000) >= 40


def test_a_test_id_that_is_no_aba_test_says_what_it_is(tmp_path: Path) -> None:
    """A damaged parent test.json read "no test", an empty one "a test of no kind test"."""
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "test.json").write_text('{"test_id": "cut", "kind": "ab')
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "test.json").write_text("{}")
    (tmp_path / "fixed").mkdir()
    (tmp_path / "fixed" / "test.json").write_text(json.dumps({"test_id": "fixed", "kind": "fixed-rate"}))
    for test_id, why in (
        ("cut", "cut/test.json is no test's record: damaged, or still being written"),
        ("empty", "empty is a test whose test.json names no kind, not an A-B-A one"),
        ("fixed", "fixed is a fixed-rate test, not an A-B-A one"),
        ("absent", f"no test 'absent' in {tmp_path}"),
    ):
        with pytest.raises(ValueError) as refused:
            read_legs(tmp_path, test_id)
        assert str(refused.value) == why


def test_the_json_names_the_comparisons_centre_a_mean() -> None:
    noise = judge_aba(_legs(97.0), GateRules()).as_dict()["noise"]
    sigma = pytest.approx(0.0042426, rel=1e-4)
    assert isinstance(noise, dict) and noise["receive_rate"] == {"runs": 9, "mean": 100.0, "sigma": sigma}


def _write_aba(root: Path, steps: list[str], outcome: str = "success") -> None:
    """An A-B-A test `t` whose phases' rows are `steps`, each phase a run at 100 msg/s."""
    root.mkdir(exist_ok=True)
    rows = [{"test_id": step, "outcome": outcome} for step in steps]
    (root / "t").mkdir()
    (root / "t" / "test.json").write_text(json.dumps({"test_id": "t", "kind": "aba", "steps": rows}))
    for n, step in enumerate(dict.fromkeys(steps)):
        summary = {"sent": 100, "received": 100, "receive_rate": {"mean": 100.0 + n % 3}}
        (root / step).mkdir(exist_ok=True)
        record = {"test_id": step, "kind": "fixed-rate", "outcome": outcome, "summary": summary}
        (root / step / "test.json").write_text(json.dumps(record))


def test_phases_that_never_ended_twice_written_or_of_another_test_are_not_judged(tmp_path: Path) -> None:
    """A hostile pass: candidate runs still "running" passed; the candidate's three rows written
    ten times counted 30 runs and narrowed the band; another test's phase was judged as one."""
    legs = ["t.a1-01", "t.a1-02", "t.b-01", "t.b-02", "t.a2-01", "t.a2-02"]
    _write_aba(tmp_path / "running", legs, outcome="running")
    found = judge_aba(read_legs(tmp_path / "running", "t"), GateRules())
    assert (found.verdict, found.why) == (Verdict.INCONCLUSIVE, "t.a1-01 (first baseline) ended 'running'")
    _write_aba(tmp_path / "twice", legs + ["t.b-01", "t.b-02"] * 10)
    twice = read_legs(tmp_path / "twice", "t")
    assert [len(leg) for leg in (twice.first, twice.candidate, twice.second)] == [2, 2, 2]
    _write_aba(tmp_path / "foreign", [*legs, "other.b-01"])
    with pytest.raises(ValueError, match=r"t.s test\.json names other\.b-01 as a phase: no phase of t"):
        read_legs(tmp_path / "foreign", "t")
