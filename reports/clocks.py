"""Shifting a receiver's latency histogram by its clock correction (protocol.clock_correction
has the rule that gives the shift)."""

from __future__ import annotations

from hdrh.histogram import HdrHistogram

from protocol.clock_correction import Correction, clock_corrections
from protocol.hdr import new_histogram

__all__ = ["Correction", "clock_corrections", "shifted"]


def shifted(histogram: HdrHistogram, shift_us: float) -> tuple[HdrHistogram, int]:
    """The histogram with every value moved by `shift_us`; values that would fall below 1 µs are
    kept at 1 µs and counted (a clock estimate worse than the latency it corrects)."""
    if not shift_us:
        return histogram, 0
    out = new_histogram()
    clamped = 0
    for item in histogram.get_recorded_iterator():
        value = item.value_iterated_to + shift_us
        if value < 1:
            clamped += item.count_at_value_iterated_to
            value = 1
        out.record_value(round(value), item.count_at_value_iterated_to)
    out.set_start_time_stamp(histogram.get_start_time_stamp())
    out.set_end_time_stamp(histogram.get_end_time_stamp())
    return out, clamped
