"""Reports of tests made of phases: repetitions as mean ± CI, sweeps as a comparison, curves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.synthetic import one_loss_one_duplicate

from reports.page import SUMMARY_KEYS
from reports.report import build_report


def _step(test_id: str, target: float, received: float, p99_us: float, outcome: str = "success") -> dict[str, Any]:
    return {
        "test_id": test_id,
        "target_rate": target,
        "send_rate": target,
        "receive_rate": received,
        "latency_us": {"p50": p99_us / 2, "p99": p99_us},
        "lost": 0,
        "outcome": outcome,
        "reason": None,
    }


def test_a_repeated_test_shows_mean_and_confidence_interval_and_links_its_runs(tmp_path: Path) -> None:
    for run in ("r01", "r02", "r03"):
        one_loss_one_duplicate(tmp_path, run)
    parent = tmp_path / "rep"
    parent.mkdir()
    record = {
        "kind": "repeated",
        "outcome": "success",
        "reason": None,
        "steps": [_step("r01", 100, 99, 2000), _step("r02", 100, 100, 3000), _step("r03", 100, 101, 4000)],
        "statistics": {
            "receive_rate": {"n": 3, "mean": 100.0, "stdev": 1.0, "ci95": [97.5159, 102.4841]},
            "latency_p99_us": {"n": 3, "mean": 3000.0, "stdev": 1000.0, "ci95": [515.9, 5484.1]},
        },
    }
    (parent / "test.json").write_text(json.dumps(record))
    out, comparison = build_report(None, parent)  # no Spark: the phases' own reports hold their series
    summary = json.loads((out / "summary.json").read_text())
    assert comparison is None and tuple(summary) == SUMMARY_KEYS and summary["test_id"] == "rep"
    assert (summary["sent"], summary["lost"]) == (40, 1)  # the phase that stands for it: the last
    page = (out / "index.html").read_text()
    assert "mean and 95 % confidence interval" in page
    # receive rate 100 ± 2.484; p99 3 ms ± 2.484 ms.
    assert "<td>receive rate, msg/s</td><td>100</td><td>2.484</td><td>97.516</td><td>102.484</td>" in page
    assert "<td>latency p99, ms</td><td>3</td><td>2.484</td><td>0.516</td><td>5.484</td>" in page
    assert '<a href="../../r02/report/index.html">r02</a>' in page


def test_a_sweep_compares_its_points_and_plots_them_against_the_parameter(tmp_path: Path) -> None:
    one_loss_one_duplicate(tmp_path, "p02")
    parent = tmp_path / "sweep"
    parent.mkdir()
    comparison = [
        {"point": {"size": size}, **_step(f"p{n:02d}", 1000, received, p99)}
        for n, (size, received, p99) in enumerate(((64, 1000, 1500), (1024, 990, 2500), (65536, 400, 90000)), 1)
    ]
    record = {
        "kind": "sweep",
        "outcome": "success",
        "reason": None,
        "steps": [{k: v for k, v in row.items() if k != "point"} for row in comparison],
        "comparison": comparison,
        "best": comparison[1] | {"test_id": "p02"},
    }
    (parent / "test.json").write_text(json.dumps(record))
    out, _ = build_report(None, parent)
    summary = json.loads((out / "summary.json").read_text())
    page = (out / "index.html").read_text()
    assert "Throughput against size" in page and "Latency against size" in page
    assert "<td>65,536</td><td>400</td><td>90</td><td>0</td><td>success</td>" in page
    assert summary["received"] == 39  # the best point's own figures


def test_an_incremental_test_plots_latency_against_throughput(tmp_path: Path) -> None:
    one_loss_one_duplicate(tmp_path, "s02")
    parent = tmp_path / "inc"
    parent.mkdir()
    steps = [_step("s01", 100, 100, 1000), _step("s02", 200, 200, 2000), _step("s03", 300, 240, 50000, "failure")]
    record = {"kind": "incremental", "outcome": "success", "reason": None, "steps": steps, "max_sustainable": steps[1]}
    (parent / "test.json").write_text(json.dumps(record))
    out, _ = build_report(None, parent)
    page = (out / "index.html").read_text()
    assert "Latency against throughput" in page
    assert "Maximum sustainable: 200.0 msg/s received at 200 msg/s offered" in page
