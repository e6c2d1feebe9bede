"""A test against a baseline (seed 004 §7.1): did the new build get slower or lose more?

Each figure's change is judged against its threshold; one regression makes the verdict
"regression", which `maestro report --baseline` turns into a non-zero exit code so a CI
pipeline can gate a broker build on it. The comparison is a record; summary.json's `baseline`
key is its `to_json`, pinned key for key by tests/unit/reports/test_baseline.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.figures import TestFigures
from protocol.json_value import JsonObject

__all__ = ["Change", "Comparison", "Judged", "Thresholds", "compare"]


@dataclass(frozen=True)
class Thresholds:
    throughput_drop: float = 0.05  # receive rate may fall by this fraction
    latency_rise: float = 0.10  # p50, p99, p99.9 may rise by this fraction
    loss_rise: float = 0.0  # lost/sent may rise by this many points (0.001 = 0.1 %)
    duplicate_rise: float = 0.0  # duplicates/sent, likewise (`maestro history`)


@dataclass(frozen=True)
class Judged:
    """A test's figures with the coordinator's outcome and reason: what a comparison holds."""

    figures: TestFigures
    outcome: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Change:
    """One figure against the baseline's. A ratio's change is in points (0.001 = 0.1 %), every
    other figure's a fraction of the baseline's."""

    baseline: float
    current: float
    threshold: float
    regression: bool
    in_points: bool = False

    @property
    def change(self) -> float:
        if self.in_points:
            return self.current - self.baseline
        return (self.current - self.baseline) / self.baseline if self.baseline else 0.0

    def to_json(self) -> JsonObject:
        if self.in_points:
            return {
                "baseline": self.baseline,
                "current": self.current,
                "change_points": self.change,
                "threshold_points": self.threshold,
                "regression": self.regression,
            }
        return {
            "baseline": self.baseline,
            "current": self.current,
            "change_percent": round(100 * self.change, 3),
            "threshold_percent": round(100 * self.threshold, 3),
            "regression": self.regression,
        }


@dataclass(frozen=True)
class Comparison:
    """The verdict against one baseline test: "pass", "regression", or "invalid" with why (a run
    on either side did not measure the SUT, and holds nothing to the other)."""

    test_id: str  # the baseline's
    verdict: str
    changes: Mapping[str, Change] = field(default_factory=dict)
    reason: str | None = None

    @property
    def regressions(self) -> list[str]:
        return sorted(name for name, c in self.changes.items() if c.regression)

    def to_json(self) -> JsonObject:
        out: JsonObject = {"test_id": self.test_id, "verdict": self.verdict, "regressions": self.regressions}
        if self.reason is not None:
            out["reason"] = self.reason
        out["changes"] = {name: c.to_json() for name, c in self.changes.items()}
        return out


def _ratio(lost: int, sent: int) -> float:
    return lost / sent if sent else 0.0


def compare(current: Judged, baseline: Judged, thresholds: Thresholds) -> Comparison:
    """A run that did not measure the SUT (outcome "invalid") is held to nothing and holds
    nothing to it: the verdict is "invalid", with why."""
    base_id = baseline.figures.test_id
    for which, run in (("the baseline", baseline), ("this run", current)):
        if run.outcome == "invalid":
            why = f"{which} ({run.figures.test_id}) did not measure the SUT: {run.reason}"
            return Comparison(base_id, "invalid", reason=why)
    now, base = current.figures, baseline.figures
    drop, rise = thresholds.throughput_drop, thresholds.latency_rise
    base_rate, rate = base.receive_rate.mean, now.receive_rate.mean
    changes = {"receive_rate": Change(base_rate, rate, drop, rate < base_rate * (1 - drop))}
    # A run whose latency is no figure (summary.json's `latency_untrusted`): nothing to hold it to.
    if not base.latency_untrusted and not now.latency_untrusted:
        for key in ("p50", "p99", "p999"):
            base_us, now_us = getattr(base.latency_us, key), getattr(now.latency_us, key)
            changes[f"latency_{key}_us"] = Change(base_us, now_us, rise, now_us > base_us * (1 + rise))
    base_loss, loss = _ratio(base.lost, base.sent), _ratio(now.lost, now.sent)
    changes["loss_ratio"] = Change(
        base_loss, loss, thresholds.loss_rise, loss > base_loss + thresholds.loss_rise, in_points=True
    )
    regressed = any(c.regression for c in changes.values())
    return Comparison(base_id, "regression" if regressed else "pass", changes)
