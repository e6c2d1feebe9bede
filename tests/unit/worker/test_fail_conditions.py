from __future__ import annotations

import numpy as np
import pytest

from protocol.fail import FailConditions
from protocol.hdr import new_histogram
from protocol.options import Duration, MessageSize, ProfileStep, parse_profile
from worker.latency import LatencyRecorder
from worker.run import Watch
from worker.sender import ScheduledSending, SenderPlan, SenderStats


def _interval(values_us: list[int]):  # type: ignore[no-untyped-def]
    histogram = new_histogram()
    for value in values_us:
        histogram.record_value(value)
    return histogram


def test_soft_latency_bound_judges_the_percentile_and_hard_the_max() -> None:
    # 99 values of 1 ms and one of 50 ms: p99 is 1 ms, the max 50 ms.
    interval = _interval([1000] * 99 + [50_000])
    soft = FailConditions(latency_ms=10, latency_percentile=99)
    hard = FailConditions(latency_ms=10, latency_policy="hard")
    assert soft.latency(interval) is None
    reason = hard.latency(interval)
    assert reason is not None and reason.startswith("latency max 50.015 ms > bound 10 ms (hard)")
    assert FailConditions(latency_ms=0.5).latency(interval) == "latency p99 1.000 ms > bound 0.5 ms (soft)"
    assert FailConditions().latency(interval) is None  # no bound
    assert soft.latency(new_histogram()) is None  # an empty interval says nothing


def test_the_latency_bound_judges_latency_moved_by_the_clock_correction() -> None:
    # A receiver whose clock runs 50 ms ahead of its senders' measures 51 ms for 1 ms, and
    # records it moved by the correction it was given: the bound judges the 1 ms.
    bound = FailConditions(latency_ms=20)
    assert bound.latency(_interval([51_000] * 100)) == "latency p99 51.007 ms > bound 20 ms (soft)"
    recorder = LatencyRecorder(None, shift_us=-50_000)
    recorder.record_many(np.full(100, 51_000), np.full(100, 50_900))
    interval = recorder.roll().corrected
    assert bound.latency(interval) is None
    assert FailConditions(latency_ms=0.5).latency(interval) == "latency p99 1.000 ms > bound 0.5 ms (soft)"


def test_rate_and_stall() -> None:
    conditions = FailConditions(min_rate_ratio=0.9, stall_s=30)
    assert conditions.rate(sent=950, seconds=10, target_per_s=100) is None
    assert conditions.rate(sent=800, seconds=10, target_per_s=100) == (
        "rate 80.0 msg/s is 80.0% of the target 100 msg/s (bound 90%)"
    )
    assert conditions.rate(sent=0, seconds=10, target_per_s=0) is None  # unbounded: no target
    assert conditions.stalled(29.9, "received") is None
    assert conditions.stalled(31, "received") == "stalled: nothing received for 31 s (bound 30 s)"
    assert FailConditions(stall_s=0).stalled(1e6, "sent") is None


def test_a_profile_is_parsed_and_its_schedule_counted() -> None:
    steps = parse_profile([[0, 20, 1], ["2s", 50, 2], ["4s", 0, 1]])
    assert steps == (ProfileStep(0, 20, 1), ProfileStep(2, 50, 2), ProfileStep(4, 0, 1))
    for bad, why in (([[1, 5, 1]], "start at 0"), ([[0, 5, 1], [0, 6, 1]], "must rise"), ([[0, 5]], "expected")):
        with pytest.raises(ValueError, match=why):
            parse_profile(bad)
    plan = SenderPlan("t", "p", ["mqtt://h/t"], 0, 2, Duration(seconds=6), MessageSize(1, 1), profile=steps)
    assert plan.expected_sent(1) == 20
    assert plan.expected_sent(3) == 40 + 100
    assert plan.expected_sent(5) is None  # the last step is unbounded: no target


class _OnSchedule(ScheduledSending):
    """A sender that keeps its schedule to the message: 100 msg/s from the origin at 0."""

    def __init__(self, plan: SenderPlan) -> None:
        super().__init__(plan, SenderStats(), {}, started_ns=0)

    def at(self, now: float) -> _OnSchedule:
        self.stats.sent = int(100 * now)
        return self


@pytest.mark.parametrize(("warm_up_s", "first_look"), [(0.0, 0.97), (2.0, 2.99)])
def test_a_sender_on_schedule_meets_the_rate_bound_however_late_the_first_look(
    warm_up_s: float, first_look: float
) -> None:
    # The watch looks once a stats interval, so its first look after warm-up comes up to a second
    # late. Judged from the warm-up's end with the count of that first look, a sender on schedule
    # read 80 % of its rate at its first verdict (5 s in), and a 90 % bound failed it.
    plan = SenderPlan("t", "p", ["mqtt://h/t"], 100, 1, Duration(seconds=60), MessageSize(1, 1), warm_up_s=warm_up_s)
    run = _OnSchedule(plan)
    watch = Watch(FailConditions(min_rate_ratio=0.9), origin=0.0, options_warm_up_s=warm_up_s)
    looks = [first_look + k for k in range(12)]
    assert [watch.check(run.at(now), now) for now in looks] == [None] * 12
    # One that fell behind (80 of its 100 a second since the first look) is still caught.
    behind = Watch(FailConditions(min_rate_ratio=0.9), origin=0.0, options_warm_up_s=warm_up_s)
    behind.check(run.at(first_look), first_look)
    run.stats.sent += 400  # 5 s later: 400 more where 500 were due
    reason = behind.check(run, first_look + 5)
    assert reason is not None and reason.startswith("rate 80.0 msg/s is 80.0% of the target 100 msg/s"), reason


def test_an_interval_that_began_in_the_warm_up_is_not_judged_by_its_figures() -> None:
    """The stats interval that closes just after a 2 s warm-up is nearly all warm-up: a verdict
    on its latency waits for the next interval, which lies wholly after it."""
    watch = Watch(FailConditions(latency_ms=10), origin=0.0, options_warm_up_s=2.0)

    class _Interval:
        VERB = "received"

        def count(self) -> int:
            return 1

        def idle_on_purpose(self) -> bool:
            return False

        def verdict(self, conditions: FailConditions, w: Watch, now: float) -> str | None:
            return None if w.interval_in_warm_up else f"judged at {now:g}"

    run = _Interval()
    assert [watch.check(run, now) for now in (1.0, 2.02, 3.02)] == [None, None, "judged at 3.02"]  # type: ignore[arg-type]
    # Without a warm-up the first interval is judged: all of it counts.
    assert Watch(FailConditions(latency_ms=10), origin=0.0, options_warm_up_s=0.0).check(run, 1.0) == "judged at 1"  # type: ignore[arg-type]
