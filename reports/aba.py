"""A-B-A: one build's check, where a night's history cannot tell (#39).

The baseline runs `times` times, the candidate `times` times, the baseline `times` times again,
back to back on the same peers (coordinator.definitions.AbaTest); the candidate is judged against
both baselines. A single night against a history sees a 5 % step at this machine's noise (6.4 %
sigma a run) about 1 time in 10; repetitions on both sides of the candidate shrink the noise of
the comparison by the square root of their number, and the second baseline catches a testbed
that drifted while the candidate ran.

For each figure (receive rate, p50, p99, p99.9): the means of the three legs, and the noise as
the pooled standard deviation of each run about its own leg's mean, relative to the baselines'
mean. The candidate is a REGRESSION when it is worse than the baselines' mean by more than both
the threshold and the noise band of that comparison, and worse than each baseline leg (by more
than a threshold that is a fraction). The band is where a candidate without a change lands once in 400 checks
(four figures: 1 false alarm in 100), a Student t quantile over the runs' degrees of freedom
(`t_quantile`). INCONCLUSIVE when that band is wider than a fixed threshold (more runs a leg would
tell), when the baselines drifted apart beyond both `max_drift` and their own noise band, or when
a run did not measure the SUT. Loss and duplicates: any rise of the candidate's mean ratio over
the baselines' beyond `--max-loss-rise` (0) is a regression, as in the gate.
"""

from __future__ import annotations

import functools
import math
import statistics
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from protocol.test_record import TestRecord
from reports.data_server_client import get_json
from reports.history import COUNTED, FIGURES, Figure, how_worse, n_runs, worse_by
from reports.paths import check_test_id, resolve_inside
from reports.summary import read_test_record
from reports.verdict import NOISE_FLOOR, Findings, GateRules, GateVerdict, Noise, Threshold, Verdict

__all__ = ["FIGURE_TAIL", "AbaRun", "Legs", "fetch_legs", "judge_aba", "read_legs", "t_quantile"]

# Four figures judged at once, 1 false alarm in 100 checks: 1 in 400 each.
FIGURE_TAIL = 0.01 / 4
LEGS = ("first", "candidate", "second")
_T_DRAWS = 2_000_000


@dataclass(frozen=True)
class AbaRun:
    """One run of a leg: its test id, outcome, why it measured no SUT (None where it did), its
    figures by key (reports.history.FIGURES), and why its latency is no figure (None where it is
    one: a run can keep its outcome with `untrusted_latency="warn"`)."""

    test_id: str
    outcome: str
    figures: Mapping[str, float | None]
    not_measured: str | None = None
    latency_untrusted: str | None = None


@dataclass(frozen=True)
class Legs:
    first: tuple[AbaRun, ...]
    candidate: tuple[AbaRun, ...]
    second: tuple[AbaRun, ...]

    @property
    def baselines(self) -> tuple[AbaRun, ...]:
        return self.first + self.second


@functools.cache
def t_quantile(df: int, tail: float) -> float:
    """Student's t quantile with `df` degrees of freedom beyond which `tail` of it lies: drawn
    (seeded: the same answer each time), as numpy has no t distribution's inverse. 2 M draws put
    it within about 1 % at a tail of 1 in 400."""
    rng = np.random.default_rng(df)
    t = rng.standard_normal(_T_DRAWS) / np.sqrt(rng.chisquare(df, _T_DRAWS) / df)
    return round(float(np.quantile(t, 1 - tail)), 3)


def judge_aba(legs: Legs, rules: GateRules, max_drift: Threshold | None = None) -> GateVerdict:
    """The candidate against both baselines (module docstring). `max_drift`: how far apart the two
    baselines may be; the throughput and latency thresholds by default."""
    # The baselines first: a candidate that failed on a testbed where the baseline failed too
    # tells nothing of the candidate.
    for leg in ("first", "second", "candidate"):
        runs = getattr(legs, leg)
        if leg == "candidate" and (failed := [r for r in runs if r.outcome == "failure"]):
            return GateVerdict(
                Verdict.REGRESSION, f"the candidate's run {failed[0].test_id} {failed[0].not_measured or 'failed'}"
            )
        if len(runs) < 2:
            return GateVerdict(Verdict.INCONCLUSIVE, f"the {_leg(leg)} has {n_runs(len(runs))}, 2 needed")
        if unmeasured := [r for r in runs if r.not_measured]:
            return GateVerdict(
                Verdict.INCONCLUSIVE, f"{unmeasured[0].test_id} ({_leg(leg)}) {unmeasured[0].not_measured}"
            )
    found = Findings()
    for fig in FIGURES:
        found.add(fig.key, _judge_figure(fig, legs, rules, max_drift))
    runs = f"{len(legs.candidate)} candidate runs against {len(legs.first)} + {len(legs.second)} baseline runs"
    return GateVerdict.of(found, f"the candidate is within every threshold of both baselines: {runs}")


def _judge_figure(
    fig: Figure, legs: Legs, rules: GateRules, max_drift: Threshold | None
) -> Noise | tuple[Verdict, str] | None:
    values = {leg: [v for r in getattr(legs, leg) if (v := r.figures.get(fig.key)) is not None] for leg in LEGS}
    untrusted = [r for leg in LEGS for r in getattr(legs, leg) if r.latency_untrusted]
    if fig.is_latency and untrusted and any(len(v) < 2 for v in values.values()):
        run = untrusted[0]
        return Verdict.INCONCLUSIVE, f"{fig.title}: no figure in {run.test_id} ({run.latency_untrusted})"
    if not any(values.values()):
        return None
    if (short := next((leg for leg in LEGS if len(values[leg]) < 2), None)) is not None:
        return (
            Verdict.INCONCLUSIVE,
            f"{fig.title}: the {_leg(short)} has {n_runs(len(values[short]))} with it, 2 needed",
        )
    means = {leg: statistics.fmean(v) for leg, v in values.items()}
    base = statistics.fmean(values["first"] + values["second"])
    threshold = rules.threshold(fig)
    worse = worse_by(fig, base, means["candidate"])
    if fig.key in COUNTED:  # counts of what went wrong: any rise beyond the threshold is one
        if worse > threshold.value:
            return Verdict.REGRESSION, f"{fig.title} {how_worse(fig, base, means['candidate'], threshold.value)}"
        return Noise(len(values["candidate"]), base, 0.0, relative=False, centre="mean")
    residuals = [v - means[leg] for leg in LEGS for v in values[leg]]
    df = len(residuals) - len(LEGS)
    if not base:
        return Verdict.INCONCLUSIVE, f"{fig.title}: 0 in the baselines: no level to judge a change against"
    if df < 1:
        return Verdict.INCONCLUSIVE, f"{fig.title}: too few runs to know its noise"
    sigma = max(math.sqrt(sum(r * r for r in residuals) / df) / abs(base), NOISE_FLOOR)
    n_base, n_cand = len(values["first"]) + len(values["second"]), len(values["candidate"])
    spread = sigma * math.sqrt(1 / n_cand + 1 / n_base)  # of the candidate's mean against the baselines'
    tail = threshold.tail if threshold.in_sigmas else FIGURE_TAIL
    band = t_quantile(df, tail) * spread
    noise = Noise(n_cand + n_base, base, sigma, centre="mean")
    # The baselines on either side: further apart than their own noise allows and than the cap,
    # the testbed moved while the candidate ran, and no comparison with it holds.
    cap = max_drift or threshold
    drift = abs(means["second"] - means["first"]) / abs(base)
    apart = math.sqrt(1 / len(values["first"]) + 1 / len(values["second"]))
    drift_band = t_quantile(df, FIGURE_TAIL / 2) * sigma * apart
    cap_value = cap.of(sigma) if cap.in_sigmas else cap.value
    if drift > max(cap_value, drift_band):
        return Verdict.INCONCLUSIVE, (
            f"{fig.title}: the baselines drifted {100 * drift:.1f} % apart (cap {cap}, their noise band "
            f"±{100 * drift_band:.1f} %)"
        )
    limit = threshold.limit(band)
    # Worse than each baseline too: by the threshold where it is a fraction; in noise units, at
    # all (each leg alone is noisier than both: the band is the pooled comparison's).
    against_each = min(worse_by(fig, means[leg], means["candidate"]) for leg in ("first", "second"))
    if worse > max(band, limit) and against_each > (0.0 if threshold.in_sigmas else limit):
        moved = how_worse(fig, base, means["candidate"], limit, threshold.stated)
        return Verdict.REGRESSION, (
            f"{fig.title} {moved}: the candidate's mean against both "
            f"baselines' ({_shown(fig, means)}; noise band ±{100 * band:.1f} % over {n_runs(noise.runs)})"
        )
    if band > limit:
        return Verdict.INCONCLUSIVE, (
            f"{fig.title}: noise band ±{100 * band:.1f} % over {n_runs(noise.runs)}, threshold {threshold}: "
            f"more runs a leg would tell"
        )
    return noise


def _shown(fig: Figure, means: Mapping[str, float]) -> str:
    return ", ".join(f"{_leg(leg)} {fig.shown(means[leg]):,.3f}" for leg in LEGS) + f" {fig.unit}"


def _leg(leg: str) -> str:
    return {"first": "first baseline", "candidate": "candidate", "second": "second baseline"}[leg]


def read_legs(root: Path, test_id: str) -> Legs:
    """The legs of the A-B-A test `test_id` in results folder `root`, from its phases' test.json
    (`<test_id>.a1-01`, `.b-01`, `.a2-01`…); a ValueError naming what is missing, or an id that
    is no plain folder name inside `root` (a test.json's phase ids included)."""
    test_dir = resolve_inside(root, test_id)
    record = read_test_record(test_dir)
    if record is None:
        if (test_dir / "test.json").exists():
            raise ValueError(f"{test_id}/test.json is no test's record: damaged, or still being written")
        raise ValueError(f"no test {test_id!r} in {root}")
    return _legs_of(test_id, record, lambda phase: read_test_record(resolve_inside(root, phase)))


def fetch_legs(server: str, test_id: str) -> Legs:
    """The same from a data server's /api/results (`server`: its URL): where a nightly job's
    coordinator does not hold the results folder."""

    def fetch(wanted: str) -> TestRecord | None:
        answer = get_json(f"{server.rstrip('/')}/api/results/{urllib.parse.quote(check_test_id(wanted), safe='')}")
        test = answer.get("test") if isinstance(answer, dict) else None
        try:  # the server answers {} for a test.json it cannot read
            return TestRecord.from_json(test) if isinstance(test, dict) and test else None
        except ValueError:
            return None

    record = fetch(test_id)
    if record is None:
        raise ValueError(f"no test {test_id!r} on {server} (or its test.json is damaged)")
    return _legs_of(test_id, record, fetch)


def _legs_of(test_id: str, record: TestRecord, read: Callable[[str], TestRecord | None]) -> Legs:
    """The legs of the A-B-A test `record`, each phase's record as `read` gives it by its id."""
    if record.kind != "aba":
        what = f"a {record.kind} test" if record.kind else "a test whose test.json names no kind"
        raise ValueError(f"{test_id} is {what}, not an A-B-A one")
    legs: dict[str, list[AbaRun]] = {leg: [] for leg in LEGS}
    steps = list(record.steps or ())
    if foreign := next((row.test_id for row in steps if not row.test_id.startswith(f"{test_id}.")), None):
        raise ValueError(f"{test_id}'s test.json names {foreign} as a phase: no phase of {test_id}")
    # Each phase once: a row written twice would count its run twice and narrow the band.
    for row in {row.test_id: row for row in steps}.values():
        phase = read(row.test_id)
        label = row.test_id.rsplit(".", 1)[-1]
        leg = {"a1": "first", "b": "candidate", "a2": "second"}.get(label.split("-")[0])
        if leg is None:
            continue
        if phase is None or phase.summary is None:
            legs[leg].append(AbaRun(row.test_id, row.outcome or "unknown", {}, "has no figures"))
            continue
        legs[leg].append(_run(phase))
    return Legs(tuple(legs["first"]), tuple(legs["candidate"]), tuple(legs["second"]))


def _run(record: TestRecord) -> AbaRun:
    figures = record.summary
    assert figures is not None
    why = None
    if record.outcome == "failure":
        why = f"failed: {record.reason or 'no reason'}"
    elif record.outcome == "invalid":
        why = f"is invalid: {record.reason or 'no reason'}"
    elif record.outcome != "success":  # running still, or ended without an outcome
        why = f"ended {record.outcome!r}" if record.outcome else "has no outcome: it never ended"
    elif any(p.generator_bound for p in figures.peers):
        why = "was generator-bound: its figures are the load generator's"
    return AbaRun(
        record.test_id,
        record.outcome or "unknown",
        {f.key: f.read(figures) for f in FIGURES},
        why,
        figures.latency_untrusted,
    )
