"""Tests made of several phases on one cast of peers: incremental, search (bisection),
repeated, sweep and A-B-A. Each phase is a full test under `<test-id>.<label>` with its own files and
test.json; the parent's test.json lists them and says what they add up to."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from coordinator.bus.client import MaestroClient
from coordinator.definitions import AbaTest, FixedRateTest, IncrementalTest, RepeatedTest, SearchTest, SweepTest
from coordinator.errors import was_interrupted
from coordinator.outcome.results import TestResult, now_iso, parent_record, phase_row, short_of_target
from coordinator.outcome.storage import ResultStore
from coordinator.running.cast import Cast
from coordinator.running.phase import Phase
from coordinator.running.statistics import estimate
from protocol.test_record import UNSET, Estimate, PhaseRow, Unset

__all__ = ["Series", "run_series"]

log = logging.getLogger(__name__)

Series = IncrementalTest | SearchTest | RepeatedTest | SweepTest | AbaTest


class _Runner:
    def __init__(
        self,
        maestro: MaestroClient,
        base: FixedRateTest,
        store: ResultStore,
        test_id: str,
        progress: bool,
        *,
        log_interval_s: float = 1.0,
    ) -> None:
        self.maestro = maestro
        self.store = store
        self.test_id = test_id
        self.progress = progress
        self.log_interval_s = log_interval_s
        self.cast = Cast.choose(maestro, base)
        self.phases: list[TestResult] = []

    def run(self, label: str, test: FixedRateTest, what: str, repetition: int | None = None) -> TestResult:
        log.info("%s: %s", label, what)
        if self.progress:
            print(f"{label}: {what}", file=sys.stderr, flush=True)
        phase_id = f"{self.test_id}.{label}"
        result = Phase(
            self.maestro,
            test,
            phase_id,
            self.store,
            self.cast,
            self.progress,
            phase_of=self.test_id,
            repetition=repetition,
            log_interval_s=self.log_interval_s,
        ).run()
        self.phases.append(result)
        return result

    @property
    def cast_lost(self) -> bool:
        """No further phase can run: a peer of the cast is lost, or a phase was interrupted (the
        series still writes its record; the script stops at its next test)."""
        return was_interrupted() or bool(self.maestro.lost_among({p.peer_id for p in self.cast.everyone}))


def _load(rate: float, parallel: int) -> str:
    return f"{rate:g} msg/s per client x {parallel} clients"


@dataclass(frozen=True)
class _Found:
    """What a series found: the phase that stands for it (its best, or None), and what its
    record says of it besides its steps."""

    best: TestResult | None
    stopped_by: str | Unset | None = UNSET  # an incremental test's or a search's
    statistics: dict[str, Estimate] | None = None  # a repeated test's
    comparison: tuple[PhaseRow, ...] | None = field(default=None)  # a sweep's
    # Why the series did not find what it looked for: a step or probe that did not measure the
    # SUT (its generator the limit, every message read twice) is no limit of the SUT's.
    invalid: str | None = None


def _unmeasured(phase: TestResult) -> str:
    return f"{phase.test_id} did not measure the SUT ({phase.reason}): the SUT's limit was not found"


def _unsustained(phase: TestResult, test: FixedRateTest) -> str | None:
    """Why a passing step or probe did not sustain its load: its senders sent less than the
    target, beyond the shortfall the test allows (a step that sent 54 % of 300,050 msg/s, held
    back by the SUT, was named the maximum sustainable rate)."""
    target, sent = test.target_rate(), phase.summary.send_rate.of(phase.summary.sent)
    if sent is None or not short_of_target(sent, target, test.fail.max_generator_shortfall):
        return None
    return f"it sent {sent:,.1f} msg/s of the {target:,.6g} asked ({sent / target:.0%}): the SUT did not take the load"


def _incremental(runner: _Runner, test: IncrementalTest) -> _Found:
    best = None
    for number, (rate, parallel) in enumerate(test.steps(), start=1):
        load = test.base.with_load(rate, parallel)
        step = runner.run(f"step{number:02d}", load, _load(rate, parallel))
        if step.outcome == "invalid":
            return _Found(best, stopped_by=f"step {number}: {step.reason}", invalid=_unmeasured(step))
        if not step.passed:
            return _Found(best, stopped_by=f"step {number}: {step.reason}")
        if short := _unsustained(step, load):
            return _Found(best, stopped_by=f"step {number}: {short}")
        best = step
        if runner.cast_lost:
            break
    else:
        return _Found(best, stopped_by=f"the ceiling, {_load(rate, parallel)}, passes: raise it to find the limit")
    return _Found(best, stopped_by=None)


def _search(runner: _Runner, test: SearchTest) -> _Found:
    parallel = test.base.parallel

    def probe(number: int, rate: float) -> TestResult:
        load = test.base.with_load(rate, parallel)
        result = runner.run(f"probe{number:02d}", load, _load(rate, parallel))
        # Passed, but held back below its rate: no rate the SUT sustains, as a failure is not.
        return replace(result, outcome="failure", reason=short) if (short := _unsustained(result, load)) else result

    low, high = test.low_rate, test.high_rate
    best = probe(1, low)
    if best.outcome == "invalid":
        return _Found(None, stopped_by=f"the low rate {low:g} did not measure the SUT", invalid=_unmeasured(best))
    if not best.passed:
        return _Found(None, stopped_by=f"the low rate {low:g} already fails: {best.reason}")
    top = probe(2, high)
    if top.outcome == "invalid":
        return _Found(best, stopped_by=f"the high rate {high:g} did not measure the SUT", invalid=_unmeasured(top))
    if top.passed:
        return _Found(top, stopped_by=f"the high rate {high:g} passes: raise high_rate to find the limit")
    number = 2
    while (high - low) / high > test.resolution and number < test.max_steps and not runner.cast_lost:
        number += 1
        middle = (low + high) / 2
        result = probe(number, middle)
        if result.outcome == "invalid":  # neither side of the limit: the search cannot narrow on it
            return _Found(
                best, stopped_by=f"{middle:g} msg/s per client did not measure the SUT", invalid=_unmeasured(result)
            )
        if result.passed:
            low, best = middle, result
        else:
            high = middle
    return _Found(best, stopped_by=f"passes at {low:g}, fails at {high:g} msg/s per client")


def _repeated(runner: _Runner, test: RepeatedTest) -> _Found:
    for number in range(1, test.times + 1):
        runner.run(f"run{number:02d}", test.base, f"repetition {number} of {test.times}", repetition=number)
        if runner.cast_lost:
            break
    passed = [r for r in runner.phases if r.passed]
    if not passed:
        return _Found(None, statistics={})
    metrics = _CLOSED_METRICS if all(r.summary.request_reply for r in passed) else _OPEN_METRICS
    # Rates and latencies, none below 0.
    estimates = {name: estimate([get(r) for r in passed], least=0.0) for name, get in metrics.items()}
    # The repetition nearest the mean rate (the first metric) stands for the set in a one-line summary.
    rate, get_rate = next(iter(metrics.items()))
    middle = min(passed, key=lambda r: abs(get_rate(r) - estimates[rate].mean))
    return _Found(middle if len(passed) == test.times else None, statistics=estimates)


_OPEN_METRICS: dict[str, Callable[[TestResult], float]] = {
    "receive_rate": lambda r: r.summary.receive_rate.mean,
    "send_rate": lambda r: r.summary.send_rate.mean,
    "latency_p50_us": lambda r: r.summary.latency_us.p50,
    "latency_p99_us": lambda r: r.summary.latency_us.p99,
    "latency_max_us": lambda r: r.summary.latency_us.max,
}
# A closed system's figures are its throughput and response time: its `latency_us` is the
# request leg alone, which a repeated request/reply test once gave its intervals for.
_CLOSED_METRICS: dict[str, Callable[[TestResult], float]] = {
    "throughput": lambda r: r.summary.request_reply.throughput_per_s if r.summary.request_reply else 0.0,
    "response_time_p50_us": lambda r: r.summary.request_reply.response_time_us.p50 if r.summary.request_reply else 0.0,
    "response_time_p99_us": lambda r: r.summary.request_reply.response_time_us.p99 if r.summary.request_reply else 0.0,
    "response_time_max_us": lambda r: r.summary.request_reply.response_time_us.max if r.summary.request_reply else 0.0,
}


# An A-B-A test's legs: the phase labels its verdict reads them by (reports.aba.read_legs).
_ABA_LEGS = (("a1", "baseline"), ("b", "candidate"), ("a2", "baseline again"))


def _aba(runner: _Runner, test: AbaTest) -> _Found:
    for label, what in _ABA_LEGS:
        leg = test.candidate if label == "b" else test.base
        for number in range(1, test.times + 1):
            runner.run(f"{label}-{number:02d}", leg, f"{what}, run {number} of {test.times}")
            if runner.cast_lost:
                return _Found(None)
    return _Found(None)


def _sweep(runner: _Runner, test: SweepTest) -> _Found:
    points = test.points()
    rows = []
    for number, point in enumerate(points, start=1):
        what = ", ".join(f"{k}={v}" for k, v in point.items())
        result = runner.run(f"point{number:02d}", test.at(point), what)
        rows.append(replace(phase_row(result), point=point))
        if runner.cast_lost:
            break
    passing = [(row, r) for row, r in zip(rows, runner.phases, strict=True) if r.passed]
    best = max(passing, key=lambda pr: pr[0].receive_rate or 0.0)[1] if passing else None
    return _Found(best, comparison=tuple(rows))


def _planned(test: RepeatedTest | SweepTest | AbaTest) -> int:
    """How many phases the series runs when none stops it."""
    if isinstance(test, RepeatedTest):
        return test.times
    if isinstance(test, AbaTest):
        return 3 * test.times
    return len(test.points())


def run_series(
    maestro: MaestroClient,
    test: Series,
    store: ResultStore,
    test_id: str,
    progress: bool,
    *,
    log_interval_s: float = 1.0,
) -> TestResult:
    started = now_iso()
    store.open(test_id, parent_record(test, test_id, started, None, None))  # each phase opens its own too
    runner = _Runner(maestro, test.base, store, test_id, progress, log_interval_s=log_interval_s)
    match test:
        case IncrementalTest():
            found = _incremental(runner, test)
        case SearchTest():
            found = _search(runner, test)
        case RepeatedTest():
            found = _repeated(runner, test)
        case SweepTest():
            found = _sweep(runner, test)
        case AbaTest():
            found = _aba(runner, test)
    best, phases = found.best, runner.phases
    if isinstance(test, RepeatedTest | SweepTest | AbaTest):
        failed = [p for p in phases if not p.passed]
        reason = "; ".join(f"{p.test_id}: {p.reason}" for p in failed) or None
        if len(phases) < _planned(test):
            reason = reason or "a peer was lost before every phase ran"
    else:
        # Why it stopped: the last phase's own reason is a success's where the SUT held it back.
        why = found.stopped_by if isinstance(found.stopped_by, str) else phases[-1].reason
        reason = None if best is not None else f"no passing step: {why}"
    outcome = "success" if reason is None else "failure"
    if found.invalid:  # it stopped at a phase that measured its generator, not the SUT
        outcome, reason = "invalid", found.invalid
    if reason is None:  # said beside the word, as a phase's is
        reason = (
            f"all {len(phases)} phases succeeded"
            if best is None or isinstance(test, RepeatedTest | SweepTest | AbaTest)
            else f"the highest passing step is {best.test_id}" + (f"; {found.stopped_by}" if found.stopped_by else "")
        )
    steps = tuple(phase_row(p) for p in phases)
    record = replace(
        parent_record(test, test_id, started, outcome, reason),
        stopped_by=found.stopped_by,
        statistics=found.statistics,
        comparison=found.comparison,
        steps=steps,
        # The latency-vs-throughput curve: every rate measured, in order of load.
        curve=tuple(sorted(steps, key=lambda row: row.target_rate or 0.0)) if isinstance(test, SearchTest) else None,
    )
    if best is not None and isinstance(test, IncrementalTest | SearchTest) and outcome == "success":
        record = replace(record, max_sustainable=phase_row(best))
    elif best is not None and isinstance(test, SweepTest):
        record = replace(record, best=phase_row(best))
    summary = best.summary if best is not None else phases[-1].summary
    result = TestResult(test_id, outcome, reason, summary, record, store.url, phases, best)
    store.store(result, phases)
    return result
