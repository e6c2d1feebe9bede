"""Latency across hosts, corrected by the clock offsets the coordinator measured.

A receiver's latency is its arrival time (its clock) minus the sender's intended time (the
sender's clock), so it carries the difference of the two clocks: measured = true + (o_r - o_s),
with o the peer's offset from the coordinator's clock. Where a receiver's senders run on other
clocks, its latencies are shifted by o_s - o_r, and the shift's uncertainty is reported beside
it: the error bar the figures carry. Two peers share a clock when they run on one host and
their measured offsets agree; a host name alone does not make one clock (cloned lab machines
and containers share names).

Each peer's offset is measured before the load, every few seconds during it and after it
(protocol.clock_probe; test.json keeps every sample as [when µs, offset µs, ± µs], whichever
path measured it). A peer's samples are fitted with a line, weighted by their ± (the clocks
drift apart by some ppm), and split where the offset moved more than any slewing clock can
between two samples, each bound by its own ±: that is a step (NTP setting the clock), and it is
named with its time. The uncertainty bounds the truth at every sample measured tightly (its
own ± plus how far the fit passes from it; a sample four times as wide as the segment's median
is left out of the bound, not of the fit or the search for steps: a stalled burst's ± is no
bound on the others); across a step it also holds the step, since when within the gap between
two samples the clock moved is not known.

The one rule, used by the reports (over test.json) and by the coordinator (over the clocks
measured before the load, which the receivers apply as they record).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from protocol.figures import TestFigures
from protocol.test_record import PeerEntry

__all__ = ["ClockFit", "ClockStep", "Correction", "clock_corrections", "fit_clock", "untrusted_latency"]

# How fast two clocks may move apart without a step: Linux slews at most 500 ppm, and both the
# peer's and the coordinator's clock may be slewing, in opposite directions.
_MAX_SLEW = 1000e-6
# A move this small is never called a step, whatever the samples' own ± (they are bounds, but
# a microsecond of reading each side is not worth a step).
_MIN_STEP_US = 100.0
# A sample this much wider than its segment's median ± bounds nothing the others do not.
_LOOSE = 4.0


@dataclass(frozen=True)
class ClockStep:
    """A peer's clock moved by `size_us` (± `uncertainty_us`) at some time between two samples
    (µs since the epoch, on the coordinator's clock)."""

    after_us: float
    before_us: float
    size_us: float
    uncertainty_us: float = 0.0

    def describe(self, who: str) -> str:
        at = datetime.fromtimestamp(self.before_us / 1e6, UTC).strftime("%H:%M:%S.%f")[:-3]
        gap = (self.before_us - self.after_us) / 1e6
        return (
            f"the clock of {who} stepped {self.size_us / 1000:+.1f} ms (± {self.uncertainty_us / 1000:.1f}) "
            f"within the {gap:.1f} s before {at} UTC"
        )


@dataclass(frozen=True)
class ClockFit:
    """A peer's clock minus the coordinator's over a test: piecewise linear through `knots_us`
    (times) and `offsets_us`, constant beyond them."""

    knots_us: tuple[float, ...]
    offsets_us: tuple[float, ...]
    uncertainty_us: float
    steps: tuple[ClockStep, ...] = ()
    path: str = ""  # how it was measured: "udp" (direct), "mqtt" (through the control broker)

    def at(self, t_us: float | np.ndarray) -> Any:
        return np.interp(t_us, self.knots_us, self.offsets_us)

    def agrees_with(self, other: ClockFit) -> bool:
        """The two clocks read alike wherever either was measured, to within both ±."""
        knots = np.array(sorted({*self.knots_us, *other.knots_us}))
        apart = np.abs(self.at(knots) - other.at(knots))
        return bool(np.all(apart <= self.uncertainty_us + other.uncertainty_us))


Sample = tuple[float, float, float]  # when (µs), offset (µs), ± (µs)


def fit_clock(samples: Sequence[Sequence[float]], path: str = "") -> ClockFit | None:
    """The fit of [when µs, offset µs, ± µs] samples; None without any."""
    ordered: list[Sample] = sorted((float(t), float(o), float(u)) for t, o, u, *_ in samples)
    if not ordered:
        return None
    segments: list[list[Sample]] = [[ordered[0]]]
    steps = []
    for sample in ordered[1:]:
        # Against the tightest of the segment's last samples: a loose one must not hide a step.
        reference = min(reversed(segments[-1][-3:]), key=lambda s: s[2])  # the latest of the tightest
        allowed = sample[2] + reference[2] + _MAX_SLEW * (sample[0] - reference[0])
        moved = sample[1] - reference[1]
        if abs(moved) > max(allowed, _MIN_STEP_US):
            steps.append(ClockStep(reference[0], sample[0], moved, sample[2] + reference[2]))
            segments.append([sample])
        else:
            segments[-1].append(sample)
    knots: list[float] = []
    offsets: list[float] = []
    uncertainty = 0.0
    fitted = [_line(segment) for segment in segments]
    for segment, (line, bound) in zip(segments, fitted, strict=True):
        uncertainty = max(uncertainty, bound)
        for t in dict.fromkeys((segment[0][0], segment[-1][0])):
            knots.append(t)
            offsets.append(line(t))
    # A step's size from the lines either side of it, in the middle of the gap: each side's fit
    # of all its samples, not the one sample nearest the step, which may be a loose one.
    steps = [
        ClockStep(s.after_us, s.before_us, after(mid) - before(mid), before_bound + after_bound)
        for s, (before, before_bound), (after, after_bound) in zip(steps, fitted[:-1], fitted[1:], strict=True)
        for mid in [(s.after_us + s.before_us) / 2]
    ]
    # Between the samples either side of a step, the offset is anywhere between the two sides.
    uncertainty += max((abs(s.size_us) for s in steps), default=0.0)
    return ClockFit(tuple(knots), tuple(offsets), uncertainty, tuple(steps), path)


def _line(segment: list[Sample]) -> tuple[Any, float]:
    """The weighted least-squares line through a segment's samples (weights 1/±²), and how far
    from the truth it can be anywhere in the segment (`_bound`)."""
    t = np.array([s[0] for s in segment])
    o = np.array([s[1] for s in segment])
    u = np.array([s[2] for s in segment])
    weights = 1 / np.maximum(u, 1.0) ** 2
    t0 = t[0]
    if len(segment) > 1 and t[-1] > t0:
        slope, intercept = np.polyfit(t - t0, o, 1, w=np.sqrt(weights))
    else:
        slope, intercept = 0.0, float(np.sum(weights * o) / np.sum(weights))

    def line(x: float) -> float:
        return float(intercept + slope * (x - t0))

    return line, _bound(t - t0, o - (intercept + slope * (t - t0)), u)


def _bound(d: np.ndarray, residual: np.ndarray, u: np.ndarray) -> float:
    """How far the fitted line can be from a true offset that is a line itself. The fit's error
    e(d) = fit - truth is then a line a + b d, and at each sample's time d_i the truth is within
    the sample's ± u_i of what it measured, so e(d_i) lies in [-r_i - u_i, -r_i + u_i] (r_i: the
    sample's distance from the fit). Those strips make a polygon of (a, b), whose corners give the
    largest |e| at the segment's ends, and so anywhere in it: a loose sample only adds a wide
    strip, a tight one pins the line. Up to 48 samples, spread over the segment, make the
    polygon: fewer constraints can only widen it. Where they admit no line (a clock that
    curved), or tell nothing of the slope (one time), each tight sample's own ± and distance
    from the fit bound it instead."""
    tight = u <= _LOOSE * np.median(u)
    fallback = float(np.max((u + np.abs(residual))[tight]))
    ends = np.array([0.0, float(np.max(d))])  # the segment's first and last sample
    if ends[1] <= 0:
        return fallback
    chosen = np.linspace(0, len(d) - 1, min(len(d), 48)).round().astype(int)
    d, r, u = d[chosen], residual[chosen], u[chosen]
    # Each strip's two edges as lines a + b d_i = c; a corner is where two of them cross.
    lines_d = np.concatenate([d, d])
    lines_c = np.concatenate([-r - u, -r + u])
    j, k = np.triu_indices(len(lines_d), 1)
    usable = lines_d[j] != lines_d[k]
    j, k = j[usable], k[usable]
    b = (lines_c[j] - lines_c[k]) / (lines_d[j] - lines_d[k])
    a = lines_c[j] - b * lines_d[j]
    e = a[:, None] + b[:, None] * d[None, :]
    slack = 1e-9 * (1 + np.abs(lines_c).max())
    feasible = np.all((e >= -r - u - slack) & (e <= -r + u + slack), axis=1)
    if not feasible.any():
        return fallback
    return float(np.abs(a[feasible, None] + b[feasible, None] * ends[None, :]).max())


def peer_fit(peer: PeerEntry) -> ClockFit | None:
    """A peer's clock as test.json records it: its samples, or (a record from before samples
    were kept) the exchanges before and after the run, taken as one offset whose uncertainty
    covers how far it moved."""
    clock = peer.clock
    if clock.samples:
        return fit_clock([(s.at_us, s.offset_us, s.uncertainty_us) for s in clock.samples], clock.path or "")
    old = [e for e in (clock.estimate("before"), clock.estimate("after")) if e is not None]
    if not old:
        return None
    offsets = [e.offset_us for e in old]
    drift = (max(offsets) - min(offsets)) / 2
    mean = sum(offsets) / len(offsets)
    return ClockFit((0.0,), (mean,), max(e.uncertainty_us for e in old) + drift, (), "mqtt")


@dataclass(frozen=True)
class Correction:
    """What to add to a receiver's measured latencies at each time (µs since the epoch, on the
    coordinator's clock): piecewise linear through `knots_us` and `shifts_us`."""

    knots_us: tuple[float, ...]
    shifts_us: tuple[float, ...]
    uncertainty_us: float  # ± on every corrected latency of this receiver
    reason: str = ""
    problems: tuple[str, ...] = ()  # what makes its latency no figure: clock steps, senders' clocks apart
    path: str = ""  # udp, mqtt, or udp+mqtt: how the clocks behind it were measured

    def at(self, t_us: float | np.ndarray) -> Any:
        return np.interp(t_us, self.knots_us, self.shifts_us)

    @property
    def shift_us(self) -> float:
        """The shift over the test, as one figure (its mean over the knots)."""
        return float(np.mean(self.shifts_us))

    @classmethod
    def constant(cls, shift_us: float, uncertainty_us: float = 0.0) -> Correction:
        return cls((0.0,), (float(shift_us),), uncertainty_us)


def clock_corrections(peers: Sequence[PeerEntry]) -> dict[str, Correction]:
    """Receiver name -> its correction, for receivers that do not share one clock with all
    their senders. A receiver whose senders run on clocks that disagree with each other (one
    beside it, one elsewhere) gets one correction for them all, their mean, and the spread is in
    its uncertainty and its problems: one shift per receiver cannot untangle them."""
    senders = [(p, peer_fit(p)) for p in peers if p.role == "sender"]
    corrections = {}
    for receiver in (p for p in peers if p.role == "receiver"):
        mine = peer_fit(receiver)
        if not senders or all(_one_clock(receiver, mine, s, fit) for s, fit in senders):
            continue  # one clock: the latencies as measured
        known = [fit for _, fit in senders if fit is not None]
        if mine is None or len(known) < len(senders):
            unknown = [p for p, fit in ((receiver, mine), *senders) if fit is None]
            names = ", ".join(f"{p.name} on {p.host}" for p in unknown)
            problem = f"the clock of {names} was never measured, and latency across hosts cannot be corrected"
            corrections[receiver.name] = Correction((0.0,), (0.0,), 0.0, problems=(problem,))
            continue
        knots = np.array(sorted({*mine.knots_us, *(k for t in known for k in t.knots_us)}))
        sender_offsets = np.array([t.at(knots) for t in known])
        spread = float(np.max(sender_offsets.max(axis=0) - sender_offsets.min(axis=0)))
        shifts = sender_offsets.mean(axis=0) - mine.at(knots)
        uncertainty = mine.uncertainty_us + max(t.uncertainty_us for t in known) + spread / 2
        problems = [
            step.describe(f"{p.name} on {p.host}")
            for p, fit in ((receiver, mine), *senders)
            if fit is not None
            for step in fit.steps
        ]
        if spread > 2 * max(t.uncertainty_us for t in known):
            clocks = ", ".join(f"{p.name} on {p.host}" for p, _ in senders)
            problems.append(
                f"{receiver.name} takes messages from senders whose clocks are {spread / 1000:.3f} ms apart "
                f"({clocks}): one correction per receiver cannot untangle them"
            )
        hosts = ", ".join(sorted({p.host for p, _ in senders}))
        paths = sorted({f.path for f in (mine, *known) if f.path})
        corrections[receiver.name] = Correction(
            tuple(float(k) for k in knots),
            tuple(float(s) for s in shifts),
            uncertainty,
            f"receiver on {receiver.host}, senders on {hosts}",
            tuple(problems),
            "+".join(paths),
        )
    return corrections


def _one_clock(a: PeerEntry, a_fit: ClockFit | None, b: PeerEntry, b_fit: ClockFit | None) -> bool:
    """One host, and (where both were measured) offsets that agree to within their ±."""
    if a.host != b.host:
        return False
    return a_fit is None or b_fit is None or a_fit.agrees_with(b_fit)


def untrusted_latency(figures: TestFigures, max_uncertainty_ratio: float) -> str | None:
    """Why a test's latency figures cannot be trusted, or None: a clock stepped during the test
    or a receiver's senders run on clocks apart, a sample had to be clamped (a clock correction
    wrong by more than the latency reads below zero), or the clocks are known less well than
    `max_uncertainty_ratio` of the p50 (0: no such bound). `figures`: the summary's
    (reports.summary)."""
    if not figures.latency_samples:
        return None
    uncertainty = figures.latency_uncertainty_us
    bar = f" (clock correction ± {uncertainty / 1000:.3f} ms)" if uncertainty else ""
    # A clock's problem first: it is the cause of the clamps it brings.
    if problems := figures.clock_problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"latency across hosts not measured: {problems[0]}{more}"
    if clamped := figures.latency_clamped_by_correction:
        return f"latency not measured: {clamped:,} samples read below zero or above an hour and were clamped{bar}"
    p50 = figures.latency_us.p50
    if max_uncertainty_ratio and uncertainty > max_uncertainty_ratio * p50:
        through_broker = (
            "; the clocks were measured through the control broker, as the peers' clock ports did not answer "
            "(a firewall, or an address the coordinator cannot reach: see the daemons' --clock-address)"
            if "mqtt" in figures.clock_paths
            else ""
        )
        return (
            f"latency across hosts not measured: clock uncertainty ± {uncertainty / 1000:.3f} ms against a p50 of "
            f"{p50 / 1000:.3f} ms (bound {max_uncertainty_ratio:.0%} of the p50){through_broker}"
        )
    return None
