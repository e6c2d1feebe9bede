"""The classic histogram /metrics gives Prometheus: counts at or below its bounds, from an HDR
histogram's counts, on known values."""

from protocol.hdr import BUCKET_BOUNDS_US, counts_at_or_below, new_histogram


def test_counts_at_or_below_the_prometheus_bounds() -> None:
    h = new_histogram()
    for value, times in ((40, 3), (50, 1), (51, 2), (1_000, 4), (2_000, 5), (99_999, 6), (3_599_000_000, 7)):
        h.record_value(value, times)
    counts = dict(zip(BUCKET_BOUNDS_US, counts_at_or_below(h), strict=True))
    assert counts[50] == 4  # 40 x 3 and 50 x 1; 51 is above
    assert counts[100] == counts[500] == 6
    assert counts[1_000] == 10 and counts[2_500] == 15 and counts[50_000] == 15
    assert counts[100_000] == 21  # 99,999 is at or below 100,000
    assert counts[60_000_000] == 21  # the hour-long ones are above every bound: only in +Inf
    assert list(counts.values()) == sorted(counts.values())


def test_the_bounds_run_from_50_us_to_a_minute_1_2_5_a_decade() -> None:
    assert BUCKET_BOUNDS_US[:4] == (50, 100, 250, 500) and BUCKET_BOUNDS_US[-4:] == (
        5_000_000,
        10_000_000,
        30_000_000,
        60_000_000,
    )
    assert len(BUCKET_BOUNDS_US) == 19 and list(BUCKET_BOUNDS_US) == sorted(set(BUCKET_BOUNDS_US))
