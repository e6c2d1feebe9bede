"""What a sender's schedule meant to send: its slots before the end, counted by hand."""

from __future__ import annotations

import pytest

from protocol.options import Duration, MessageSize, ProfileStep
from worker.schedule import Schedule
from worker.sender import SenderPlan

_T0 = 1_234_567_891_011  # a monotonic start, as large as a host's


def _walk(schedule: Schedule, end_ns: int) -> int:
    """The slots message by message, as the send loop takes them."""
    count = 0
    while schedule.next_intended(0) < end_ns:
        count += 1
    return count


@pytest.mark.parametrize("rate", [1.0, 3.0, 7.0, 100.0, 333.0, 1000.0])
@pytest.mark.parametrize("seconds", [0.5, 1.0, 10.0])
def test_a_constant_rates_slots_are_those_the_loop_takes(rate: float, seconds: float) -> None:
    end = _T0 + int(seconds * 1e9)
    assert Schedule(rate, _T0).slots_before(end) == _walk(Schedule(rate, _T0), end)


def test_slots_by_hand() -> None:
    # 10/s for 1 s: at 0, 100, ..., 900 ms; the one at 1,000 ms is the end's, not the run's.
    assert Schedule(10.0, _T0).slots_before(_T0 + 1_000_000_000) == 10
    assert Schedule(10.0, _T0).slots_before(_T0 + 1_000_000_001) == 11
    assert Schedule(10.0, _T0).slots_before(_T0) == 0
    with pytest.raises(ValueError, match="unbounded"):
        Schedule(0.0, _T0).slots_before(_T0 + 1)


def test_a_poisson_schedules_slots_are_drawn_again_from_its_seed() -> None:
    end = _T0 + 2_000_000_000
    walked = _walk(Schedule(500.0, _T0, poisson=True, seed=3), end)
    assert Schedule(500.0, _T0, poisson=True, seed=3).slots_before(end) == walked
    assert 850 < walked < 1150  # about 1,000


def _plan(**overrides: object) -> SenderPlan:
    fields: dict[str, object] = {
        "test_id": "t",
        "peer": "s@h",
        "urls": ["memory://x/q"],
        "rate_per_s": 10.0,
        "parallel_count": 2,
        "duration": Duration(seconds=2.0),
        "size": MessageSize(64, 64),
    }
    return SenderPlan(**(fields | overrides))  # type: ignore[arg-type]


def test_intended_per_client() -> None:
    # A count: 7 over 2 clients is 4 and 3, however the run went.
    counted = _plan(duration=Duration(messages=7))
    assert [counted.intended_for(c, _T0) for c in (0, 1)] == [4, 3]
    # 10/s for 2 s: 20 each.
    assert [_plan().intended_for(c, _T0) for c in (0, 1)] == [20, 20]
    # A profile: 10/s on both for 1 s, then 20/s on client 0 alone: 10 + 20 and 10.
    profile = (ProfileStep(0.0, 10.0, 2), ProfileStep(1.0, 20.0, 1))
    assert [_plan(profile=profile).intended_for(c, _T0) for c in (0, 1)] == [30, 10]
    # Unbounded, or without an end: no schedule to count by.
    assert _plan(rate_per_s=0.0).intended_for(0, _T0) is None
    assert _plan(duration=Duration()).intended_for(0, _T0) is None


def test_a_run_stopped_early_meant_to_send_only_what_came_due_before_the_stop() -> None:
    """A test stopped 5 s into 30 read 12,000 intended beside 2,254 sent: the whole schedule."""
    stopped = _T0 + 500_000_000  # 0.5 s in: 10/s gives the slots at 0, 100, ..., 400 ms
    assert [_plan().intended_for(c, _T0, stopped) for c in (0, 1)] == [5, 5]
    assert _plan().intended_for(0, _T0, _T0 + 9_000_000_000) == 20  # after its end: the whole
    # A count stopped early likewise; unbounded, no schedule to count by; a run with no end, its stop.
    assert _plan(duration=Duration(messages=7)).intended_for(0, _T0, stopped) == 4
    assert _plan(duration=Duration(messages=70)).intended_for(0, _T0, stopped) == 5
    assert _plan(rate_per_s=0.0).intended_for(0, _T0, stopped) is None
    assert _plan(rate_per_s=0.0, duration=Duration(messages=7)).intended_for(0, _T0, stopped) == 4  # due at once
    assert _plan(duration=Duration()).intended_for(0, _T0, stopped) == 5


# Starts and ends (rate, start, end) where the arithmetic estimate of the count, (end - start) /
# interval in floats, falls one short of the slots: found by search over starts as large as a
# host's monotonic clock, where start + k * interval rounds up past an integer the estimate
# rounds under. The count is then put right by the loop that counts on.
_ROUNDED_SHORT = [
    (110_000.0, 9_962_089_617_574_577, 9_962_090_506_701_849, 97_805),
    (70_000.0, 9_753_591_903_647_725, 9_753_592_726_404_867, 57_594),
    (30_000.0, 9_649_852_422_615_141, 9_649_852_554_881_807, 3_969),
]


def _by_definition(schedule: Schedule, end_ns: int) -> int:
    """Slots k >= 0 whose intended time, int(start + k * interval), is before the end."""
    k = 0
    while int(schedule.start_ns + k * schedule.interval_ns) < end_ns:
        k += 1
    return k


@pytest.mark.parametrize(("rate", "start", "end", "slots"), _ROUNDED_SHORT)
def test_an_estimate_one_short_is_counted_on(rate: float, start: int, end: int, slots: int) -> None:
    schedule = Schedule(rate, start)
    estimate = int((end - start) / schedule.interval_ns) + 1
    assert estimate == slots - 1 == _by_definition(schedule, end) - 1  # the case searched for
    assert schedule.slots_before(end) == slots
    due = Schedule(rate, start).take_due(now_ns=end, before_ns=end, most=10**6)
    assert len(due) == slots and due[-1] == int(start + (slots - 1) * schedule.interval_ns) < end


def test_a_schedule_asked_before_its_start_owes_nothing_and_still_begins_at_its_first() -> None:
    schedule = Schedule(1000.0, _T0)
    assert schedule.slots_before(_T0 - 5_500_000) == 0  # five and a half intervals before it
    assert schedule.take_due(now_ns=_T0 - 5_500_000, before_ns=_T0 + 10**9, most=10) == []
    assert schedule.take_due(now_ns=_T0, before_ns=_T0 + 10**9, most=10) == [_T0]


def test_a_poisson_schedules_slots_end_strictly_before_the_end() -> None:
    """At each drawn time itself the slot is the end's; a nanosecond later it is the run's. Over
    ten seconds of slots, a gap a billionth longer would move the last one by ten ns."""
    times = Schedule(1000.0, _T0, poisson=True, seed=5).take_due(
        now_ns=_T0 + 11 * 10**9, before_ns=_T0 + 11 * 10**9, most=20_000
    )
    for k in (0, 1, 999, 9_999):
        assert Schedule(1000.0, _T0, poisson=True, seed=5).slots_before(times[k]) == k
        assert Schedule(1000.0, _T0, poisson=True, seed=5).slots_before(times[k] + 1) == k + 1


def test_a_bad_schedule_says_why() -> None:
    with pytest.raises(ValueError, match=r"^rate_per_s must be >= 0$"):
        Schedule(-1.0, _T0)
    with pytest.raises(ValueError, match=r"^an unbounded schedule has no slots$"):
        Schedule(0.0, _T0).slots_before(_T0 + 1)
