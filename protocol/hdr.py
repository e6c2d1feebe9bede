"""The latency histogram's shape, and reading the interval logs receivers write.

Values are integer microseconds, from 1 µs to 1 hour, 3 significant digits: writers and
readers must agree, so both take them from here.
"""

from __future__ import annotations

import operator
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

__all__ = [
    "BUCKET_BOUNDS_US",
    "DIGITS",
    "HIGHEST_US",
    "LOWEST_US",
    "bucket_indexes",
    "clear",
    "counts_at_or_below",
    "histogram_of",
    "new_histogram",
    "read_intervals",
    "read_total",
    "record_samples",
    "record_values",
    "sum_of",
    "value_at_percentile",
]

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
DIGITS = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


_SHAPE = new_histogram()  # the bucket arithmetic's constants, for indexes computed without a histogram


def _middles_of(shape: HdrHistogram) -> np.ndarray:
    """Each counts index's value as hdrh's mean reads it: the middle of the index's range
    (`_hdr_median_equiv_value(get_value_from_index(i))`), computed a column at a time. hdrh's
    own calls, index by index, took 27 ms: made on first use, they stalled a receiver's loop
    by that much at its first report, one second into a run, and the message arriving then
    showed it as latency (the slowest message of a 2 s run, p99.9 22-39 ms where the rest were
    1-5 ms)."""
    index = np.arange(shape.counts_len, dtype=np.int64)
    half_magnitude, half = shape.sub_bucket_half_count_magnitude, shape.sub_bucket_half_count
    bucket = (index >> half_magnitude) - 1
    sub_bucket = (index & (half - 1)) + half
    first = bucket < 0
    sub_bucket[first] -= half
    bucket[first] = 0
    shift = bucket + shape.unit_magnitude
    # The index's lowest value plus half its range, which is 1 << shift.
    return (sub_bucket << shift) + ((1 << shift) >> 1)


_MIDDLES = _middles_of(_SHAPE)


def sum_of(histogram: HdrHistogram) -> int:
    """The sum of the recorded values, as `get_mean_value() * get_total_count()` gives it.

    hdrh's mean walks the recorded values in pure Python: on a receiver's whole-run histogram,
    once a second for /metrics, it took 40 ms of every second and held the event loop for up to
    64 ms, which made a quiet test's p99 latency 25-45 ms where it was 1-4 (py-spy, 2026-11-28).
    """
    counts = np.ctypeslib.as_array(histogram.counts)
    recorded = np.flatnonzero(counts)
    # Python ints: a long run's sum may pass what an int64 product holds.
    return sum(map(operator.mul, counts[recorded].tolist(), _MIDDLES[recorded].tolist()))


def value_at_percentile(histogram: HdrHistogram, percentile: float) -> int:
    """`histogram.get_value_at_percentile(percentile)`, with numpy: hdrh's walks the counts in
    Python, 2.1 ms a call at a 2.5 s latency (0.4 ms at 1.5 ms), twice a second per receiver."""
    target = max(int(min(percentile, 100.0) * histogram.total_count / 100 + 0.5), 1)
    running = np.cumsum(np.ctypeslib.as_array(histogram.counts))
    index = int(np.searchsorted(running, target, side="left"))
    if index >= len(running):
        return 0
    value = histogram.get_value_from_index(index)
    return int(
        histogram.get_highest_equivalent_value(value) if percentile else histogram.get_lowest_equivalent_value(value)
    )


def clear(histogram: HdrHistogram) -> None:
    """`histogram.reset()` without its pure-Python loop over every count (3-4 ms a second for a
    receiver's two interval histograms)."""
    np.ctypeslib.as_array(histogram.counts)[:] = 0
    histogram.total_count = 0
    histogram.min_value = sys.maxsize
    histogram.max_value = 0
    histogram.start_time_stamp_msec = sys.maxsize
    histogram.end_time_stamp_msec = 0


def record_values(histogram: HdrHistogram, values: np.ndarray) -> None:
    """Record many values at once: hdrh's own bucket arithmetic, vectorised.

    One `record_value` call is a few µs of pure Python; at tens of thousands of messages a
    second, two per message were a receiver's whole budget. Values must lie within the
    histogram's range (callers clamp, and count what they clamped).
    """
    if not len(values):
        return
    h = histogram
    index = bucket_indexes(values, h)  # it takes the values as int64 itself
    counts = np.ctypeslib.as_array(h.counts)
    if len(index) > 4096:
        counts += np.bincount(index, minlength=h.counts_len).astype(counts.dtype)
    else:
        np.add.at(counts, index, 1)
    h.total_count += len(values)
    h.min_value = min(h.min_value, int(values.min()))
    h.max_value = max(h.max_value, int(values.max()))


def bucket_indexes(values: np.ndarray, histogram: HdrHistogram | None = None) -> np.ndarray:
    """Each value's index in the histogram's counts array (int64 values within its range)."""
    h = histogram or _SHAPE
    values = values.astype(np.int64, copy=False)  # the steps below write int64 into what they make
    # 64 - clz(v | mask) is the bit length, which frexp's exponent gives exactly below 2**53.
    _, bit_length = np.frexp((values | h.sub_bucket_mask).astype(np.float64))
    bucket = bit_length.astype(np.int64)
    bucket -= h.unit_magnitude + h.sub_bucket_half_count_magnitude + 1
    # The rest in place: 65,536 samples took 11-14 ns each with a new array per step, 7.7 so.
    index: np.ndarray = values >> (bucket + h.unit_magnitude) if h.unit_magnitude else values >> bucket
    bucket += 1
    bucket <<= h.sub_bucket_half_count_magnitude
    index += bucket
    index -= h.sub_bucket_half_count
    return index


# The bounds of the classic histogram Prometheus is given (µs; /metrics says seconds): 50 µs to
# 60 s, 1-2.5-5 a decade, which `histogram_quantile` interpolates within.
BUCKET_BOUNDS_US = (
    50,
    *(int(m * 10**e) for e in range(2, 7) for m in (1, 2.5, 5)),
    10_000_000,
    30_000_000,
    60_000_000,
)


def counts_at_or_below(histogram: HdrHistogram) -> list[int]:
    """How many values lie at or below each of `BUCKET_BOUNDS_US`, from the histogram's counts
    (a value in a bound's own HDR bucket, within 0.1 % of it, counts as at or below it)."""
    running = np.cumsum(np.ctypeslib.as_array(histogram.counts))
    return [int(n) for n in running[_BOUND_INDEXES]]


def histogram_of(indexes: np.ndarray, counts: np.ndarray) -> HdrHistogram:
    """A histogram from counts at `bucket_indexes` (the cells Spark adds up across files)."""
    h = new_histogram()
    if not len(indexes):
        return h
    np.add.at(np.ctypeslib.as_array(h.counts), indexes, counts)
    h.total_count = int(counts.sum())
    h.min_value = h.get_value_from_index(int(indexes.min()))
    h.max_value = h.get_value_from_index(int(indexes.max()))
    return h


def record_samples(histogram: HdrHistogram, samples: array[int], shift_us: int = 0) -> int:
    """A column of µs samples (appended one per message) into the histogram, each moved by
    `shift_us` (a clock correction: a sample below zero before it keeps its sign until then),
    then clamped to its range; returns how many had to be clamped (never dropped: that would
    bias the result)."""
    if not samples:
        return 0
    values = np.frombuffer(samples, dtype=np.int64)
    if shift_us:
        values = values + shift_us
    out_of_range = int(((values < LOWEST_US) | (values > HIGHEST_US)).sum())
    if out_of_range:
        values = np.clip(values, LOWEST_US, HIGHEST_US)
    record_values(histogram, values)
    return out_of_range


def read_intervals(path: Path) -> Iterator[HdrHistogram]:
    """Each interval of an HdrHistogram interval log, in order (start/end stamps in ms)."""
    reader = HistogramLogReader(str(path), new_histogram())
    try:
        while (interval := reader.get_next_interval_histogram()) is not None:
            yield interval
    finally:
        reader.close()


def read_total(path: Path, not_before_ms: int = 0) -> HdrHistogram:
    """All intervals of a log added up; intervals that started before `not_before_ms` (warm-up)
    are left out."""
    total = new_histogram()
    for interval in read_intervals(path):
        if interval.get_start_time_stamp() >= not_before_ms:
            total.add(interval)
    return total


_BOUND_INDEXES = bucket_indexes(np.array(BUCKET_BOUNDS_US, dtype=np.int64))
