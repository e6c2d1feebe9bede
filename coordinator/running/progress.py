"""Live progress of a running test in the terminal: elapsed/remaining with a bar, the send and
receive rates and the latest latency, from the workers' once-a-second statistics.

On a terminal one line is redrawn; otherwise (CI logs, a file) a line is printed every
`interval_s` (1 s: a run's log reads as PerfTest's does, a line a second to paste in a ticket).
No latency is shown before a receiver reported one, and the clock stops at the test's length.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from protocol.live import LiveCounters
from protocol.notes import StatsReport

__all__ = ["Progress"]

_BAR = 24


@dataclass
class _PeerRate:
    elapsed_s: float
    count: int
    rate: float = 0.0


@dataclass
class Progress:
    total_s: float | None  # None: bounded by a message count
    label: str = ""
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    enabled: bool = True
    interval_s: float = 1.0  # between lines without a terminal
    closed: bool = False  # a request/reply test: requests, replies and the response time
    _started: float = field(default_factory=time.monotonic)
    _senders: dict[str, _PeerRate] = field(default_factory=dict)
    _receivers: dict[str, _PeerRate] = field(default_factory=dict)
    _latency_p99_us: dict[str, float] = field(default_factory=dict)
    # A closed system's requesters: its figures are replies and the response time (the
    # receivers' latency is its request leg, which read as the test's "p99").
    _replies: dict[str, _PeerRate] = field(default_factory=dict)
    _timed_out: dict[str, int] = field(default_factory=dict)
    _response_p99_us: dict[str, float] = field(default_factory=dict)
    _last_line: float = 0.0
    _printed: str = ""  # the last line a log got

    def __post_init__(self) -> None:
        self._tty = self.stream.isatty()

    def feed(self, report: StatsReport) -> None:
        peer = report.header.sender_name
        try:
            counters = LiveCounters.from_json(report.counters)
        except ValueError:
            return  # a peer of another version: its line waits for its next report
        if counters.sent is not None:
            self._track(self._senders, peer, report.elapsed_s, counters.sent)
        if counters.replies is not None:
            self._track(self._replies, peer, report.elapsed_s, counters.replies)
            self._timed_out[peer] = counters.timed_out or 0
            if counters.response_p99_us:
                self._response_p99_us[peer] = counters.response_p99_us
        if counters.received is not None:
            self._track(self._receivers, peer, report.elapsed_s, counters.received)
            if counters.latency_p99_us:
                self._latency_p99_us[peer] = counters.latency_p99_us

    @staticmethod
    def _track(table: dict[str, _PeerRate], peer: str, elapsed_s: float, count: int) -> None:
        last = table.get(peer)
        if last is None:
            table[peer] = _PeerRate(elapsed_s, count)
            return
        if elapsed_s > last.elapsed_s:
            rate = (count - last.count) / (elapsed_s - last.elapsed_s)
            table[peer] = _PeerRate(elapsed_s, count, rate)

    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        if self.total_s:
            elapsed = min(elapsed, self.total_s)  # the drain after the load is not "7/6 s"
            filled = int(elapsed / self.total_s * _BAR)
            head = f"[{'#' * filled}{'.' * (_BAR - filled)}] {elapsed:5.0f}/{self.total_s:.0f} s"
        else:
            head = f"{elapsed:5.0f} s"
        sent = sum(p.count for p in self._senders.values())
        send_rate = sum(p.rate for p in self._senders.values())
        if self.closed or self._replies:
            replies, reply_rate = (
                sum(p.count for p in self._replies.values()),
                sum(p.rate for p in self._replies.values()),
            )
            response = max(self._response_p99_us.values(), default=None)
            return (
                f"{self.label}{head}  requests {sent:,} ({send_rate:,.0f}/s)  replies {replies:,} ({reply_rate:,.0f}/s)"
                f"  timed out {sum(self._timed_out.values()):,}"
                + (f"  response p99 {response / 1000:.2f} ms" if response else "")
            )
        received = sum(p.count for p in self._receivers.values())
        receive_rate = sum(p.rate for p in self._receivers.values())
        latency = f"  p99 {max(self._latency_p99_us.values()) / 1000:.2f} ms" if self._latency_p99_us else ""
        return (
            f"{self.label}{head}  sent {sent:,} ({send_rate:,.0f}/s)  received {received:,} ({receive_rate:,.0f}/s)"
            + latency
        )

    def show(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self._tty:
            self.stream.write("\r\x1b[K" + self.line())
            self.stream.flush()
        elif now - self._last_line >= self.interval_s:
            self._last_line = now
            self._printed = self.line()
            print(self._printed, file=self.stream, flush=True)

    def done(self, message: str) -> None:
        if not self.enabled:
            return
        if self._tty:
            self.stream.write("\r\x1b[K")
        if (last := self.line()) != self._printed:  # a log does not get the same line twice
            print(last, file=self.stream)
        print(message, file=self.stream, flush=True)
