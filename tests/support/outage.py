"""Known answers read from the peers' own rate files (a row per message: its intended time and
when it was sent, or arrived, µs): what a broker outage did to a test (the gap in the
arrivals, and whether the messages meant to go after it arrived), and the latency each
message had, which a receiver's HDR log must hold exactly."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from protocol.hdr import new_histogram, read_total, record_values
from protocol.ratefile import read_rate_file

__all__ = ["Outage", "check_latency_log", "outage"]


@dataclass(frozen=True)
class Outage:
    gap_from_us: int  # the last arrival before the longest time without one
    gap_to_us: int  # the first after it
    due_after: int  # messages the senders meant to send after the gap ended
    arrived_after: int  # of those, the ones that arrived

    @property
    def gap_s(self) -> float:
        return (self.gap_to_us - self.gap_from_us) / 1e6


def _rows(folders: list[Path]) -> list[tuple[int, int]]:
    return [row for folder in folders for path in sorted(folder.glob("*.csv.gz")) for row in read_rate_file(path)]


def outage(senders: list[Path], receivers: list[Path]) -> Outage:
    """From the senders' rows (intended, sent) and the receivers' (intended, arrived), µs."""
    received = _rows(receivers)
    arrivals = sorted(ata for _, ata in received)
    gaps = [(b - a, a, b) for a, b in itertools.pairwise(arrivals)]
    _, gap_from, gap_to = max(gaps)
    due = sum(1 for eta, _ in _rows(senders) if eta > gap_to)
    arrived = sum(1 for eta, _ in received if eta > gap_to)
    return Outage(gap_from, gap_to, due, arrived)


def check_latency_log(receiver: Path) -> int:
    """A receiver's latency log against its rows: a sample per message, and each one the
    message's arrival less its intended time (to the µs the rows are floored to); returns
    how many messages it holds."""
    logged = read_total(receiver / "receiver-latency.hlog")
    latencies = np.array([ata - eta for eta, ata in _rows([receiver])], dtype=np.int64)
    assert logged.get_total_count() == len(latencies)
    if not len(latencies):
        return 0
    from_rows = new_histogram()
    record_values(from_rows, np.clip(latencies, 1, None))
    for percentile in (0.0, 50.0, 90.0, 99.0, 99.9, 100.0):
        expected = from_rows.get_value_at_percentile(percentile)
        # Within the histogram's bucket there, and the µs by which stamps floored one by one
        # (the rows') and a difference floored once (the log's) may differ.
        width = logged.get_highest_equivalent_value(expected) - logged.get_lowest_equivalent_value(expected) + 1
        assert abs(logged.get_value_at_percentile(percentile) - expected) <= width + 1, (percentile, expected)
    return len(latencies)
