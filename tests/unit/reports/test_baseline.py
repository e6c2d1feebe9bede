from __future__ import annotations

import json
from dataclasses import replace

from protocol.figures import Percentiles, Rate, TestFigures
from reports.baseline import Judged, Thresholds, compare

BASE = TestFigures(
    test_id="base",
    sent=10_000,
    lost=0,
    receive_rate=Rate(1000.0, 990.0, 1010.0),
    latency_us=Percentiles(p50=2000.0, p99=9000.0, p999=15000.0),
)


def judged(figures: TestFigures, outcome: str | None = None, reason: str | None = None) -> Judged:
    return Judged(figures, outcome, reason)


def test_a_twenty_percent_throughput_drop_is_a_regression() -> None:
    same = compare(judged(BASE), judged(BASE), Thresholds())
    assert same.verdict == "pass" and same.regressions == []
    slower = replace(BASE, receive_rate=Rate(800.0))
    result = compare(judged(slower), judged(BASE), Thresholds())
    assert result.verdict == "regression" and result.regressions == ["receive_rate"]
    assert result.changes["receive_rate"].change == -0.2
    # Within a looser threshold it passes.
    assert compare(judged(slower), judged(BASE), Thresholds(throughput_drop=0.25)).verdict == "pass"


def test_latency_and_loss_regressions() -> None:
    worse = replace(BASE, latency_us=replace(BASE.latency_us, p99=9000 * 1.11), lost=1)
    result = compare(judged(worse), judged(BASE), Thresholds())
    assert result.regressions == ["latency_p99_us", "loss_ratio"]
    assert compare(judged(worse), judged(BASE), Thresholds(latency_rise=0.2, loss_rise=0.001)).verdict == "pass"


def test_a_run_whose_latency_is_no_figure_is_held_to_its_rate_and_loss_only() -> None:
    untrusted = replace(BASE, latency_us=Percentiles(p99=90_000.0), latency_untrusted="a clock step")
    result = compare(judged(untrusted), judged(BASE), Thresholds())
    assert (result.verdict, list(result.changes)) == ("pass", ["receive_rate", "loss_ratio"])


def test_summary_json_keeps_its_keys_and_their_order() -> None:
    """summary.json's `baseline` is read by CI scripts: the bytes of the record before it was typed."""
    worse = replace(BASE, test_id="now", receive_rate=Rate(800.0), lost=2)
    text = json.dumps(compare(judged(worse), judged(BASE), Thresholds()).to_json())
    assert text == (
        '{"test_id": "base", "verdict": "regression", "regressions": ["loss_ratio", "receive_rate"], "changes": '
        '{"receive_rate": {"baseline": 1000.0, "current": 800.0, "change_percent": -20.0, "threshold_percent": 5.0, '
        '"regression": true}, '
        '"latency_p50_us": {"baseline": 2000.0, "current": 2000.0, "change_percent": 0.0, "threshold_percent": 10.0, '
        '"regression": false}, '
        '"latency_p99_us": {"baseline": 9000.0, "current": 9000.0, "change_percent": 0.0, "threshold_percent": 10.0, '
        '"regression": false}, '
        '"latency_p999_us": {"baseline": 15000.0, "current": 15000.0, "change_percent": 0.0, '
        '"threshold_percent": 10.0, "regression": false}, '
        '"loss_ratio": {"baseline": 0.0, "current": 0.0002, "change_points": 0.0002, "threshold_points": 0.0, '
        '"regression": true}}}'
    )


def test_an_invalid_run_on_either_side_is_not_compared() -> None:
    """A baseline whose generator was the limit would pass a slower build (its figure is the
    generator's); a run that measured nothing cannot regress or pass."""
    slower = replace(BASE, test_id="now", receive_rate=Rate(500.0))
    invalid_base = judged(BASE, "invalid", "the load generator was the limit")
    result = compare(judged(slower), invalid_base, Thresholds())
    assert result.to_json() == {
        "test_id": "base",
        "verdict": "invalid",
        "reason": "the baseline (base) did not measure the SUT: the load generator was the limit",
        "regressions": [],
        "changes": {},
    }
    assert list(result.to_json()) == ["test_id", "verdict", "regressions", "reason", "changes"]
    result = compare(judged(slower, "invalid", "latency untrusted"), judged(BASE), Thresholds())
    assert (result.verdict, result.reason) == ("invalid", "this run (now) did not measure the SUT: latency untrusted")
    # The same figures, both runs valid: a regression.
    assert compare(judged(slower, "success"), judged(BASE, "success"), Thresholds()).verdict == "regression"
