"""A running test's live statistics, posted to the data server about once a second, for its live
page and its Prometheus `/metrics` (reports/live.py).

Each peer's latest counters are passed on as the worker sent them (sent, received, errors by
kind, duplicates, lost so far, the last interval's latency and schedule lag, the generator's
CPU). The feed adds a point per second of the whole test: the send and receive rates over the
second and the worst receiver's latency. Posting runs in a thread of its own, so a slow or
absent data server never holds up the watch loop; points not yet posted go with the next post,
and nothing fails the test.

When the test ends, the last post carries the outcome and the exact counts of the summary, so
the counters a scraper last sees equal summary.json's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Protocol

from coordinator.registry import PeerInfo
from protocol.figures import TestFigures
from protocol.live import FinalCounts, LiveCounters, LivePeer, LivePoint, LiveUpdate
from protocol.notes import StatsReport

__all__ = ["LiveFeed", "LiveSink"]

log = logging.getLogger(__name__)

_POST_EVERY_S = 1.0


class LiveSink(Protocol):
    def post_live(self, test_id: str, update: LiveUpdate) -> str | None:
        """Send one update; raises OSError when it could not. Returns why the test is to stop
        when someone asked the data server to stop it (the live page's button), else None."""
        ...


@dataclass
class _Totals:
    elapsed_s: float
    sent: int
    received: int


@dataclass
class LiveFeed:
    sink: LiveSink
    test_id: str
    name: str
    kind: str
    expected_s: float | None
    peers: list[PeerInfo]
    workload: str = ""  # the test as it runs, in a line (coordinator.definitions.workload)
    workload_labels: dict[str, str] = field(default_factory=dict)  # its parts, /metrics' labels
    target_rate: float = 0.0  # msg/s in all; 0: unbounded, or a closed system
    size_bytes: float = 0.0  # a message's mean, for MB/s beside msg/s
    started_s: float = field(default_factory=time.time)
    _counters: dict[str, tuple[LiveCounters, float]] = field(default_factory=dict)  # by peer id, with elapsed_s
    _states: dict[str, str] = field(default_factory=dict)
    _points: list[LivePoint] = field(default_factory=list)  # not posted yet
    _last: _Totals | None = None
    _next_post: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _final: tuple[str, str | None, FinalCounts] | None = None  # outcome, reason, the summary's counts
    _thread: threading.Thread | None = None
    _warned: bool = False
    stop_asked: str | None = None  # the data server's answer: why the test is to stop

    def start(self) -> None:
        self._thread = threading.Thread(target=self._post_loop, name=f"live-{self.test_id}", daemon=True)
        self._thread.start()

    def feed(self, report: StatsReport) -> None:
        try:
            counters = LiveCounters.from_json(report.counters)
        except ValueError as exc:
            log.debug("live statistics of %s not shown: %s", report.header.sender_name, exc)
            return
        with self._lock:
            self._counters[report.header.sender_id] = (counters, report.elapsed_s)

    def last_said(self, peer_ids: Iterable[str], label: Callable[[str], str]) -> str:
        """What the senders among `peer_ids` last reported: how many they had sent, how far
        behind their schedule and how busy they were, for a reason that says why they are late."""
        said = []
        with self._lock:
            for peer_id in sorted(peer_ids):
                counters = self._counters.get(peer_id)
                if counters is None or counters[0].sent is None:
                    continue
                c = counters[0]
                words = [f"{c.sent:,} sent"]
                if c.in_flight:
                    words.append(f"{c.in_flight:,} of them not yet settled by the SUT")
                if failed := {kind: n for kind, n in (c.errors or {}).items() if n}:
                    kinds = ", ".join(f"{n:,} {kind}" for kind, n in sorted(failed.items()))
                    words.append(f"{sum(failed.values()):,} failed ({kinds})")
                if c.lag_p99_us is not None:
                    words.append(f"last second's sends {c.lag_p99_us / 1e6:,.1f} s behind their schedule at p99")
                if c.cpu_percent is not None:
                    words.append(f"{c.cpu_percent:.0f} % of a core")
                said.append(f"{label(peer_id)}: {', '.join(words)}")
        return "; ".join(said)

    def mark(self, peer_ids: set[str], state: str) -> None:
        with self._lock:
            self._states |= dict.fromkeys(peer_ids, state)

    def tick(self, finished: set[str], lost: set[str]) -> None:
        """Called from the watch loop: a point per second, and a post."""
        now = time.time()
        if now < self._next_post:
            return
        self._next_post = now + _POST_EVERY_S
        self.mark(finished, "finished")
        self.mark(lost, "lost")
        with self._lock:
            self._add_point(now - self.started_s)
        self._wake.set()

    def end(self, outcome: str, reason: str | None, summary: TestFigures, lost: AbstractSet[str] = frozenset()) -> None:
        """The last update: the outcome and the summary's exact counts, every peer finished but
        the `lost` (a receiver read "running" on the page of an ended test); waits a little for it."""
        with self._lock:
            self._final = (outcome, reason, _final_counts(summary))
            self._states |= {p.peer_id: "lost" if p.peer_id in lost else "finished" for p in self.peers}
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # --- in the poster's thread ------------------------------------------------------------------

    def _post_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                update, points, final = self._update(), self._points, self._final
                self._points = []
            try:
                if stop := self.sink.post_live(self.test_id, replace(update, points=tuple(points))):
                    self.stop_asked = stop  # the phase's watch reads it within half a second
            except OSError as exc:
                with self._lock:
                    self._points = points + self._points  # with the next post
                if not self._warned:
                    log.warning("live statistics not posted to the data server (%s); the test goes on", exc)
                    self._warned = True
            if final is not None:
                return

    def _update(self) -> LiveUpdate:
        peers = []
        for p in self.peers:
            counters, elapsed_s = self._counters.get(p.peer_id, (LiveCounters(), None))
            state = self._states.get(p.peer_id, "starting")
            peers.append(LivePeer(p.name, p.role.value, p.host, state, counters, elapsed_s))
        update = LiveUpdate(
            test_id=self.test_id,
            name=self.name,
            kind=self.kind,
            workload=self.workload,
            workload_labels=self.workload_labels,
            target_rate=self.target_rate,
            size_bytes=self.size_bytes,
            started_s=self.started_s,
            elapsed_s=time.time() - self.started_s,
            expected_s=self.expected_s,
            peers=tuple(peers),
        )
        if self._final is not None:
            outcome, reason, counts = self._final
            update = replace(update, state="finished", outcome=outcome, reason=reason, summary=counts)
        return update

    def _add_point(self, elapsed_s: float) -> None:
        counters = [c for c, _ in self._counters.values()]
        totals = _Totals(
            elapsed_s,
            sum(c.sent for c in counters if c.sent is not None),
            sum(c.received for c in counters if c.received is not None),
        )
        last, self._last = self._last, totals
        if last is None or totals.elapsed_s <= last.elapsed_s:
            return
        span = totals.elapsed_s - last.elapsed_s
        self._points.append(
            LivePoint(
                elapsed_s=round(elapsed_s, 3),
                send_rate=(totals.sent - last.sent) / span,
                receive_rate=(totals.received - last.received) / span,
                # The worst receiver's figure over its last interval: an upper bound of the
                # merged percentile, which only the HDR logs give after the test.
                latency_p50_us=_worst(c.latency_p50_us for c in counters),
                latency_p99_us=_worst(c.latency_p99_us for c in counters),
                # A closed system's: the worst requester's response time likewise.
                response_p50_us=_worst(c.response_p50_us for c in counters),
                response_p99_us=_worst(c.response_p99_us for c in counters),
            )
        )


def _worst(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def _final_counts(summary: TestFigures) -> FinalCounts:
    peers = {
        row.name: {k: v for k in ("sent", "received", "replies", "timed_out") if (v := getattr(row, k)) is not None}
        for row in summary.peers
    }
    if summary.error is not None:
        return FinalCounts(peers=peers)
    return FinalCounts(summary.sent, summary.received, summary.lost, summary.duplicates, peers)
