"""A test against a baseline (seed 004 §7.1): did the new build get slower or lose more?

Each figure's change is judged against its threshold; one regression makes the verdict
"regression", which `maestro report --baseline` turns into a non-zero exit code so a CI
pipeline can gate a broker build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Thresholds", "compare"]


@dataclass(frozen=True)
class Thresholds:
    throughput_drop: float = 0.05  # receive rate may fall by this fraction
    latency_rise: float = 0.10  # p50, p99, p99.9 may rise by this fraction
    loss_rise: float = 0.0  # lost/sent may rise by this many points (0.001 = 0.1 %)
    duplicate_rise: float = 0.0  # duplicates/sent, likewise (`maestro history`)


def _ratio(lost: int, sent: int) -> float:
    return lost / sent if sent else 0.0


def compare(current: dict[str, Any], baseline: dict[str, Any], thresholds: Thresholds) -> dict[str, Any]:
    """Both arguments are summary.json contents. A run that did not measure the SUT (outcome
    "invalid") is held to nothing and holds nothing to it: the verdict is "invalid", with why."""
    for which, run in (("the baseline", baseline), ("this run", current)):
        if run.get("outcome") == "invalid":
            why = f"{which} ({run['test_id']}) did not measure the SUT: {run.get('reason')}"
            return {
                "test_id": baseline["test_id"],
                "verdict": "invalid",
                "regressions": [],
                "reason": why,
                "changes": {},
            }
    changes: dict[str, dict[str, Any]] = {}

    def judge(name: str, base: float, now: float, regression: bool, threshold: float) -> None:
        change = (now - base) / base if base else 0.0
        changes[name] = {
            "baseline": base,
            "current": now,
            "change_percent": round(100 * change, 3),
            "threshold_percent": round(100 * threshold, 3),
            "regression": regression,
        }

    base_rate, rate = baseline["receive_rate"]["mean"], current["receive_rate"]["mean"]
    judge(
        "receive_rate", base_rate, rate, rate < base_rate * (1 - thresholds.throughput_drop), thresholds.throughput_drop
    )
    for key in ("p50", "p99", "p999"):
        if not baseline["latency_us"] or not current["latency_us"]:
            break  # a run whose latency is no figure (summary.json's `latency_untrusted`): nothing to hold it to
        base_us, now_us = baseline["latency_us"][key], current["latency_us"][key]
        judge(
            f"latency_{key}_us",
            base_us,
            now_us,
            now_us > base_us * (1 + thresholds.latency_rise),
            thresholds.latency_rise,
        )
    base_loss = _ratio(baseline["lost"], baseline["sent"])
    loss = _ratio(current["lost"], current["sent"])
    changes["loss_ratio"] = {
        "baseline": base_loss,
        "current": loss,
        "change_points": loss - base_loss,
        "threshold_points": thresholds.loss_rise,
        "regression": loss > base_loss + thresholds.loss_rise,
    }
    regressions = sorted(name for name, c in changes.items() if c["regression"])
    return {
        "test_id": baseline["test_id"],
        "verdict": "regression" if regressions else "pass",
        "regressions": regressions,
        "changes": changes,
    }
