from __future__ import annotations

import copy
from typing import Any

from reports.baseline import Thresholds, compare

BASE: dict[str, Any] = {
    "test_id": "base",
    "sent": 10_000,
    "lost": 0,
    "receive_rate": {"mean": 1000.0},
    "latency_us": {"p50": 2000.0, "p99": 9000.0, "p999": 15000.0},
}


def test_a_twenty_percent_throughput_drop_is_a_regression() -> None:
    same = compare(copy.deepcopy(BASE), BASE, Thresholds())
    assert same["verdict"] == "pass" and same["regressions"] == []
    slower = copy.deepcopy(BASE)
    slower["receive_rate"]["mean"] = 800.0
    result = compare(slower, BASE, Thresholds())
    assert result["verdict"] == "regression" and result["regressions"] == ["receive_rate"]
    assert result["changes"]["receive_rate"]["change_percent"] == -20.0
    # Within a looser threshold it passes.
    assert compare(slower, BASE, Thresholds(throughput_drop=0.25))["verdict"] == "pass"


def test_latency_and_loss_regressions() -> None:
    worse = copy.deepcopy(BASE)
    worse["latency_us"]["p99"] = 9000 * 1.11
    worse["lost"] = 1
    result = compare(worse, BASE, Thresholds())
    assert result["regressions"] == ["latency_p99_us", "loss_ratio"]
    assert compare(worse, BASE, Thresholds(latency_rise=0.2, loss_rise=0.001))["verdict"] == "pass"


def test_an_invalid_run_on_either_side_is_not_compared() -> None:
    """A baseline whose generator was the limit would pass a slower build (its figure is the
    generator's); a run that measured nothing cannot regress or pass."""
    slower = copy.deepcopy(BASE) | {"test_id": "now"}
    slower["receive_rate"] = {"mean": 500.0}
    invalid_base = BASE | {"outcome": "invalid", "reason": "the load generator was the limit"}
    result = compare(slower, invalid_base, Thresholds())
    assert result == {
        "test_id": "base",
        "verdict": "invalid",
        "reason": "the baseline (base) did not measure the SUT: the load generator was the limit",
        "regressions": [],
        "changes": {},
    }
    result = compare(slower | {"outcome": "invalid", "reason": "latency untrusted"}, BASE, Thresholds())
    assert (result["verdict"], result["reason"]) == (
        "invalid",
        "this run (now) did not measure the SUT: latency untrusted",
    )
    # The same figures, both runs valid: a regression.
    assert (
        compare(slower | {"outcome": "success"}, BASE | {"outcome": "success"}, Thresholds())["verdict"] == "regression"
    )
