"""Vectorised HDR recording gives exactly what hdrh's own per-value recording gives."""

from __future__ import annotations

import random

import numpy as np
import pytest

from protocol.hdr import HIGHEST_US, LOWEST_US, new_histogram, record_values


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


def test_recording_nothing_changes_nothing() -> None:
    histogram = new_histogram()
    record_values(histogram, np.array([], dtype=np.int64))
    assert histogram.get_total_count() == 0
