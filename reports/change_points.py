"""Change points in a series of runs: E-divisive means (Matteson and James, "A Nonparametric
Approach for Multiple Change Point Analysis of Multivariate Data", 2014), the method Apache Otava
(formerly DataStax Hunter) and MongoDB's CI build on.

The series is split where the energy distance between the part before and the part after is
largest, recursively, for as long as the split is significant. Significance is the original
paper's permutation test: the values of each segment are shuffled within it many times, and a
split counts only if its statistic beats nearly all of the shuffles. A single outlier night
cannot pass it, since every shuffle still holds that outlier somewhere; a lasting shift can.

Written here in numpy rather than taken from a library: Otava's package pulls in BigQuery and
Slack clients and pins numpy, MongoDB's signal-processing-algorithms pins numpy < 2, setuptools
and gevent, and ruptures has no E-divisive and no significance test (its searches need a penalty
or the number of breakpoints given).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["DEFAULT_LAST_RUNS", "DEFAULT_MAX_P", "ChangePoint", "change_points"]

# Otava's default first-pass level is 0.01 and its permutation variant runs 100 shuffles; 199
# make 0.005 the smallest p-value a split can reach, below the default level.
DEFAULT_MAX_P = 0.01
DEFAULT_PERMUTATIONS = 199
# Runs a history analyses, the newest (reports.history.analyse): the search and its shuffles grow
# with the square of the runs (3,000 took 220 s a figure here, 400 take 3 s), and a change more
# than a year of nights back is no news to tonight's gate.
DEFAULT_LAST_RUNS = 400
# A change must hold for two runs on each side to count. E-divisive alone can cut one value off
# either end of a series: an outlier on the first or the newest night would pass for a change.
MIN_RUNS = 2


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first value after the change
    p_value: float
    mean_before: float  # of the segment that ends here (from the change point before, if any)
    mean_after: float  # of the segment that starts here (to the next change point, if any)

    @property
    def relative_change(self) -> float:
        """(after - before) / before; 0 when before is 0."""
        return (self.mean_after - self.mean_before) / self.mean_before if self.mean_before else 0.0


def change_points(
    values: Sequence[float],
    *,
    max_p: float = DEFAULT_MAX_P,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> list[ChangePoint]:
    """The significant change points of `values`, by index. The shuffles come from a generator
    seeded with `seed`: the same series always gives the same answer."""
    series = np.asarray(values, dtype=np.float64)
    if series.ndim != 1 or not np.all(np.isfinite(series)):
        raise ValueError("change points need a series of finite numbers")
    rng = np.random.default_rng(seed)
    found: dict[int, float] = {}  # cut -> its p-value when it was made
    while True:
        bounds = [0, *sorted(found), len(series)]
        segments = [(a, b) for a, b in itertools.pairwise(bounds) if b - a >= 2 * MIN_RUNS]
        if not segments:
            break
        (q, tau), start = max((_best_split(series[a:b]), a) for a, b in segments)
        p = _p_value(series, segments, q, permutations, rng, max_p=max_p) if q > 0 else 1.0
        if p > max_p:
            break
        found[start + tau] = p
    cuts = sorted(found)
    bounds = [0, *cuts, len(series)]
    return [
        ChangePoint(cut, found[cut], float(series[bounds[i] : cut].mean()), float(series[cut : bounds[i + 2]].mean()))
        for i, cut in enumerate(cuts)
    ]


def _p_value(
    series: NDArray[np.float64],
    segments: list[tuple[int, int]],
    observed: float,
    permutations: int,
    rng: np.random.Generator,
    *,
    max_p: float,
) -> float:
    """The share of shuffles (each segment within itself) whose best split is as strong; once
    enough were that the split cannot be significant, the share so far over all of them (above
    `max_p` as the whole would be: the last, failing search of a long history took half its time)."""
    as_strong = 0
    enough = max_p * (permutations + 1) - 1
    for _ in range(permutations):
        shuffled = max(_best_split(rng.permutation(series[a:b]))[0] for a, b in segments)
        as_strong += shuffled >= observed * (1 - 1e-12)
        if as_strong > enough:
            break
    return (as_strong + 1) / (permutations + 1)


def _best_split(x: NDArray[np.float64]) -> tuple[float, int]:
    """max over tau < kappa of Q(x[:tau], x[tau:kappa]), and its tau. Q is the scaled energy
    distance: 2/(n+m) * sum|X-Y| - 2m/((n+m)(n-1)) * sum_{i<k}|X_i-X_k| - 2n/((n+m)(m-1)) *
    sum_{j<k}|Y_j-Y_k|, all sums from one 2-D prefix sum of the distance matrix."""
    n = len(x)
    distance = np.abs(x[:, None] - x[None, :])
    s = np.zeros((n + 1, n + 1))
    s[1:, 1:] = distance.cumsum(axis=0).cumsum(axis=1)
    tau = np.arange(n + 1)[:, None]
    kappa = np.arange(n + 1)[None, :]
    zero = np.zeros_like(tau)

    def block(
        r0: NDArray[np.int64], r1: NDArray[np.int64], c0: NDArray[np.int64], c1: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        return s[r1, c1] - s[r0, c1] - s[r1, c0] + s[r0, c0]

    between = block(zero, tau, tau, kappa)
    within_x = block(zero, tau, zero, tau) / 2
    within_y = block(tau, kappa, tau, kappa) / 2
    nx, ny, total = tau, kappa - tau, np.maximum(kappa, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        x_term = np.where(nx > 1, 2 * ny * within_x / (total * (nx - 1)), 0.0)
        y_term = np.where(ny > 1, 2 * nx * within_y / (total * (ny - 1)), 0.0)
        q = 2 * between / total - x_term - y_term
    q = np.where((tau >= MIN_RUNS) & (kappa - tau >= MIN_RUNS), q, -np.inf)
    i, j = np.unravel_index(int(np.argmax(q)), q.shape)
    return float(q[i, j]), int(i)
