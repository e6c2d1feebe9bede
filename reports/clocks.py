"""Shifting a receiver's latency by its clock correction (protocol.clock_correction has the rule
that gives the shift; the receiver added the part known before the load as it recorded)."""

from __future__ import annotations

from hdrh.histogram import HdrHistogram

from protocol.clock_correction import Correction, clock_corrections
from protocol.hdr import LOWEST_US, new_histogram
from protocol.results import ReceiverAccount

__all__ = ["Correction", "clock_corrections", "left_to_shift", "shifted"]


def left_to_shift(correction: Correction | None, receiver: ReceiverAccount, interval: HdrHistogram) -> float:
    """What is left to add to one interval of a receiver's latency log: its correction at the
    interval's middle, less what the receiver added as it recorded (`latency_shift_us`).
    Without a correction, what the receiver added stands."""
    if correction is None:
        return 0.0
    middle_us = (interval.get_start_time_stamp() + interval.get_end_time_stamp()) * 500
    return float(correction.at(middle_us)) - receiver.latency_shift_us


def shifted(histogram: HdrHistogram, shift_us: float) -> tuple[HdrHistogram, int]:
    """The histogram with every value moved by `shift_us`; values that would fall below 1 µs are
    kept at 1 µs and counted (a clock estimate worse than the latency it corrects), but for those
    at 1 µs already: the receiver clamped and counted them as it recorded."""
    if not round(shift_us):
        return histogram, 0
    out = new_histogram()
    clamped = 0
    for item in histogram.get_recorded_iterator():
        value = item.value_iterated_to + shift_us
        if value < LOWEST_US:
            if item.value_iterated_to > LOWEST_US:
                clamped += item.count_at_value_iterated_to
            value = LOWEST_US
        out.record_value(round(value), item.count_at_value_iterated_to)
    out.set_start_time_stamp(histogram.get_start_time_stamp())
    out.set_end_time_stamp(histogram.get_end_time_stamp())
    return out, clamped
