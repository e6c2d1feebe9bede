"""Vectorised HDR recording gives exactly what hdrh's own per-value recording gives."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogWriter

from protocol.hdr import (
    HIGHEST_US,
    LOWEST_US,
    _middles_of,
    bucket_indexes,
    clear,
    histogram_of,
    new_histogram,
    read_intervals,
    read_total,
    record_values,
    sum_of,
    value_at_percentile,
)


@pytest.mark.parametrize("n", [1, 17, 5000, 50_000])
def test_vectorised_recording_matches_record_value_bucket_for_bucket(n: int) -> None:
    rng = random.Random(n)
    # Every order of magnitude, the range's ends, and powers of two and their neighbours.
    values = [LOWEST_US, HIGHEST_US, 1023, 1024, 1025, 2047, 2048, 2**31 - 1, 2**31]
    values += [int(10 ** rng.uniform(0, 9.55)) for _ in range(n)]
    values = [min(max(v, LOWEST_US), HIGHEST_US) for v in values]
    one_by_one, at_once = new_histogram(), new_histogram()
    for value in values:
        assert one_by_one.record_value(value)
    record_values(at_once, np.array(values, dtype=np.int64))
    assert list(at_once.counts) == list(one_by_one.counts)
    assert at_once.get_total_count() == one_by_one.get_total_count() == len(values)
    assert at_once.get_min_value() == one_by_one.get_min_value()
    assert at_once.get_max_value() == one_by_one.get_max_value()
    for percentile in (50, 90, 99, 99.9, 100):
        assert at_once.get_value_at_percentile(percentile) == one_by_one.get_value_at_percentile(percentile)
    # And it encodes to the same bytes (what the interval log holds).
    assert at_once.encode() == one_by_one.encode()


def test_the_sum_is_the_values_below_2048_exactly_and_hdrh_means_above() -> None:
    small = new_histogram()
    record_values(small, np.array([1, 1000, 1000, 1500, 2047], dtype=np.int64))
    assert sum_of(small) == 1 + 1000 + 1000 + 1500 + 2047  # one value per bucket below 2048
    assert sum_of(new_histogram()) == 0
    rng = np.random.default_rng(7)
    wide = new_histogram()
    record_values(wide, np.clip((10 ** rng.uniform(0, 9.5, 20_000)).astype(np.int64), LOWEST_US, HIGHEST_US))
    assert sum_of(wide) == pytest.approx(wide.get_mean_value() * wide.get_total_count(), rel=1e-12)


@pytest.mark.parametrize("shape", [(LOWEST_US, HIGHEST_US, 3), (1, 1000, 2), (1000, 10**9, 3)], ids=str)
def test_the_middle_of_every_bucket_is_hdrhs(shape: tuple[int, int, int]) -> None:
    """What the sum weighs each count by, computed a column at a time, is hdrh's own middle of
    every index's range, index by index (the last shape has a unit magnitude of 9)."""
    histogram = HdrHistogram(*shape)
    expected = [
        histogram._hdr_median_equiv_value(histogram.get_value_from_index(i)) for i in range(histogram.counts_len)
    ]
    assert _middles_of(histogram).tolist() == expected


def test_a_sum_past_what_an_int64_holds_is_exact() -> None:
    histogram = new_histogram()
    index = int(bucket_indexes(np.array([HIGHEST_US], dtype=np.int64))[0])
    np.ctypeslib.as_array(histogram.counts)[index] = 10**10  # ten billion samples of an hour
    histogram.total_count = 10**10
    assert sum_of(histogram) > 2**63
    assert sum_of(histogram) == 10**10 * histogram._hdr_median_equiv_value(HIGHEST_US)


def test_clear_leaves_what_hdrh_reset_leaves() -> None:
    histogram, twin = new_histogram(), new_histogram()
    for h in (histogram, twin):
        record_values(h, np.array([5, 50_000, HIGHEST_US], dtype=np.int64))
        h.set_start_time_stamp(1000)
        h.set_end_time_stamp(2000)
    clear(histogram)
    twin.reset()
    assert histogram.encode() == twin.encode() == new_histogram().encode()
    assert vars(histogram).keys() == vars(twin).keys()
    for name, value in vars(twin).items():
        if name not in ("counts", "encoder"):
            assert getattr(histogram, name) == value, name
    assert not any(histogram.counts)
    record_values(histogram, np.array([7], dtype=np.int64))
    assert (histogram.get_min_value(), histogram.get_max_value()) == (7, 7)


def test_recording_nothing_changes_nothing() -> None:
    histogram = new_histogram()
    record_values(histogram, np.array([], dtype=np.int64))
    assert histogram.get_total_count() == 0


def test_a_histogram_from_bucket_counts_is_the_histogram_of_the_values() -> None:
    # What the reporter does across files: each file's values counted by bucket index, the counts
    # added up, one histogram made from them; the same figures as recording every value.
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.integers(1, 5_000, 3_000), rng.lognormal(9, 2, 3_000).astype(np.int64) + 1])
    values = np.clip(values, LOWEST_US, HIGHEST_US)
    direct = new_histogram()
    record_values(direct, values)
    halves = [np.unique(bucket_indexes(part), return_counts=True) for part in np.array_split(values, 2)]
    indexes = np.concatenate([i for i, _ in halves])
    counts = np.concatenate([c for _, c in halves])
    rebuilt = histogram_of(indexes, counts)
    assert rebuilt.get_total_count() == direct.get_total_count() == len(values)
    assert (rebuilt.get_min_value(), rebuilt.get_max_value()) == (direct.get_min_value(), direct.get_max_value())
    for p in (0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0):
        assert rebuilt.get_value_at_percentile(p) == direct.get_value_at_percentile(p)
    assert histogram_of(np.empty(0, np.int64), np.empty(0, np.int64)).get_total_count() == 0


def test_a_logs_total_leaves_out_the_intervals_begun_before_the_warm_up_ended(tmp_path: Path) -> None:
    # Three intervals starting at 0, 1000 and 2000 ms with 1, 2 and 4 samples of 10, 20, 40 µs.
    path = tmp_path / "x.hlog"
    with path.open("w") as f:
        writer = HistogramLogWriter(f)
        for start_ms, value, count in ((0, 10, 1), (1000, 20, 2), (2000, 40, 4)):
            interval = new_histogram()
            interval.record_value(value, count)
            interval.set_start_time_stamp(start_ms)
            interval.set_end_time_stamp(start_ms + 1000)
            writer.output_interval_histogram(interval)
    assert [h.get_total_count() for h in read_intervals(path)] == [1, 2, 4]
    assert read_total(path).get_total_count() == 7  # from 0: all of them
    assert read_total(path, 1000).get_total_count() == 6  # one starting at the cut is in
    assert read_total(path, 1001).get_min_value() == 40


@pytest.mark.parametrize("n", [0, 1, 17, 5000])
def test_value_at_percentile_is_hdrhs_to_the_microsecond(n: int) -> None:
    rng = np.random.default_rng(n)
    histogram = new_histogram()
    values = np.clip((10 ** rng.uniform(0, 9.5, n)).astype(np.int64), LOWEST_US, HIGHEST_US)
    record_values(histogram, values)
    for percentile in (0, 0.1, 25, 50, 90, 99, 99.9, 99.99, 100, 120):
        assert value_at_percentile(histogram, percentile) == histogram.get_value_at_percentile(percentile), percentile
