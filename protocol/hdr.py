"""The latency histogram's shape, and reading the interval logs receivers write.

Values are integer microseconds, from 1 µs to 1 hour, 3 significant digits: writers and
readers must agree, so both take them from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

__all__ = ["DIGITS", "HIGHEST_US", "LOWEST_US", "new_histogram", "read_intervals", "read_total"]

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
DIGITS = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


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
