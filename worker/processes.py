"""Senders and receivers across several processes, for when one core cannot keep up.

The plan's clients are split over child processes (spawned: the parent runs threads for MQTT
and drivers, which a fork would copy half-way). All share one timebase, so intended times and
timestamps line up; each child writes its own rate files (`sender-p<k>-*.csv.gz`) and sends
its counters and schedule-lag histogram to the parent once a second and when it ends. The
parent offers the same surface as a one-process `SenderRun`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import multiprocessing
import multiprocessing.synchronize
import queue
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from protocol.failures import describe
from protocol.hdr import clear, new_histogram
from protocol.live import LiveCounters
from protocol.ratefile import RateFileWriter
from protocol.results import SEQUENCES_FILE, ReceiverAccount, SendCounts, SenderDeliveries, write_sequences
from protocol.sequences import union_bitsets
from worker.drivers.base import DriverError, GroupShare
from worker.latency import LatencyRecorder
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import ScheduledSending, SenderPlan, SenderRun, SenderStats, interval_report, sender_key
from worker.timebase import Timebase

__all__ = ["MultiProcessReceiver", "MultiProcessSender", "split_clients"]

_REPORT_EVERY_S = 1.0
_CONTEXT = multiprocessing.get_context("spawn")


def split_clients(parallel_count: int, processes: int) -> list[range]:
    """Clients 0..n-1 in `processes` contiguous, near-equal ranges (none empty)."""
    processes = max(1, min(processes, parallel_count))
    share, extra = divmod(parallel_count, processes)
    ranges, start = [], 0
    for k in range(processes):
        size = share + (1 if k < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


@dataclass(frozen=True)
class _ChildSpec:
    plan: SenderPlan
    clients: range
    part: int
    directory: Path
    labels: dict[str, str]
    timebase: Timebase


def _child_main(spec: _ChildSpec, reports: Any, stop: multiprocessing.synchronize.Event) -> None:
    asyncio.run(_child(spec, reports, stop))


async def _child(spec: _ChildSpec, reports: Any, stop: multiprocessing.synchronize.Event) -> None:
    rate_file = RateFileWriter(spec.directory, f"sender-p{spec.part}", spec.labels)
    run = SenderRun(spec.plan, rate_file, spec.timebase, spec.clients)
    task = asyncio.create_task(run.run())
    while not task.done():
        await asyncio.wait({task}, timeout=_REPORT_EVERY_S)
        if stop.is_set():
            run.stop()
        run.rate_file.flush()
        reports.put(_SenderReport(spec.part, _counts(run), run.stats.interval_lag_us.encode()))
        run.stats.fold()
    await run.close()
    reports.put(
        _SenderReport(spec.part, _counts(run), run.stats.lag_us.encode(), True, tuple(run.files()), run.failure)
    )


def _counts(run: SenderRun) -> SendCounts:
    s = run.stats
    return SendCounts(
        sent=s.sent,
        errors=dict(s.errors),
        retries=s.retries,
        per_client=dict(s.sent_per_client),
        disconnects_ns=tuple(s.disconnects_ns),
        reconnects_ns=tuple(s.reconnects_ns),
        intended_per_client=dict(s.intended_per_client),
        accepted_per_client=dict(s.accepted_per_client),
        in_flight=s.in_flight,
    )


@dataclass(frozen=True)
class _SenderReport:
    """A sender process's counters, with this interval's schedule lag (encoded HDR), or when
    `done` its whole run's, its files and its failure."""

    part: int
    counts: SendCounts
    lag: bytes
    done: bool = False
    files: tuple[str, ...] = ()
    failure: str | None = None


@dataclass
class _Child:
    counts: SendCounts = field(default_factory=SendCounts)
    files: tuple[str, ...] = ()
    failure: str | None = None
    done: bool = False


class MultiProcessSender(ScheduledSending):
    """The `SenderRun` surface (run, stop, stats, keys, files, close) over child processes."""

    def __init__(self, plan: SenderPlan, processes: int, directory: Path, labels: dict[str, str]) -> None:
        self.timebase = Timebase()
        keys = {c: sender_key(plan.test_id, plan.peer, c) for c in range(plan.parallel_count)}
        super().__init__(plan, SenderStats(), keys, self.timebase.wall0_ns)
        self.parts = split_clients(plan.parallel_count, processes)
        self._directory = directory
        self._labels = labels
        self._reports = _CONTEXT.Queue()
        self._stop = _CONTEXT.Event()
        self._children = {k: _Child() for k in range(len(self.parts))}
        self._procs: list[Any] = []
        self._live_lag = new_histogram()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        for part, clients in enumerate(self.parts):
            spec = _ChildSpec(self.plan, clients, part, self._directory, self._labels, self.timebase)
            proc = _CONTEXT.Process(target=_child_main, args=(spec, self._reports, self._stop), daemon=True)
            proc.start()
            self._procs.append(proc)
        while not all(child.done for child in self._children.values()):
            self._drain_reports()
            dead = [k for k, p in enumerate(self._procs) if not p.is_alive() and not self._children[k].done]
            if dead:
                await asyncio.sleep(0.5)  # its last report may still be in the pipe
                self._drain_reports()
                for k in dead:
                    if not self._children[k].done:
                        self._children[k].done = True
                        self._children[k].failure = f"sender process {k} died (exit code {self._procs[k].exitcode})"
            await asyncio.sleep(0.05)
        failures = [c.failure for c in self._children.values() if c.failure]
        self.failure = "; ".join(failures) if failures else None

    def _drain_reports(self) -> None:
        while True:
            try:
                report = self._reports.get_nowait()
            except queue.Empty:
                return
            child = self._children[report.part]
            child.counts = report.counts
            lag = HdrHistogram.decode(report.lag)
            if not report.done:
                self._live_lag.add(lag)  # for the live reports only
            else:
                # The child's whole-run histogram: the only way into the run's total, so no
                # message is counted twice.
                self.stats.interval_lag_us.add(lag)
                self.stats.fold()
                child.files, child.failure, child.done = report.files, report.failure, True
            self._sum_counts()

    def _sum_counts(self) -> None:
        stats = self.stats
        total = functools.reduce(SendCounts.merge, (c.counts for c in self._children.values()), SendCounts())
        stats.sent, stats.retries = total.sent, total.retries
        stats.errors, stats.sent_per_client = Counter(total.errors), Counter(total.per_client)
        stats.disconnects_ns, stats.reconnects_ns = list(total.disconnects_ns), list(total.reconnects_ns)
        stats.intended_per_client = dict(total.intended_per_client)
        stats.accepted_per_client = dict(total.accepted_per_client)
        stats.in_flight = total.in_flight

    def interval_report(self) -> LiveCounters:
        self._drain_reports()
        report = replace(interval_report(self.stats, self._live_lag), processes=len(self.parts))
        clear(self._live_lag)
        return report

    def files(self) -> list[str]:
        return sorted(name for child in self._children.values() for name in child.files)

    async def close(self) -> None:
        self._stop.set()
        for proc in self._procs:
            await asyncio.to_thread(proc.join, 10)
            if proc.is_alive():
                proc.kill()
        with contextlib.suppress(Exception):
            self._reports.close()


# --- receivers ---------------------------------------------------------------------------------

_RECEIVER_REPORT_EVERY_S = 0.25  # counters (drain watches the last arrival); latency once a second


@dataclass(frozen=True)
class _ReceiverChildSpec:
    plan: ReceiverPlan
    clients: range
    part: int
    directory: Path
    labels: dict[str, str]


def _receiver_child_main(spec: _ReceiverChildSpec, reports: Any, stop: multiprocessing.synchronize.Event) -> None:
    asyncio.run(_receiver_child(spec, reports, stop))


@dataclass(frozen=True)
class _ReceiverReport:
    """A receiver process's news: `ready` (consuming; its group share), `failed` (why), or its
    account so far (`interval`: with its last second's latency, encoded HDR, when one closed;
    `done`: its sequence bitsets too)."""

    kind: str
    part: int
    account: ReceiverAccount | None = None
    last_message_mono: float = 0.0
    group: GroupShare | None = None
    latency: tuple[bytes, bytes] | None = None
    failure: str = ""
    bitsets: Mapping[str, bytes] = field(default_factory=dict)
    files: tuple[str, ...] = ()


def _receiver_report(kind: str, part: int, run: ReceiverRun, latency: tuple[bytes, bytes] | None) -> _ReceiverReport:
    return _ReceiverReport(kind, part, run.account(), run.stats.last_message_mono, run.group_share(), latency)


async def _receiver_child(spec: _ReceiverChildSpec, reports: Any, stop: multiprocessing.synchronize.Event) -> None:
    rate_file = RateFileWriter(spec.directory, f"receiver-p{spec.part}", spec.labels)
    # No logs of its own: its intervals go to the parent, which writes the one pair of logs.
    run = ReceiverRun(
        spec.plan, rate_file, LatencyRecorder(None, shift_us=spec.plan.latency_shift_us), clients=spec.clients
    )
    try:
        await run.start(settle_group=False)  # the parent waits for the whole group
    except Exception as exc:  # the parent names it and fails the start
        reports.put(_ReceiverReport("failed", spec.part, failure=describe(exc)))
        await run.close()
        return
    reports.put(_ReceiverReport("ready", spec.part, group=run.group_share()))
    last_roll = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(_RECEIVER_REPORT_EVERY_S)
        latency = None
        if time.monotonic() - last_roll >= 1.0:
            interval = run.latency.roll()
            latency = (interval.corrected.encode(), interval.service.encode())
            run.rate_file.flush()
            last_roll = time.monotonic()
        reports.put(_receiver_report("interval", spec.part, run, latency))
    last = run.latency.roll()
    await run.close()
    done = _receiver_report("done", spec.part, run, (last.corrected.encode(), last.service.encode()))
    bitsets = {f"{key:016x}": tracker.bitset for key, tracker in run.trackers.items()}
    reports.put(replace(done, bitsets=bitsets, files=tuple(run.rate_file.names())))


class MultiProcessReceiver(ReceiverRun):
    """A `ReceiverRun` whose clients run in child processes: each takes its share of the
    messages and writes its own rate files (`receiver-p<k>-*.csv.gz`); its counters, latency
    intervals and, at the end, its sequence bitsets come to this process, which writes the one
    pair of latency logs and the one `receiver-sequences.json`, merged (a message that reached
    two processes is a duplicate, as between two receivers)."""

    def __init__(self, plan: ReceiverPlan, processes: int, directory: Path, labels: dict[str, str]) -> None:
        super().__init__(
            plan,
            RateFileWriter(directory, "receiver", labels),
            LatencyRecorder(directory, shift_us=plan.latency_shift_us),
        )
        self.parts = split_clients(plan.parallel_count, processes)
        self._directory = directory
        self._labels = labels
        self._reports = _CONTEXT.Queue()
        self._children_stop = _CONTEXT.Event()
        self._procs: list[Any] = []
        self._accounts: dict[int, ReceiverAccount] = {}  # each child's, as last told
        self._done: dict[int, _ReceiverReport] = {}
        self._ready: set[int] = set()
        self._groups: dict[int, GroupShare | None] = {}  # each child's clients' share, as last told
        self._last_message_mono: dict[int, float] = {}
        self._child_failures: dict[int, str] = {}
        self._pump_task: asyncio.Task[None] | None = None

    async def start(self, settle_group: bool = True) -> None:
        for part, clients in enumerate(self.parts):
            spec = _ReceiverChildSpec(self.plan, clients, part, self._directory, self._labels)
            args = (spec, self._reports, self._children_stop)
            proc = _CONTEXT.Process(target=_receiver_child_main, args=args, daemon=True)
            proc.start()
            self._procs.append(proc)
        deadline = time.monotonic() + self.plan.reconnect_budget_s + 30
        while len(self._ready) + len(self._child_failures) < len(self.parts):
            self._drain_reports()
            dead = [k for k, p in enumerate(self._procs) if not p.is_alive() and k not in self._ready]
            if dead or time.monotonic() > deadline:
                self._drain_reports()
                break
            await asyncio.sleep(0.05)
        if len(self._ready) < len(self.parts):
            why = "; ".join(self._child_failures.values()) or "a receiver process did not start"
            await self.close()
            raise DriverError(why, retry=False)
        if settle_group:
            await self.settle_group()
        self._pump_task = asyncio.create_task(self._pump())

    def group_share(self) -> GroupShare | None:
        """The children's clients' shares of their group, as each last told (every 0.25 s)."""
        self._drain_reports()
        shares = [share for share in self._groups.values() if share is not None]
        return GroupShare.merged(shares) if shares else None

    async def _pump(self) -> None:
        while True:
            self._drain_reports()
            await asyncio.sleep(0.05)

    def _drain_reports(self) -> None:
        while True:
            try:
                report = self._reports.get_nowait()
            except queue.Empty:
                break
            match report.kind:
                case "ready":
                    self._ready.add(report.part)
                    self._groups[report.part] = report.group
                case "failed":
                    self._child_failures[report.part] = report.failure
                case "interval" | "done":
                    self._take(report)
        self._sum()

    def _take(self, report: _ReceiverReport) -> None:
        assert report.account is not None
        self._accounts[report.part] = report.account
        self._groups[report.part] = report.group
        self._last_message_mono[report.part] = report.last_message_mono
        if report.latency is not None:
            current = self.latency.current
            current.corrected.add(HdrHistogram.decode(report.latency[0]))
            current.service.add(HdrHistogram.decode(report.latency[1]))
        if report.kind == "done":
            self._done[report.part] = report

    def _total(self) -> ReceiverAccount:
        """The children's accounts, merged (streams exact only with the bitsets: `per_sender`)."""
        return functools.reduce(ReceiverAccount.merge, self._accounts.values(), ReceiverAccount(received=0))

    def _sum(self) -> None:
        total, stats = self._total(), self.stats
        stats.received, stats.foreign = total.received, Counter(total.foreign)
        stats.last_message_mono = max(self._last_message_mono.values(), default=0.0)
        stats.duplicates_per_s = Counter({int(k): v for k, v in total.duplicates_per_s.items()})
        self.latency.clamped = total.latency_clamped

    async def pause(self) -> None:
        raise DriverError("a receiver in several processes cannot pause (processes=1 can)", retry=False)

    async def resume(self) -> None:
        raise DriverError("a receiver in several processes cannot resume (processes=1 can)", retry=False)

    def per_sender(self) -> dict[str, SenderDeliveries]:
        """Each sender's stream over all the processes; exact once they are done (the distinct
        count needs their bitsets), summed from their own counts before."""
        streams = dict(self._total().per_sender)
        for key, bitset in self._merged_bitsets().items():
            streams[key] = streams[key].exact(int.from_bytes(bitset, "little").bit_count())
        return streams

    def _merged_bitsets(self) -> dict[str, bytes]:
        by_key: dict[str, list[bytes]] = {}
        for report in self._done.values():
            for key, bitset in report.bitsets.items():
                by_key.setdefault(key, []).append(bitset)
        return {key: union_bitsets(parts) for key, parts in by_key.items()}

    def interval_report(self) -> LiveCounters:
        self._drain_reports()
        streams = self.per_sender().values()
        return replace(
            super().interval_report(),
            duplicates=sum(c.duplicates for c in streams),
            missing=sum(c.missing_below_highest for c in streams),
            processes=len(self.parts),
        )

    def reconnects_ns(self) -> list[int]:
        return sorted(t for report in self._done.values() if report.account for t in report.account.reconnects_ns)

    def skipped_by_sut(self) -> int:
        return self._total().skipped_by_sut

    def files(self) -> list[str]:
        children = sorted(name for report in self._done.values() for name in report.files)
        return [*children, "receiver-latency.hlog", "receiver-service-latency.hlog", SEQUENCES_FILE]

    async def close(self) -> None:
        self._children_stop.set()
        for proc in self._procs:
            await asyncio.to_thread(proc.join, 30)
            if proc.is_alive():
                proc.kill()
        if self._pump_task is not None:
            self._pump_task.cancel()
        self._drain_reports()
        self.rate_file.close()  # its own holds no rows: the children's files carry them
        self.latency.close()
        write_sequences(self._directory, self._merged_bitsets())
        with contextlib.suppress(Exception):
            self._reports.close()
