"""The nightly gate's verdict on the newest run of a test: PASS, REGRESSION or INCONCLUSIVE.

A gate that passes what it cannot judge is worse than none, so INCONCLUSIVE is an answer of its
own: too few comparable runs (the same name, workload and testbed as the newest), a newest run
that did not measure the SUT, or a figure whose noise on this testbed is wider than its
threshold. Each says why in one line.

The newest run is judged three ways, and any finds a regression:
- a lasting change: the last change point among the comparable runs (reports.history) made a
  figure worse beyond its threshold, on the night it is first found (a night later it is the
  level the nights after are judged against, and a change point the history holds from long
  ago would hold every night after it red: over 20 nights without a change, one of the four
  noisy figures' p <= 0.01 splits is found by chance often enough to be 1 % of nights alone);
- one night: the newest run is worse than the median of the comparable runs since their last
  change point by more than the threshold;
- its whole latency curve: at a percentile the figures do not gate (p90, p99.99…), the newest
  run is worse than the comparable runs' median beyond both the latency threshold and that
  percentile's own noise band (a tail that moved where p99 did not).

Noise is each figure's own, on this testbed, from those same runs: a robust standard deviation
(1.4826 x the median absolute deviation, so that one outlier night does not widen it), relative
to the median. The gate may cry wolf at most once in 100 nights without a change (#39), and it
makes twelve single-night checks (four figures, eight percentiles of the curve; a thirteenth, the
recovery after faults, in a test with faults), so a night is judged against the band a night of
normal noise crosses once in 1,200 (`band_sigmas`). That band
is calibrated for the number of runs the noise is measured over: a MAD of few runs is near 0 by
chance often enough that ±3 of it is crossed by 7.6 % of normal nights over 5 runs and 1.2 %
over 19. A fixed threshold narrower than the band would flag normal nights, so the figure is
INCONCLUSIVE instead. A threshold may also be stated in units of that noise (`3sigma`): a night
as unlikely as 3 standard deviations of known normal noise, with the band again calibrated for
how well the runs know it.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from protocol.codes import ExitCode
from protocol.json_value import JsonObject
from reports.history import COUNTED, FIGURES, Figure, History, Run, analyse, gate, how_worse, n_runs, worse_by

_P999 = next(fig for fig in FIGURES if fig.key == "latency_p999_us")  # a latency: higher is worse

__all__ = [
    "NOISE_FLOOR",
    "Findings",
    "GateRules",
    "GateVerdict",
    "Noise",
    "Threshold",
    "Verdict",
    "band_sigmas",
    "judge",
    "noise_of",
    "noise_table",
    "not_measured",
]

# The gate's false alarms, at most 1 in 100 nights without a change (#39), shared by its twelve
# single-night checks: the receive rate, p50, p99 and p99.9, and eight percentiles of the curve.
NIGHT_TAIL = 0.01 / 12
# A change point that starts further back than this is no news: the nights since have told.
_NEWS_RUNS = 10
_MAD_TO_SIGMA = 1.4826  # the MAD of normal noise is 0.6745 sigma
_THRESHOLD = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(%|sigma)?\s*")
# The least noise a figure is taken to have, relative to its level: the rounding noise of a figure
# known to 3 significant digits, as HdrHistogram knows latency (a step of 0.1 %, whose rounding
# is uniform: sigma = step / sqrt(12), 0.029 %). A fixed-rate run's receive rate is its schedule's,
# the same to the message night after night: taken at its measured 0, "3sigma" flagged a night
# one message short, and a band of 0 judged any change.
NOISE_FLOOR = 0.001 / math.sqrt(12)
# The most noise units a threshold may be: the t and band draws (2 M and 100,000 of them) give a
# tail beyond 5 sigma no better than the largest draw, so 10sigma and 100sigma judged alike.
_MAX_SIGMAS = 5.0


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
    def parse(cls, text: str, fraction_under_1: bool = False) -> Threshold:
        match = _THRESHOLD.fullmatch(text)
        if not match:
            raise ValueError(f"{text!r} is no threshold: a fraction (0.05), a percentage (5%) or noise units (3sigma)")
        number, unit = float(match[1]), match[2]
        if unit == "sigma" and not 0 < number <= _MAX_SIGMAS:
            raise ValueError(
                f"{text!r}: a threshold in noise units is above 0 (0sigma would judge any change) and at most "
                f"{_MAX_SIGMAS:g}sigma (a tail of 1 in 3.5 million: the draws that calibrate a band reach no further)"
            )
        if unit != "sigma" and fraction_under_1 and number / (100 if unit == "%" else 1) >= 1:
            raise ValueError(f"{text!r}: a drop is less than all of it (100 %)")
        return cls(number / 100 if unit == "%" else number, unit == "sigma")

    def of(self, sigma: float) -> float:
        """As a fraction of the level, for a figure whose relative noise is `sigma` (never taken
        as less than NOISE_FLOOR)."""
        return self.value * max(sigma, NOISE_FLOOR) if self.in_sigmas else self.value

    def limit(self, band: float) -> float:
        """How much worse a night may be, as a fraction of the level, where its noise makes
        `band` of this threshold (Noise.band_for): the band itself in noise units."""
        return band if self.in_sigmas else self.value

    @property
    def stated(self) -> str:
        """As a finding names it beside the change (reports.history.how_worse), where its limit
        is not its value: a threshold in noise units, whose limit is the band."""
        return str(self) if self.in_sigmas else ""

    @property
    def tail(self) -> float:
        """How rarely a night of normal noise is worse than the threshold: for one in noise
        units, the normal tail beyond it (3sigma: 0.13 %); for a fixed one, the gate's budget."""
        return 0.5 * math.erfc(self.value / math.sqrt(2)) if self.in_sigmas else NIGHT_TAIL

    def __str__(self) -> str:
        return f"{self.value:g}sigma" if self.in_sigmas else f"{100 * self.value:g} %"


@dataclass(frozen=True)
class GateRules:
    throughput_drop: Threshold = Threshold(0.05)
    latency_rise: Threshold = Threshold(0.10)
    loss_rise: float = 0.0  # ratio points
    duplicate_rise: float = 0.0  # ratio points
    min_runs: int = 5  # comparable runs before the newest, since their last change
    # A change point the gate counts: one no shuffle of 199 matched (the least p they give). Over
    # 1,000 A/A histories of 20 nights at this machine's noise, those at p <= 0.01 were news
    # beyond their thresholds on 1.4 % of nights; a real step of 10 % in 2 % noise, or a
    # 20 ms delay on real runs, reaches 0.005 (tests/unit/reports/test_history.py,
    # tests/integration/test_history.py).
    max_change_p: float = 0.005
    recovery_rise: Threshold = Threshold(1.0)  # the recovery after faults: twice as long

    def __post_init__(self) -> None:
        """Rules a verdict can stand on, or a ValueError saying which is not one."""
        if self.min_runs < 2:
            raise ValueError(f"min_runs {self.min_runs}: a figure's noise needs at least 2 runs before the newest")
        for name, rise in (("loss_rise", self.loss_rise), ("duplicate_rise", self.duplicate_rise)):
            if not 0 <= rise <= 1:  # NaN too
                raise ValueError(f"{name} {rise}: ratio points from 0 to 1")
        if not 0 < self.max_change_p <= 1:
            raise ValueError(f"max_change_p {self.max_change_p}: a probability above 0, at most 1")

    def threshold(self, fig: Figure) -> Threshold:
        if fig.key in COUNTED:
            return Threshold(self.loss_rise if fig.key == "loss_ratio" else self.duplicate_rise)
        if fig.key == "recovery_s":
            return self.recovery_rise
        return self.throughput_drop if fig.higher_is_better else self.latency_rise


@dataclass(frozen=True)
class Noise:
    """One figure's noise over runs without a change: their median, and the robust standard
    deviation relative to it (absolute, in ratio points, for a COUNTED figure: `relative` False)."""

    runs: int
    median: float
    sigma: float
    relative: bool = True
    centre: str = "median"  # what `median` is: an A-B-A comparison's is the baselines' mean

    @property
    def _sigma(self) -> float:
        """The sigma a band is drawn from: never under NOISE_FLOOR, where it is relative (a
        count of what went wrong may truly be 0 every night)."""
        return max(self.sigma, NOISE_FLOOR) if self.relative else self.sigma

    @property
    def band_sigmas(self) -> float:
        return band_sigmas(self.runs)

    @property
    def band(self) -> float:
        """How far a night of normal noise reaches past the median once in 1,200 nights
        (infinite over fewer than 2 runs: they tell nothing of it)."""
        return self.band_sigmas * self._sigma if self._sigma else 0.0

    def band_for(self, threshold: Threshold) -> float:
        """The band a night must cross to be worse than `threshold` rather than noise."""
        return band_sigmas(self.runs, threshold.tail) * self._sigma if self._sigma else 0.0


# Draws of past runs that `band_sigmas` averages over, a block at a time (100,000 x 100 runs
# would be 80 MB at once).
_BAND_DRAWS = 100_000
_BAND_BLOCK = 2_000_000
# Beyond this many runs the noise is known about as well as it can be: their band, a little wide.
_BAND_MAX_RUNS = 100
_normal_tail = np.frompyfunc(lambda z: 0.5 * math.erfc(z / math.sqrt(2)), 1, 1)


@functools.cache
def band_sigmas(runs: int, tail: float = NIGHT_TAIL) -> float:
    """How far past the median of `runs` runs a night of normal noise reaches with probability
    `tail`, in units of the noise as the gate measures it over them (1.4826 x MAD). With the noise
    known it would be the normal quantile (3.14 for 1 in 1,200); a MAD of few runs knows it
    loosely, so it is far more: 37.2 at 5 runs, 7.7 at 10, 5.1 at 19, 3.7 at 50. Worked out, not
    looked up: a new night beyond median + t x MAD-sigma of n normal runs has the chance of the
    mean, over draws of those runs (seeded: the same answer each time), of the normal tail at
    that point, solved for t (tests/unit/reports/test_verdict.py draws the nights themselves).
    Infinite for fewer than 2 runs, whose MAD is 0."""
    if runs < 2:
        return math.inf
    return _band_sigmas(min(runs, _BAND_MAX_RUNS), tail)


@functools.cache
def _band_sigmas(n: int, tail: float) -> float:
    rng = np.random.default_rng(n)
    medians, sigmas = [], []
    block = max(1, _BAND_BLOCK // n)
    for start in range(0, _BAND_DRAWS, block):
        past = rng.standard_normal((min(block, _BAND_DRAWS - start), n))
        median = np.median(past, axis=1)
        medians.append(median)
        sigmas.append(_MAD_TO_SIGMA * np.median(np.abs(past - median[:, None]), axis=1))
    median, sigma = np.concatenate(medians), np.concatenate(sigmas)
    lo, hi = math.log(1e-3), math.log(1e5)
    for _ in range(18):  # to 1e-4 of t
        t = math.exp((lo + hi) / 2)
        if float(_normal_tail(median + t * sigma).astype(float).mean()) > tail:
            lo = math.log(t)
        else:
            hi = math.log(t)
    return round(math.exp((lo + hi) / 2), 4)


def noise_of(values: list[float], relative: bool = True) -> Noise:
    """The median and the robust standard deviation (1.4826 x MAD) of `values`."""
    median = statistics.median(values)
    sigma = _MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)
    if relative:
        sigma = sigma / abs(median) if median else 0.0
    return Noise(len(values), median, sigma, relative)


@dataclass
class Findings:
    """What the figures' checks found: regressions, doubts (what could not be judged), and the
    noise of each figure that was judged."""

    regressions: list[str] = field(default_factory=list)
    doubts: list[str] = field(default_factory=list)
    noise: dict[str, Noise] = field(default_factory=dict)

    def add(self, key: str, found: Noise | tuple[Verdict, str] | None) -> None:
        """One figure's check: its noise where it is within its threshold, else its verdict and why."""
        if isinstance(found, Noise):
            self.noise[key] = found
        elif found is not None:
            (self.regressions if found[0] is Verdict.REGRESSION else self.doubts).append(found[1])


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

    @classmethod
    def of(cls, found: Findings, passed: str) -> GateVerdict:
        """A REGRESSION where anything was found worse, else INCONCLUSIVE where anything could
        not be judged, else PASS (`passed`: why); the first finding is the line."""
        regressions, doubts, noise = found.regressions, found.doubts, found.noise
        if regressions:
            more = f" (and {len(regressions) - 1} more)" if len(regressions) > 1 else ""
            return cls(Verdict.REGRESSION, regressions[0] + more, regressions + doubts, noise, doubts)
        if doubts:
            more = f" (and {len(doubts) - 1} more)" if len(doubts) > 1 else ""
            return cls(Verdict.INCONCLUSIVE, doubts[0] + more, doubts, noise, doubts)
        return cls(Verdict.PASS, passed, [], noise)

    @property
    def line(self) -> str:
        return f"{self.verdict.value}: {self.why}"

    def as_dict(self) -> JsonObject:
        return {
            "verdict": self.verdict.value,
            "why": self.why,
            "findings": self.findings,
            "noise": {k: {"runs": n.runs, n.centre: n.median, "sigma": n.sigma} for k, n in self.noise.items()},
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
            f"{n_runs(len(before), 'comparable')}, {rules.min_runs} needed (same name, "
            "workload and testbed as "
            f"{newest.test_id})",
        )
    found = Findings()
    for fig in FIGURES:
        found.add(fig.key, _judge_figure(history, fig, before, rules))
    if (shape := _distribution_finding(history, before, rules)) is not None:
        found.regressions.append(shape)
    # A change that lasts is a regression whatever the noise of the night against its median.
    news = _first_found_tonight(history, rules.max_change_p)
    limits = {
        fig.key: limit
        for fig in FIGURES
        if fig.key in news and (limit := _change_limit(fig, before, found.noise, rules)) is not None
    }
    found.regressions += [f"{why} (a change point)" for why in gate(history, limits)]
    return GateVerdict.of(
        found, f"{newest.test_id} is within every threshold of {len(before)} comparable runs"
    )  # 5 at least


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


def _first_found_tonight(history: History, max_p: float) -> set[str]:
    """The figures whose last change point, at p <= `max_p`, no night before this one counted
    (at that run, or one or two either side: a night more can move a split that much). A
    permutation p drifts from night to night (0.005 one night, 0.01 the next, 0.005 again), so
    every earlier night since the change is asked, not only the last; a change point that starts
    more than `_NEWS_RUNS` runs back is no news."""
    comparable = [r for r in history.runs if history.left_out(r) is None]
    at = {r.test_id: i for i, r in enumerate(comparable)}
    found = {
        key: at[shifts[-1].test_id]
        for key, shifts in history.shifts.items()
        if shifts and shifts[-1].p_value <= max_p and at.get(shifts[-1].test_id, -1) >= len(comparable) - _NEWS_RUNS
    }
    for end in range(max(2, min(found.values(), default=len(comparable))), len(comparable)):
        earlier = analyse(history.name, comparable[:end], history.max_p).shifts
        for key, where in list(found.items()):
            if any(s.p_value <= max_p and abs(at[s.test_id] - where) <= 2 for s in earlier.get(key, [])):
                del found[key]
    return set(found)


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
    if value is None and fig.is_latency and newest.latency_untrusted:
        return Verdict.INCONCLUSIVE, f"{fig.title}: no figure in {newest.test_id} ({newest.latency_untrusted})"
    if not values:
        return None if value is None else (Verdict.INCONCLUSIVE, f"{fig.title}: no comparable run has this figure")
    if value is None:
        return Verdict.INCONCLUSIVE, f"{fig.title}: the newest run has no figure"
    if len(values) < rules.min_runs:
        return (
            Verdict.INCONCLUSIVE,
            f"{fig.title}: {n_runs(len(values), 'comparable')} since its last change point, {rules.min_runs} needed",
        )
    noise = noise_of(values, relative=fig.key not in COUNTED)
    if not noise.median and (fig.is_latency or fig.key == "receive_rate"):  # a change relative to 0 is none
        return (
            Verdict.INCONCLUSIVE,
            f"{fig.title}: 0 over {noise.runs} comparable runs: no level to judge a change against",
        )
    threshold = rules.threshold(fig)
    worse = worse_by(fig, noise.median, value)
    if fig.key in COUNTED:  # counts of what went wrong have no noise to speak of: any rise is one
        if worse > threshold.value:
            return Verdict.REGRESSION, (
                f"{fig.title} {how_worse(fig, noise.median, value, threshold.value)}: {newest.test_id} against "
                f"the median of {noise.runs} comparable runs"
            )
        return noise
    # In noise units the threshold is a band; a fixed one inside the band cannot tell a change
    # from a night: only a night beyond both is one, and one within it is no pass.
    band = noise.band_for(threshold)
    limit = threshold.limit(band)
    noisy = band > limit
    if worse > max(band, limit):
        moved = how_worse(fig, noise.median, value, limit, threshold.stated)
        return Verdict.REGRESSION, (
            f"{fig.title} {moved}: {newest.test_id} against the median of {noise.runs} comparable runs "
            f"(noise band ±{_band(noise, band)})"
        )
    if noisy:
        return Verdict.INCONCLUSIVE, (
            f"{fig.title}: noise band ±{_band(noise, band)} on this testbed, threshold {threshold}"
        )
    return noise


# The percentiles of a run's latency curve the figures do not gate already (p50, p99, p99.9),
# short of its ends: the least and the most are one message each.
_CURVE_PERCENTILES = (10.0, 25.0, 75.0, 90.0, 95.0, 99.5, 99.95, 99.99)


def _distribution_finding(history: History, before: list[Run], rules: GateRules) -> str | None:
    """Why the newest run's latency curve is worse than the comparable runs', or None. Each
    percentile is held to the median of the runs since the latency's last change point, beyond
    both the latency threshold and that percentile's own noise band over those runs (each of the
    eight is one of the gate's twelve checks): never a doubt, as a tail noisier than its
    threshold says nothing either way."""
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
        reach = noise.band
        threshold = rules.latency_rise
        band = max(threshold.limit(noise.band_for(threshold)), reach)
        worse = worse_by(_P999, noise.median, value)
        if worse > band:
            why = (
                f"Latency p{p:g} rose {100 * worse:.1f} % ({value / 1000:.3f} ms against {noise.median / 1000:.3f} ms;"
                f" threshold {rules.latency_rise}, noise band ±{100 * reach:.1f} % of {n_runs(noise.runs)}):"
                f" {newest.test_id}'s latency curve against their median"
            )
            beyond.append((worse / band, f"p{p:g}", why))
    if not beyond:
        return None
    worst = max(beyond, key=lambda b: b[0])  # the first of equals: the lower percentile
    others = [name for _, name, _ in beyond if name != worst[1]]
    return worst[2] + (f" ({', '.join(others)} too)" if others else "")


def noise_table(history: History, rules: GateRules) -> str:
    """Each figure's noise on the newest run's testbed, as the gate measures it (the comparable
    runs since the figure's last change point, the newest among them), its band, and whether the
    thresholds of `rules` can be judged against it: what `--calibrate` runs are for."""
    comparable = [r for r in history.runs if history.left_out(r) is None]
    lines = [
        f"noise of {history.name!r} on {history.newest.test_id if history.newest else 'no run'}'s testbed "
        f"({len(comparable)} comparable runs; each figure's since its last change point):",
        f"  {'figure':<32} {'runs':>5} {'sigma':>9} {'band (1 in 1,200)':>24} {'threshold':>10}  judged",
    ]
    for fig in FIGURES:
        values = [v for r in _since_last_change(history, fig, comparable) if (v := r.figures.get(fig.key)) is not None]
        if len(values) < 2:
            if values or any(r.figures.get(fig.key) is not None for r in comparable):
                lines.append(f"  {fig.title:<32} {len(values):>5}  too few runs to know")
            continue
        noise = noise_of(values, relative=fig.key not in COUNTED)
        threshold = rules.threshold(fig)
        if fig.key in COUNTED:
            judged = "any rise beyond it"
            lines.append(f"  {fig.title:<32} {noise.runs:>5} {'-':>9} {'-':>24} {threshold.value:>10.4%}  {judged}")
            continue
        band = noise.band_for(threshold)
        if threshold.in_sigmas:
            judged = f"yes: ±{100 * band:.1f} %"
        elif len(values) < rules.min_runs:
            judged = f"no: {n_runs(rules.min_runs)} needed"
        else:
            judged = "yes" if band <= threshold.value else "no: INCONCLUSIVE, the band is wider"
        shown = f"±{100 * noise.band:.1f} % ({noise.band_sigmas:.1f} sigma)"
        lines.append(
            f"  {fig.title:<32} {noise.runs:>5} {100 * noise.sigma:>7.2f} % {shown:>24} {threshold!s:>10}  {judged}"
        )
    return "\n".join(lines)


def _band(noise: Noise, band: float) -> str:
    sigmas = band / max(noise.sigma, NOISE_FLOOR)
    return f"{100 * band:.1f} % ({sigmas:.1f} sigma of {n_runs(noise.runs)})"


def _since_last_change(history: History, fig: Figure, before: list[Run]) -> list[Run]:
    """The comparable runs before the newest that follow the figure's last change point (its
    first run is the first of the new level)."""
    shifts = [s for s in history.shifts.get(fig.key, []) if s.test_id != history.runs[-1].test_id]
    if not shifts:
        return before
    first = history.runs[shifts[-1].run - 1]
    return [r for r in before if (r.started, r.test_id) >= (first.started, first.test_id)]
