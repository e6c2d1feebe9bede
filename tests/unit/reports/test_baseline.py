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
