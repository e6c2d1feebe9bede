"""One phase of a test: one run of load through the SUT under one test id.

SET → clocks (UDP probes, else PING) → START_TEST → receivers → inspectors and agents → senders
at one scheduled start → watch (progress, fail conditions, lost peers, Ctrl-C, the clocks every
2 s) → stop → drain → clocks again → collect (LOG: every peer uploads to the data server) →
figures → outcome, test.json and junit.xml in the result store. Whatever ends the phase, the peers are stopped
and what they wrote is collected.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from coordinator.bus.client import MaestroClient
from coordinator.definitions import FixedRateTest, workload, workload_labels
from coordinator.errors import MaestroError, PeerRequestError, note_interruption
from coordinator.outcome.results import TestResult, held, judge, now_iso, outages_between, peer_record, phase_record
from coordinator.outcome.storage import ResultStore
from coordinator.registry import ClockSample, PeerInfo
from coordinator.running.actions import Actions
from coordinator.running.cast import Cast
from coordinator.running.collection import collect
from coordinator.running.course import PhaseCourse
from coordinator.running.ending import Ending
from coordinator.running.live import LiveFeed
from coordinator.running.progress import Progress
from protocol.clock_correction import clock_corrections
from protocol.notes import (
    SetRequest,
    StartAgent,
    StartInspector,
    StartTest,
    StartWorker,
    StatsReport,
    TestFailed,
    TestSucceeded,
)
from protocol.options import mean_message_bytes
from protocol.test_record import PeerClock, PeerEntry
from protocol.testbed import testbed_record

__all__ = ["Phase"]

log = logging.getLogger(__name__)

# Senders get their START_WORKER this long before the common start, plus a few round trips.
_START_MARGIN_S = 1.0
# How long past its duration a sender may take to say it finished.
_FINISH_GRACE_S = 30.0
# The clocks are measured again this often while the load runs: drift is fitted, a step found.
_CLOCK_EVERY_S = 2.0


@dataclass
class Phase:
    """One run of load through the SUT, under one test id."""

    maestro: MaestroClient
    test: FixedRateTest
    test_id: str
    store: ResultStore
    cast: Cast
    show_progress: bool = True
    log_interval_s: float = 1.0  # between progress lines without a terminal
    clocks: dict[str, PeerClock] = field(default_factory=dict)  # peer id -> its clock so far
    collection: dict[str, str] = field(default_factory=dict)
    started_iso: str = ""
    ended_iso: str = ""
    load_start_s: float = 0.0  # wall time (s) of the senders' common start
    phase_of: str | None = None  # the test id of the series this phase is one step of
    repetition: int | None = None  # its number, where the series is a repeated test

    def __post_init__(self) -> None:
        self.actions = Actions.of(self.maestro, self.cast.agents, list(self.test.actions))
        t = self.test
        self.live = LiveFeed(
            self.store,
            self.test_id,
            t.name,
            t.KIND,
            t.expected_seconds(),
            self.cast.everyone,
            workload=workload(t),
            workload_labels=workload_labels(t),
            target_rate=t.target_rate(),
            size_bytes=mean_message_bytes(t.size) or 0.0,
        )
        self.course = PhaseCourse(self.test_id)  # what happened so far: failures, notes, who ended
        self.ending = Ending(self.maestro, self.cast, t.drain_timeout_s, self.course)
        # As the test starts: what it runs on, for a history to compare it with runs alike only.
        self.testbed = testbed_record(p.host for p in self.cast.everyone)

    def fail(self, reason: str) -> None:
        self.course.fail(reason)

    def run(self) -> TestResult:
        self.started_iso = now_iso()
        started = False
        self.live.start()
        try:
            self._prepare()
            started = True
            self._open()
            self._start()
            self.live.mark(self._ids(self.cast.everyone), "running")
            self._watch()
        except KeyboardInterrupt as exc:
            self.fail(note_interruption(exc))
        except MaestroError as exc:
            self.fail(str(exc))
        finally:
            # Each step on its own: a failure in one must not keep the peers running or their files.
            if started:
                self._guarded(self.ending.stop_and_drain)
                self._guarded(lambda: self._measure_clocks("after"))
            self._guarded(self._collect)
            self.ended_iso = now_iso()
        try:
            return self._finish()
        finally:
            # Nobody waits for what is left of this test now (a verdict that came too late).
            self.maestro.inbox.discard_test(self.test_id)

    def _guarded(self, step: Any) -> None:
        try:
            step()
        except KeyboardInterrupt as exc:
            self.fail(note_interruption(exc))
        except MaestroError as exc:
            self.fail(str(exc))

    # --- before -------------------------------------------------------------------------------

    def _ids(self, peers: list[PeerInfo]) -> set[str]:
        return {p.peer_id for p in peers}

    def _prepare(self) -> None:
        m, t = self.maestro, self.test
        common = {"test_id": self.test_id, "data_server_url": self.store.url}
        # Each request goes once to every peer it concerns (their role's topic where it can), all
        # the SETs at once. They name the test: from them on, orders are sealed for it and only
        # its notifications are taken (PeerBus._names_test, the one place that sets it).
        sets = []
        for flow, (senders, receivers) in zip(t.all_flows(), self.cast.flows, strict=True):
            sets.append((SetRequest(options=common | t.receiver_options(flow, self.test_id)), receivers))
            sets.append((SetRequest(options=common | t.sender_options(flow, self.test_id)), senders))
        inspection = {k: v for k, v in t.options.items() if k.startswith("inspector")}
        inspection["fail_inspector_errors"] = t.fail.inspector_errors
        watchers = [*self.cast.inspector_peers, *self.cast.agents]
        sets.append((SetRequest(options=common | {"labels": t.labels} | inspection), watchers))
        m.request_each(sets)
        self._measure_clocks("before")
        m.request_all(StartTest(test_id=self.test_id, name=t.name, labels=t.labels), self.cast.everyone)

    def _open(self) -> None:
        """test.json as the load is about to start: what runs, on which peers, with the clocks
        measured before. If the coordinator dies (kill -9), `maestro collect` completes it."""
        opening = phase_record(self.test, self.test_id, None, None)
        peers = tuple(self._record_of(p) for p in self.cast.everyone)
        self.store.open(
            self.test_id,
            replace(
                opening,
                started=self.started_iso,
                peers=peers,
                testbed=self.testbed,
                phase_of=self.phase_of,
                repetition=self.repetition,
            ),
        )

    def _measure_clocks(self, when: str) -> None:
        """Every peer's clock against ours `when`: "before" and "after" the load (directly, or
        through the broker for a peer out of reach), or "during" it (directly, and only the
        peers measured so before)."""
        peers = self.maestro.not_lost(self.cast.everyone)
        if when == "during":
            peers = [p for p in peers if p.peer_id in self.clocks and self.clocks[p.peer_id].path == "udp"]
        for peer in peers:
            peer.clock = None  # this measurement's samples only
        self.maestro.measure_clocks(peers, direct_only=when == "during")
        for peer in peers:
            clock = self.clocks.get(peer.peer_id, PeerClock(samples=()))
            if when == "before":
                clock = replace(clock, before=peer.clock_record())
            elif when == "after":
                clock = replace(clock, after=peer.clock_record())
            if peer.clock is not None:
                clock = _with_sample(clock, peer.clock)
            self.clocks[peer.peer_id] = clock

    def _start(self) -> None:
        m = self.maestro
        # A receiver whose senders all run on other hosts judges its latency bound on latency
        # corrected by the clocks measured before the load, by the rule the reports apply after.
        clocks = [replace(self._record_of(p), name=p.peer_id) for p in (*self.cast.senders, *self.cast.receivers)]
        shifts = {peer_id: round(c.shift_us) for peer_id, c in clock_corrections(clocks).items()}
        m.request_all(StartWorker(latency_shift_us=shifts), self.cast.receivers, timeout_s=60)  # OK once consuming
        for peer, name, url in self.cast.inspectors:
            m.request(StartInspector(inspector=name, url=url), to=peer)
        m.request_all(StartAgent(), self.cast.agents)
        senders = self.cast.senders
        worst_rtt_s = max(((p.clock.rtt_us if p.clock else 0) for p in senders), default=0) / 1e6
        # One request reaches every sender, so the margin does not grow with their number.
        start_at = time.time_ns() + int((_START_MARGIN_S + 4 * worst_rtt_s) * 1e9)
        self.load_start_s = start_at / 1e9
        # Each sender turns the common start into its own clock with its measured offset; a
        # requester corrects the legs of its requests by its repliers' (receivers') offsets too.
        offsets = {p.peer_id: p.correction_ns() for p in (*senders, *self.cast.receivers) if p.correction_ns()}
        try:
            m.request_all(StartWorker(start_at_ns=start_at, clock_offsets_ns=offsets), senders)
            self.course.started(self._ids(senders))
        except PeerRequestError as exc:
            self.course.started(exc.complied)
            raise
        self.course.note(f"senders start at {datetime.fromtimestamp(start_at / 1e9, UTC).isoformat()}")

    # --- during -------------------------------------------------------------------------------

    def _watch(self) -> None:
        m, t = self.maestro, self.test
        involved = self._ids(self.cast.everyone)
        pending = self._ids(self.cast.senders)
        expected = t.expected_seconds()
        deadline = None if expected is None else time.monotonic() + _START_MARGIN_S + expected + _FINISH_GRACE_S
        down_at_start = m.bus.downtime_s()  # a control-broker outage does not count against it
        closed = t.KIND == "request-reply"
        progress = Progress(expected, enabled=self.show_progress, interval_s=self.log_interval_s, closed=closed)
        m.live_stats.clear()
        next_clock = time.monotonic() + _CLOCK_EVERY_S
        while pending:
            if time.monotonic() >= next_clock:
                self._measure_clocks("during")
                next_clock = time.monotonic() + _CLOCK_EVERY_S
            for refusal in self.actions.fire_due(self.load_start_s, time.time()):
                self.fail(refusal)
            self.actions.take_events()
            note = m.next_notification((TestSucceeded, TestFailed), involved, timeout_s=0.5, test_id=self.test_id)
            while m.live_stats:
                report = m.live_stats.popleft()
                if isinstance(report, StatsReport) and report.test_id == self.test_id:
                    progress.feed(report)
                    self.live.feed(report)
            progress.show()
            if self.live.stop_asked:  # the live page's stop button, through the data server
                self.fail(self.live.stop_asked)
                break
            lost = m.lost_among(involved)
            self.live.tick(self.course.finished, {p.peer_id for p in lost})
            if lost:
                self.fail("peer lost: " + ", ".join(f"{p.label} ({m.lost_reason(p.peer_id)})" for p in lost))
                break
            if isinstance(note, TestFailed):
                # A receiver says so as soon as a condition trips, and keeps receiving until
                # drained; a sender's failure is its end.
                if note.header.sender_id in pending:
                    self.course.ended(note.header.sender_id)
                self.fail(f"{self.maestro.short_label(note.header.sender_id)}: {note.message}")
                break
            if isinstance(note, TestSucceeded):
                self.course.ended(note.header.sender_id)
                pending.discard(note.header.sender_id)
            if deadline is not None and time.monotonic() > deadline + m.bus.downtime_s() - down_at_start:
                late = self.live.last_said(pending, self.maestro.short_label)
                self.fail(
                    f"the senders did not finish within {expected:g} s + {_FINISH_GRACE_S:g} s"
                    + (f" ({late})" if late else "")
                )
                break
        reason = self.course.reason
        progress.done("senders done" if reason is None else f"stopping: {reason}")

    # --- after --------------------------------------------------------------------------------

    def _collect(self) -> None:
        collected = collect(self.maestro, self.cast.everyone, self.test_id, self.store.url)
        self.collection = collected.outcome
        for failure in collected.failures:
            self.fail(failure)

    # --- outcome ------------------------------------------------------------------------------

    def _record_of(self, p: PeerInfo) -> PeerEntry:
        return peer_record(p, self.clocks.get(p.peer_id, PeerClock()))

    def _finish(self) -> TestResult:
        self.actions.take_events()
        kept = {p.peer_id for p in self.maestro.not_lost(self.cast.everyone)}
        lost = {p.peer_id for p in self.cast.everyone} - kept  # as the record says them, and the live page
        peers = tuple(replace(self._record_of(p), lost=p.peer_id in lost) for p in self.cast.everyone)
        # With the clocks: the result, junit.xml and the loss verdict carry the latency the
        # report shows, corrected where senders and receivers run on different hosts.
        figures = self.store.summary(self.test_id, peers, self.actions.events)
        verdict = judge(figures, self.test)
        summary = figures.judged(verdict.latency_untrusted)
        if verdict.failure is not None:
            self.fail(verdict.failure)
        reason = self.course.reason
        outcome = "success" if reason is None else "failure"
        if verdict.invalid and outcome == "success":
            outcome, reason = "invalid", "; ".join(verdict.invalid)
        elif outcome == "success":
            reason = held(summary, self.test)
        record = replace(
            phase_record(self.test, self.test_id, outcome, reason),
            started=self.started_iso,
            ended=self.ended_iso,
            failed_at=self.course.failed_iso,
            peers=peers,
            testbed=self.testbed,
            collection=dict(self.collection),
            events=tuple(self.actions.events),
            notes=tuple(self.course.notes),
            control_outages=outages_between(self.maestro.bus.outages, self.started_iso, self.ended_iso),
            summary=summary,
            phase_of=self.phase_of,
            repetition=self.repetition,
        )
        result = TestResult(self.test_id, outcome, reason, summary, record, self.store.url)
        self.store.store(result, [result])
        self.live.end(outcome, reason, summary, lost)
        return result


def _with_sample(clock: PeerClock, sample: ClockSample) -> PeerClock:
    """A peer's clock record with one more sample ([when µs, offset µs, ± µs, path], as
    protocol.clock_correction fits them, weighted by their ±: one through the broker, a hundred
    times as wide as a direct one, still shows a step where the direct path was lost)."""
    return replace(
        clock,
        samples=(*(clock.samples or ()), sample.sample_row()),
        path=clock.path if clock.path == "udp" else sample.path,
    )
