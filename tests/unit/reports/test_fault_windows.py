"""The recovery after faults that test.json's summary carries, on hand-worked arrivals."""

from __future__ import annotations

from collections import Counter

from protocol.figures import TestFigures
from reports.fault_windows import Window, recovery_after_faults, windows_from_events

S = 1_000_000  # µs


def _arrivals(*spans: tuple[int, int, int]) -> Counter[int]:
    """Arrivals by second: (first second, last second, count each)."""
    return Counter({s: n for first, last, n in spans for s in range(first, last + 1)})


def _fault(start_s: float, end_s: float) -> Window:
    return Window("agent", "restart", "broker", int(start_s * S), int(end_s * S))


def test_back_to_95_percent_of_the_ten_seconds_before_in_whole_seconds() -> None:
    # 100 a second; the fault from 110.5 to 112.2 s. The whole seconds before it, 101 to 109 (100
    # is not whole within ten seconds of 110.5), make 100/s; 112 has 30, 113 80 and 114 96: back
    # at 95 from second 114, 1.8 s after the fault's end.
    arrivals = _arrivals((100, 109, 100), (110, 110, 50), (111, 111, 0), (112, 112, 30), (113, 113, 80))
    arrivals += _arrivals((114, 114, 96), (115, 130, 100))
    assert recovery_after_faults(arrivals, [_fault(110.5, 112.2)]) == 1.8
    # A fault the arrivals did not notice: recovered in the second it ended in.
    assert recovery_after_faults(_arrivals((100, 130, 100)), [_fault(110.5, 112.2)]) == 0.0


def test_one_that_never_recovers_counts_to_the_last_whole_second_and_the_slowest_fault_counts() -> None:
    # Half the rate from the fault on, to the test's end: second 130 is partial and never counts,
    # so it counts to the end of 129, 17.8 s after the fault's end.
    arrivals = _arrivals((100, 110, 100), (111, 130, 50))
    assert recovery_after_faults(arrivals, [_fault(110.5, 112.2)]) == 17.8
    # Two faults: the second's "before" starts after the first's end, and the first's search
    # stops at the second's start. The first (103.5 to 104) is back at once (second 104 has 100:
    # 0.0 s); the second (115.0 to 116.0) is back at 118, 2.0 s after its end: the slowest.
    arrivals = _arrivals((100, 114, 100), (115, 116, 0), (117, 117, 90), (118, 130, 100))
    assert recovery_after_faults(arrivals, [_fault(115.0, 116.0), _fault(103.5, 104.0)]) == 2.0


def test_no_recovery_without_arrivals_before_the_fault_or_a_whole_second_after_it() -> None:
    assert recovery_after_faults(_arrivals((112, 130, 100)), [_fault(110.5, 112.2)]) is None
    assert recovery_after_faults(_arrivals((100, 113, 100)), [_fault(110.5, 113.2)]) is None  # 113 is partial
    assert recovery_after_faults({}, [_fault(110.5, 112.2)]) is None
    assert recovery_after_faults(_arrivals((100, 130, 100)), []) is None


def test_windows_from_test_json_events_and_the_figure_in_the_summary() -> None:
    events = [
        {"agent": "a1", "action": "restart", "target": "broker", "phase": "start", "time": "2026-10-01T00:00:10+00:00"},
        {"agent": "a1", "action": "restart", "target": "broker", "phase": "end", "time": "2026-10-01T00:00:12.5+00:00"},
    ]
    [window] = windows_from_events(events)
    assert (window.end_us - window.start_us) == 2_500_000
    figures = TestFigures(test_id="t", recovery_s=1.8)
    assert figures.to_json()["recovery_s"] == 1.8 and TestFigures.from_json(figures.to_json()).recovery_s == 1.8
    assert "recovery_s" not in TestFigures(test_id="t").to_json()  # none without a fault: old records unchanged
