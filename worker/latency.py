"""Receiver latency: HdrHistograms per one-second interval, written as standard interval logs.

Two series, each its own log so any HdrHistogram tool reads it:
- `receiver-latency.hlog`: from the intended send time (corrected for coordinated omission);
- `receiver-service-latency.hlog`: from the actual send time (what the SUT alone took).
A requester (request/reply) keeps two recorders of the same shape under its own file names:
response time with the replier's time, and the request and reply legs.
Values are integer microseconds in the shape `protocol.hdr` fixes. A receiver whose senders
run on other hosts moves its samples by the clock correction measured before the load
(`shift_us`) before they are recorded: a sample that reads negative because the receiver's clock
is behind keeps its sign until then. A sample still beyond the range is clamped to it and
counted, never dropped (Maestro Java dropped negative samples, which biased the result).
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogWriter

from protocol.hdr import clear, new_histogram, record_samples

__all__ = ["RECEIVER_LOGS", "IntervalLatency", "LatencyRecorder"]

RECEIVER_LOGS = (("corrected", "receiver-latency.hlog"), ("service", "receiver-service-latency.hlog"))

_FLUSH_AT = 65_536  # samples held before they go into the histograms (else at each roll)


@dataclass
class IntervalLatency:
    """One interval's pair of histograms."""

    start_s: float
    corrected: HdrHistogram = field(default_factory=new_histogram)
    service: HdrHistogram = field(default_factory=new_histogram)

    def reset(self, start_s: float) -> IntervalLatency:
        self.start_s = start_s
        clear(self.corrected)
        clear(self.service)
        return self


class LatencyRecorder:
    def __init__(
        self,
        directory: Path | None,
        interval_s: float = 1.0,
        logs: tuple[tuple[str, str], ...] = RECEIVER_LOGS,
        shift_us: int = 0,
    ) -> None:
        """`directory` None: no logs are written (a receiver process whose parent writes them).
        `logs`: what the first and the second series are called, and their files. `shift_us`:
        added to every sample before it is recorded (a clock correction)."""
        self.directory = directory
        self.interval_s = interval_s
        self.shift_us = shift_us
        # Samples of the first series outside [1 µs, 1 h] once shifted: a clock correction wrong by
        # more than the latency, or a message stuck for an hour. The figures judge that series
        # (the service series, never above it, is clamped alike but not counted).
        self.clamped = 0
        self.total_corrected = new_histogram()
        self.total_service = new_histogram()
        self._files: list[IO[str]] = []
        self._writers = {}
        # Whole milliseconds, as interval stamps are: a StartTime rounded above the first
        # interval's start makes readers skip that interval.
        start = int(time.time() * 1000) / 1000
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            for (label, name), series in zip(logs, ("corrected", "service"), strict=True):
                f = (directory / name).open("w")
                self._files.append(f)
                writer = HistogramLogWriter(f)
                writer.output_comment(f"[maestro {label} latency, microseconds]")
                writer.output_log_format_version()
                # hdrh 0.10's output_start_time is broken (ms passed to fromtimestamp); same line, by hand.
                stamp = datetime.fromtimestamp(start, UTC).isoformat(sep=" ")
                f.write(f"#[StartTime: {start:.3f} (seconds since epoch), {stamp}]\n")
                writer.output_legend()
                self._writers[series] = writer
        self.current = IntervalLatency(start_s=start)
        # The interval before the one `roll` last returned: reused for the next, so that a
        # receiver does not allocate two 90 KB histograms a second for hours (which glibc's
        # allocator turned into a slow climb of resident memory in the soak).
        self._spare: IntervalLatency | None = None

        # This interval's samples, appended per message (the hot path: two appends) and put
        # into the histograms a column at a time.
        self.corrected_us: array[int] = array("q")
        self.service_us: array[int] = array("q")

    def record(self, corrected_us: int, service_us: int) -> None:
        self.corrected_us.append(corrected_us)
        self.service_us.append(service_us)
        if len(self.corrected_us) >= _FLUSH_AT:
            self.flush()

    def record_many(self, corrected_us: np.ndarray, service_us: np.ndarray) -> None:
        """A burst's samples (int64 columns) at once."""
        self.corrected_us.frombytes(np.asarray(corrected_us, dtype=np.int64).tobytes())
        self.service_us.frombytes(np.asarray(service_us, dtype=np.int64).tobytes())
        if len(self.corrected_us) >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Put the samples taken so far into the current interval's histograms."""
        self.clamped += record_samples(self.current.corrected, self.corrected_us, self.shift_us)
        record_samples(self.current.service, self.service_us, self.shift_us)
        self.corrected_us = array("q")
        self.service_us = array("q")

    def roll(self, now_s: float | None = None) -> IntervalLatency:
        """Close the current interval: write it, add it to the totals, start the next one."""
        # The wall clock may step back (NTP); an interval never ends before it began.
        now_s = max(time.time() if now_s is None else now_s, self.current.start_s)
        self.flush()
        done = self.current
        for series, histogram in (("corrected", done.corrected), ("service", done.service)):
            histogram.set_start_time_stamp(int(done.start_s * 1000))
            histogram.set_end_time_stamp(int(now_s * 1000))
            if series in self._writers:
                # Interval_Max is written in milliseconds (values are µs).
                self._writers[series].output_interval_histogram(histogram, max_value_unit_ratio=1000.0)
        self.total_corrected.add(done.corrected)
        self.total_service.add(done.service)
        for f in self._files:
            f.flush()
        # What `roll` returned last time is its caller's no more: the next interval reuses it.
        self.current = self._spare.reset(now_s) if self._spare is not None else IntervalLatency(start_s=now_s)
        self._spare = done
        return done

    def close(self) -> None:
        self.flush()
        if self.current.corrected.get_total_count():
            self.roll()
        for f in self._files:
            f.close()
