"""Mean and 95 % confidence interval of a few repetitions (Student's t: n is small)."""

from __future__ import annotations

import math

from protocol.test_record import Estimate  # as test.json keeps it

__all__ = ["Estimate", "estimate"]

# t(0.975, df) for df = 1..30; beyond, the normal 1.96 is within 2 %.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def estimate(samples: list[float], least: float | None = None) -> Estimate:
    """`least`: the figure's least possible value (0 for a rate or a latency). The interval ends
    there: two repetitions' t of 12.7 gave a rate's a negative lower end, a figure no run can
    have; clipped, the interval still holds the true value as often as before."""
    n = len(samples)
    if n == 0:
        raise ValueError("no samples")
    mean = sum(samples) / n
    if n == 1:
        return Estimate(1, mean, 0.0, (mean, mean))
    stdev = math.sqrt(sum((x - mean) ** 2 for x in samples) / (n - 1))
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    half = t * stdev / math.sqrt(n)
    low = mean - half if least is None else max(least, mean - half)
    return Estimate(n, mean, stdev, (low, mean + half))
