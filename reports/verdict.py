"""The nightly gate's verdict on the newest run of a test: PASS, REGRESSION or INCONCLUSIVE.

A gate that passes what it cannot judge is worse than none, so INCONCLUSIVE is an answer of its
own: too few comparable runs (the same name, workload and testbed as the newest), a newest run
that did not measure the SUT, or a figure whose noise on this testbed is wider than its
threshold. Each says why in one line.

The newest run is judged two ways, and either finds a regression:
- a lasting change: the last change point among the comparable runs (reports.history) made a
  figure worse beyond its threshold;
- one night: the newest run is worse than the median of the comparable runs since their last
  change point by more than the threshold;
- its whole latency curve: at a percentile the figures do not gate (p90, p99.99…), the newest
  run is worse than the comparable runs' median beyond both the latency threshold and that
  percentile's own noise band (a tail that moved where p99 did not).

Noise is each figure's own, on this testbed, from those same runs: a robust standard deviation
(1.4826 x the median absolute deviation, so that one outlier night does not widen it), relative
to the median. The band a run without a change falls in is ±3 of them; a threshold narrower
than that band would flag normal nights, so the figure is INCONCLUSIVE instead. A threshold may
also be stated in units of that noise (`3sigma`).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from protocol.codes import ExitCode
from protocol.json_value import JsonObject
from reports.history import COUNTED, FIGURES, Figure, History, Run, gate, how_worse, worse_by

_P999 = next(fig for fig in FIGURES if fig.key == "latency_p999_us")  # a latency: higher is worse

__all__ = [
    "GateRules",
    "GateVerdict",
    "Noise",
    "Threshold",
    "Verdict",
    "curve_band_sigmas",
    "judge",
    "noise_of",
    "not_measured",
]

# A run without a change falls within ±3 robust standard deviations of the median (99.7 % of
# normal noise): the band a fixed threshold must be wider than to be judged.
NOISE_BAND_SIGMAS = 3.0
_MAD_TO_SIGMA = 1.4826  # the MAD of normal noise is 0.6745 sigma
_THRESHOLD = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(%|sigma)?\s*")


class Verdict(StrEnum):
    PASS = "PASS"
    REGRESSION = "REGRESSION"
    INCONCLUSIVE = "INCONCLUSIVE"

    @property
    def exit_code(self) -> ExitCode:
        return {
            Verdict.PASS: ExitCode.SUCCESS,
            Verdict.REGRESSION: ExitCode.REGRESSION,
            Verdict.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
        }[self]


@dataclass(frozen=True)
class Threshold:
    """How much worse a figure may get: a fraction of its level (0.05, or "5%"), or a number of
    its noise's standard deviations ("3sigma")."""

    value: float
    in_sigmas: bool = False

    @classmethod
    def parse(cls, text: str) -> Threshold:
        match = _THRESHOLD.fullmatch(text)
        if not match:
            raise ValueError(f"{text!r} is no threshold: a fraction (0.05), a percentage (5%) or noise units (3sigma)")
        number, unit = float(match[1]), match[2]
        return cls(number / 100 if unit == "%" else number, unit == "sigma")

    def of(self, sigma: float) -> float:
        """As a fraction of the level, for a figure whose relative noise is `sigma`."""
        return self.value * sigma if self.in_sigmas else self.value

    def __str__(self) -> str:
        return f"{self.value:g}sigma" if self.in_sigmas else f"{100 * self.value:g} %"


@dataclass(frozen=True)
class GateRules:
    throughput_drop: Threshold = Threshold(0.05)
    latency_rise: Threshold = Threshold(0.10)
    loss_rise: float = 0.0  # ratio points
    duplicate_rise: float = 0.0  # ratio points
    min_runs: int = 5  # comparable runs before the newest, since their last change

    def threshold(self, fig: Figure) -> Threshold:
        if fig.key in COUNTED:
            return Threshold(self.loss_rise if fig.key == "loss_ratio" else self.duplicate_rise)
        return self.throughput_drop if fig.higher_is_better else self.latency_rise


@dataclass(frozen=True)
class Noise:
    """One figure's noise over runs without a change: their median, and the robust standard
    deviation relative to it (absolute, in ratio points, for a COUNTED figure)."""

    runs: int
    median: float
    sigma: float

    @property
    def band(self) -> float:
        return NOISE_BAND_SIGMAS * self.sigma


def noise_of(values: list[float], relative: bool = True) -> Noise:
    """The median and the robust standard deviation (1.4826 x MAD) of `values`."""
    median = statistics.median(values)
    sigma = _MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)
    if relative:
        sigma = sigma / abs(median) if median else 0.0
    return Noise(len(values), median, sigma)


@dataclass
class GateVerdict:
    verdict: Verdict
    why: str  # one line
    findings: list[str] = field(default_factory=list)  # each figure's regression or doubt
    noise: dict[str, Noise] = field(default_factory=dict)  # by figure key
    doubts: list[str] = field(default_factory=list)  # the findings that are doubts, not regressions

    @property
    def exit_code(self) -> ExitCode:
        return self.verdict.exit_code

    @property
    def line(self) -> str:
        return f"{self.verdict.value}: {self.why}"

    def as_dict(self) -> JsonObject:
        return {
            "verdict": self.verdict.value,
            "why": self.why,
            "findings": self.findings,
            "noise": {k: {"runs": n.runs, "median": n.median, "sigma": n.sigma} for k, n in self.noise.items()},
        }


def judge(history: History, rules: GateRules) -> GateVerdict:
    """The verdict on the newest run of `history` (analysed: its change points found)."""
    newest = history.newest
    if newest is None:
        return GateVerdict(Verdict.INCONCLUSIVE, f"no finished run of {history.name!r}")
    if newest.outcome == "failure":
        return GateVerdict(
            Verdict.REGRESSION, f"the newest run {newest.test_id} failed: {newest.reason or 'no reason'}"
        )
    if newest.excluded:
        return GateVerdict(Verdict.INCONCLUSIVE, f"the newest run {newest.test_id} {not_measured(newest)}")
    before = [r for r in history.runs[:-1] if history.left_out(r) is None]
    if len(before) < rules.min_runs:
        return GateVerdict(
            Verdict.INCONCLUSIVE,
            f"{len(before)} comparable runs, {rules.min_runs} needed (same name, workload and testbed as "
            f"{newest.test_id})",
        )
    regressions: list[str] = []
    doubts: list[str] = []
    noise: dict[str, Noise] = {}
    for fig in FIGURES:
        found = _judge_figure(history, fig, before, rules)
        if isinstance(found, Noise):
            noise[fig.key] = found
        elif found is not None:
            (regressions if found[0] is Verdict.REGRESSION else doubts).append(found[1])
    if (shape := _distribution_finding(history, before, rules)) is not None:
        regressions.append(shape)
    # A change that lasts is a regression whatever the noise of the night against its median.
    limits = {fig.key: limit for fig in FIGURES if (limit := _change_limit(fig, before, noise, rules)) is not None}
    regressions += [f"{why} (a change point)" for why in gate(history, limits)]
    if regressions:
        more = f" (and {len(regressions) - 1} more)" if len(regressions) > 1 else ""
        return GateVerdict(Verdict.REGRESSION, regressions[0] + more, regressions + doubts, noise, doubts)
    if doubts:
        more = f" (and {len(doubts) - 1} more)" if len(doubts) > 1 else ""
        return GateVerdict(Verdict.INCONCLUSIVE, doubts[0] + more, doubts, noise, doubts)
    return GateVerdict(
        Verdict.PASS, f"{newest.test_id} is within every threshold of {len(before)} comparable runs", [], noise
    )


def _change_limit(fig: Figure, before: list[Run], noise: dict[str, Noise], rules: GateRules) -> float | None:
    """How far a change point may move the figure before it is a regression. A threshold in
    noise units takes the noise since the last change point, or, where too few runs follow it to
    know, that of every comparable run (the change inside it only widens it); None where not
    even those are enough (it was read as a fraction: 3sigma as 300 %)."""
    threshold = rules.threshold(fig)
    if fig.key in noise:
        return threshold.of(noise[fig.key].sigma)
    if not threshold.in_sigmas:
        return threshold.value
    values = [v for r in before if (v := r.figures.get(fig.key)) is not None]
    if len(values) < rules.min_runs:
        return None
    return threshold.of(noise_of(values, relative=fig.key not in COUNTED).sigma)


def not_measured(run: Run) -> str:
    """Why `run` (excluded) measured no SUT, after its test id: "is invalid: ..."."""
    if run.outcome == "invalid":
        return f"is invalid: {run.reason or 'no reason'}"
    if run.generator_bound:
        return "was generator-bound: its figures are the load generator's"
    return f"ended {run.outcome!r}"


def _judge_figure(
    history: History, fig: Figure, before: list[Run], rules: GateRules
) -> Noise | tuple[Verdict, str] | None:
    """The figure's noise when the newest run is within its threshold; else the verdict and why."""
    newest = history.runs[-1]
    since = _since_last_change(history, fig, before)
    values = [v for r in since if (v := r.figures.get(fig.key)) is not None]
    value = newest.figures.get(fig.key)
    if not values:
        return None if value is None else (Verdict.INCONCLUSIVE, f"{fig.title}: no comparable run has this figure")
    if value is None:
        return Verdict.INCONCLUSIVE, f"{fig.title}: the newest run has no figure"
    if len(values) < rules.min_runs:
        return (
            Verdict.INCONCLUSIVE,
            f"{fig.title}: {len(values)} comparable runs since its last change point, {rules.min_runs} needed",
        )
    noise = noise_of(values, relative=fig.key not in COUNTED)
    threshold = rules.threshold(fig)
    limit = threshold.of(noise.sigma)
    # A fixed threshold inside the noise cannot tell a change from a night: only a night beyond
    # both is one. (Counts of what went wrong have no noise to speak of: any rise is one.)
    noisy = fig.key not in COUNTED and not threshold.in_sigmas and noise.band > limit
    worse = worse_by(fig, noise.median, value)
    if worse > (noise.band if noisy else limit):
        return Verdict.REGRESSION, (
            f"{fig.title} {how_worse(fig, noise.median, value, limit)}: {newest.test_id} against the median of "
            f"{noise.runs} comparable runs (noise ±{_noise(fig, noise)})"
        )
    if noisy:
        return Verdict.INCONCLUSIVE, f"{fig.title}: noise ±{_noise(fig, noise)} on this testbed, threshold {threshold}"
    return noise


# The percentiles of a run's latency curve the figures do not gate already (p50, p99, p99.9),
# short of its ends: the least and the most are one message each.
_CURVE_PERCENTILES = (10.0, 25.0, 75.0, 90.0, 95.0, 99.5, 99.95, 99.99)
# Eight percentiles judged at once must not cry wolf eight times as often as one figure: the
# curve's band is how far a night of normal noise reaches past the median of n runs once in
# 1,200 nights, in units of the noise as measured (1.4826 x MAD), so that the eight together
# stay under 1 false alarm in 100 nights. The 1 - 0.01/12 quantile of (new - median) / (1.4826 x
# MAD) over n normal runs, 4 M draws each (2026-11-28; tests/unit/reports/test_verdict.py draws
# it again). A MAD of few runs can be near 0 by chance, hence 36.6 at 5 runs and 5.1 at 19,
# where a plain 3 sigma is crossed 7.6 % and 1.2 % of the time.
_CURVE_BAND_SIGMAS = {
    5: 36.6, 6: 15.61, 7: 14.83, 8: 10.05, 9: 9.81, 10: 7.77, 11: 7.67, 12: 6.62, 13: 6.58, 14: 5.89,
    15: 5.88, 16: 5.44, 17: 5.39, 18: 5.09, 19: 5.09, 20: 4.85, 25: 4.52, 30: 4.18, 40: 3.88, 50: 3.73,
    60: 3.62, 80: 3.48, 100: 3.41,
}  # fmt: skip


def curve_band_sigmas(runs: int) -> float:
    """The curve's band in noise units for `runs` comparable runs (interpolated between the
    table's; the 100 runs' beyond them, a little wide)."""
    if runs < min(_CURVE_BAND_SIGMAS):
        return float("inf")
    return float(np.interp(runs, list(_CURVE_BAND_SIGMAS), list(_CURVE_BAND_SIGMAS.values())))


def _distribution_finding(history: History, before: list[Run], rules: GateRules) -> str | None:
    """Why the newest run's latency curve is worse than the comparable runs', or None. Each
    percentile is held to the median of the runs since the latency's last change point, beyond
    both the latency threshold and 3 robust standard deviations of that percentile over those
    runs: never a doubt, as a tail noisier than its threshold says nothing either way."""
    newest = history.runs[-1]
    curve = dict(newest.distribution)
    since = [r for r in _since_last_change(history, _P999, before) if r.distribution]
    if not curve or len(since) < rules.min_runs:
        return None
    beyond: list[tuple[float, str, str]] = []  # (how far past its band, percentile, why)
    for p in _CURVE_PERCENTILES:
        values = [v for r in since if (v := dict(r.distribution).get(p)) is not None]
        value = curve.get(p)
        if value is None or len(values) < rules.min_runs:
            continue
        noise = noise_of(values)
        reach = curve_band_sigmas(noise.runs) * noise.sigma
        band = max(rules.latency_rise.of(noise.sigma), reach)
        worse = worse_by(_P999, noise.median, value)
        if worse > band:
            why = (
                f"Latency p{p:g} rose {100 * worse:.1f} % ({value / 1000:.3f} ms against {noise.median / 1000:.3f} ms;"
                f" threshold {rules.latency_rise}, noise band ±{100 * reach:.1f} % of {noise.runs} runs):"
                f" {newest.test_id}'s latency curve against their median"
            )
            beyond.append((worse / band, f"p{p:g}", why))
    if not beyond:
        return None
    worst = max(beyond, key=lambda b: b[0])  # the first of equals: the lower percentile
    others = [name for _, name, _ in beyond if name != worst[1]]
    return worst[2] + (f" ({', '.join(others)} too)" if others else "")


def _noise(fig: Figure, noise: Noise) -> str:
    how = f"(3 sigma of {noise.runs} runs)"
    return f"{noise.band:.4%} points {how}" if fig.key in COUNTED else f"{100 * noise.band:.1f} % {how}"


def _since_last_change(history: History, fig: Figure, before: list[Run]) -> list[Run]:
    """The comparable runs before the newest that follow the figure's last change point (its
    first run is the first of the new level)."""
    shifts = [s for s in history.shifts.get(fig.key, []) if s.test_id != history.runs[-1].test_id]
    if not shifts:
        return before
    first = history.runs[shifts[-1].run - 1]
    return [r for r in before if (r.started, r.test_id) >= (first.started, first.test_id)]
