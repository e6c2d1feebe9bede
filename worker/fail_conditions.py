"""Fail conditions a worker checks on itself once a second, as Maestro's workers do.

The first to trip ends the worker's run; the reason goes to the coordinator in NOTIFY_FAIL and
stops the whole test. Loss is not judged here: only the merged sequence numbers of every
receiver can tell it exactly, so the coordinator checks it when the files are in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hdrh.histogram import HdrHistogram

__all__ = ["FailConditions"]

DEFAULT_STALL_S = 30.0


@dataclass(frozen=True)
class FailConditions:
    latency_ms: float = 0.0  # 0: no latency bound
    latency_percentile: float = 99.0
    latency_policy: str = "soft"  # soft: the percentile of the last interval; hard: its max
    min_rate_ratio: float = 0.0  # achieved / target since warm-up; 0: not checked
    stall_s: float = DEFAULT_STALL_S  # no progress for this long; 0: not checked

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> FailConditions:
        return cls(
            latency_ms=options.get("fail_latency_ms", 0.0),
            latency_percentile=options.get("fail_latency_percentile", 99.0),
            latency_policy=options.get("fail_latency_policy", "soft"),
            min_rate_ratio=options.get("fail_min_rate_ratio", 0.0),
            stall_s=options.get("fail_stall_s", DEFAULT_STALL_S),
        )

    def stalled(self, idle_s: float, what: str) -> str | None:
        if self.stall_s and idle_s >= self.stall_s:
            return f"stalled: nothing {what} for {idle_s:.0f} s (bound {self.stall_s:g} s)"
        return None

    def latency(self, interval: HdrHistogram) -> str | None:
        """Judge one interval of corrected latency (µs)."""
        if not self.latency_ms or not interval.get_total_count():
            return None
        if self.latency_policy == "hard":
            value_us, label = interval.get_max_value(), "max"
        else:
            value_us, label = interval.get_value_at_percentile(self.latency_percentile), f"p{self.latency_percentile:g}"
        if value_us > self.latency_ms * 1000:
            return f"latency {label} {value_us / 1000:.3f} ms > bound {self.latency_ms:g} ms ({self.latency_policy})"
        return None

    def rate(self, sent: int, seconds: float, target_per_s: float) -> str | None:
        """Judge the rate achieved since warm-up against the target (all clients together)."""
        if not self.min_rate_ratio or not target_per_s or seconds <= 0:
            return None
        achieved = sent / seconds
        if achieved < self.min_rate_ratio * target_per_s:
            return (
                f"rate {achieved:.1f} msg/s is {achieved / target_per_s:.1%} of the target {target_per_s:g} msg/s "
                f"(bound {self.min_rate_ratio:.0%})"
            )
        return None
