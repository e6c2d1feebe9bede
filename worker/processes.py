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
import json
import multiprocessing
import multiprocessing.synchronize
import queue
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from protocol.failures import describe
from protocol.hdr import new_histogram
from protocol.ratefile import RateFileWriter
from protocol.sequences import encode_bitset, union_bitsets
from worker.drivers.base import DriverError, GroupShare
from worker.latency import LatencyRecorder
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.run import SendingAccount
from worker.sender import SenderPlan, SenderRun, SenderStats, interval_report, sender_key
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
        reports.put(("interval", spec.part, _counters(run), run.stats.interval_lag_us.encode()))
        run.stats.fold()
    await run.close()
    reports.put(("done", spec.part, _counters(run), run.stats.lag_us.encode(), run.files(), run.failure))


def _counters(run: SenderRun) -> dict[str, Any]:
    s = run.stats
    return {
        "sent": s.sent,
        "errors": dict(s.errors),
        "retries": s.retries,
        "per_client": dict(s.sent_per_client),
        "disconnects_ns": list(s.disconnects_ns),
        "reconnects_ns": list(s.reconnects_ns),
    }


@dataclass
class _Child:
    counters: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    failure: str | None = None
    done: bool = False


class MultiProcessSender(SendingAccount):
    """The `SenderRun` surface (run, stop, stats, keys, files, close) over child processes."""

    def __init__(self, plan: SenderPlan, processes: int, directory: Path, labels: dict[str, str]) -> None:
        self.plan = plan
        self.timebase = Timebase()
        self.parts = split_clients(plan.parallel_count, processes)
        self.keys = {c: sender_key(plan.test_id, plan.peer, c) for c in range(plan.parallel_count)}
        self.stats = SenderStats()
        self.failure: str | None = None
        self._directory = directory
        self._labels = labels
        self._reports = _CONTEXT.Queue()
        self._stop = _CONTEXT.Event()
        self._children = {k: _Child() for k in range(len(self.parts))}
        self._procs: list[Any] = []
        self._live_lag = new_histogram()

    @property
    def warm_up_end_ns(self) -> int:
        return max(self.timebase.wall0_ns, self.plan.start_at_ns) + int(self.plan.warm_up_s * 1e9)

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
            kind, part, counters, encoded_lag = report[:4]
            child = self._children[part]
            child.counters = counters
            lag = HdrHistogram.decode(encoded_lag)
            if kind == "interval":
                self._live_lag.add(lag)  # for the live reports only
            else:
                # The child's whole-run histogram: the only way into the run's total, so no
                # message is counted twice.
                self.stats.interval_lag_us.add(lag)
                self.stats.fold()
                child.files, child.failure, child.done = report[4], report[5], True
            self._sum_counters()

    def _sum_counters(self) -> None:
        stats = self.stats
        children = [c.counters for c in self._children.values() if c.counters]
        stats.sent = sum(c["sent"] for c in children)
        stats.retries = sum(c["retries"] for c in children)
        stats.errors = sum((Counter(c["errors"]) for c in children), Counter())
        per_client = (Counter({int(k): v for k, v in c["per_client"].items()}) for c in children)
        stats.sent_per_client = sum(per_client, Counter())
        stats.disconnects_ns = sorted(t for c in children for t in c.get("disconnects_ns", []))
        stats.reconnects_ns = sorted(t for c in children for t in c.get("reconnects_ns", []))

    def interval_report(self) -> dict[str, Any]:
        self._drain_reports()
        report = interval_report(self.stats, self._live_lag) | {"processes": len(self.parts)}
        self._live_lag.reset()
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


def _receiver_counters(run: ReceiverRun) -> dict[str, Any]:
    s = run.stats
    return {
        "received": s.received,
        "foreign": dict(s.foreign),
        "last_message_mono": s.last_message_mono,
        "duplicates_per_s": dict(s.duplicates_per_s),
        "per_sender": run.per_sender(),
        "clamped": run.latency.clamped,
        "skipped_by_sut": run.skipped_by_sut(),
        "group": run.group_share(),
    }


async def _receiver_child(spec: _ReceiverChildSpec, reports: Any, stop: multiprocessing.synchronize.Event) -> None:
    rate_file = RateFileWriter(spec.directory, f"receiver-p{spec.part}", spec.labels)
    # No logs of its own: its intervals go to the parent, which writes the one pair of logs.
    run = ReceiverRun(spec.plan, rate_file, LatencyRecorder(None), clients=spec.clients)
    try:
        await run.start(settle_group=False)  # the parent waits for the whole group
    except Exception as exc:  # the parent names it and fails the start
        reports.put(("failed", spec.part, describe(exc)))
        await run.close()
        return
    reports.put(("ready", spec.part, run.group_share()))
    last_roll = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(_RECEIVER_REPORT_EVERY_S)
        latency = None
        if time.monotonic() - last_roll >= 1.0:
            interval = run.latency.roll()
            latency = (interval.corrected.encode(), interval.service.encode())
            run.rate_file.flush()
            last_roll = time.monotonic()
        reports.put(("interval", spec.part, _receiver_counters(run), latency))
    last = run.latency.roll()
    await run.close()
    final = (_receiver_counters(run), (last.corrected.encode(), last.service.encode()))
    bitsets = {f"{key:016x}": tracker.bitset for key, tracker in run.trackers.items()}
    rate_files = run.rate_file.names()
    reports.put(("done", spec.part, *final, bitsets, rate_files, sorted(run.reconnects_ns())))


class MultiProcessReceiver(ReceiverRun):
    """A `ReceiverRun` whose clients run in child processes: each takes its share of the
    messages and writes its own rate files (`receiver-p<k>-*.csv.gz`); its counters, latency
    intervals and, at the end, its sequence bitsets come to this process, which writes the one
    pair of latency logs and the one `receiver-sequences.json`, merged (a message that reached
    two processes is a duplicate, as between two receivers)."""

    def __init__(self, plan: ReceiverPlan, processes: int, directory: Path, labels: dict[str, str]) -> None:
        super().__init__(plan, RateFileWriter(directory, "receiver", labels), LatencyRecorder(directory))
        self.parts = split_clients(plan.parallel_count, processes)
        self._directory = directory
        self._labels = labels
        self._reports = _CONTEXT.Queue()
        self._children_stop = _CONTEXT.Event()
        self._procs: list[Any] = []
        self._counters: dict[int, dict[str, Any]] = {}
        self._done: dict[int, tuple[Any, ...]] = {}
        self._ready: set[int] = set()
        self._groups: dict[int, GroupShare | None] = {}  # each child's clients' share, as last told
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
            kind, part = report[0], report[1]
            if kind == "ready":
                self._ready.add(part)
                self._groups[part] = report[2]
            elif kind == "failed":
                self._child_failures[part] = report[2]
            elif kind == "interval":
                self._take(part, report[2], report[3])
            elif kind == "done":
                self._take(part, report[2], report[3])
                self._done[part] = report
        self._sum()

    def _take(self, part: int, counters: dict[str, Any], latency: tuple[bytes, bytes] | None) -> None:
        self._counters[part] = counters
        self._groups[part] = counters["group"]
        if latency is not None:
            current = self.latency.current
            current.corrected.add(HdrHistogram.decode(latency[0]))
            current.service.add(HdrHistogram.decode(latency[1]))

    def _sum(self) -> None:
        children = list(self._counters.values())
        stats = self.stats
        stats.received = sum(c["received"] for c in children)
        stats.foreign = sum((Counter(c["foreign"]) for c in children), Counter())
        stats.last_message_mono = max((c["last_message_mono"] for c in children), default=0.0)
        duplicates = (Counter({int(k): v for k, v in c["duplicates_per_s"].items()}) for c in children)
        stats.duplicates_per_s = sum(duplicates, Counter())
        self.latency.clamped = sum(c["clamped"] for c in children)

    async def pause(self) -> None:
        raise DriverError("a receiver in several processes cannot pause (processes=1 can)", retry=False)

    async def resume(self) -> None:
        raise DriverError("a receiver in several processes cannot resume (processes=1 can)", retry=False)

    def per_sender(self) -> dict[str, dict[str, int]]:
        """Each sender's stream over all the processes; exact once they are done (the distinct
        count needs their bitsets), summed from their own counts before."""
        out: dict[str, dict[str, int]] = {}
        for counters in self._counters.values():
            for key, c in counters["per_sender"].items():
                mine = out.setdefault(key, dict.fromkeys(c, 0) | {"highest_sequence": -1})
                for name, value in c.items():
                    mine[name] = max(mine[name], value) if name == "highest_sequence" else mine[name] + value
        for key, bitset in self._merged_bitsets().items():
            mine = out[key]
            mine["received"] = int.from_bytes(bitset, "little").bit_count()
            mine["duplicates"] = mine["deliveries"] - mine["received"]
            mine["missing_below_highest"] = mine["highest_sequence"] + 1 - mine["received"]
        return out

    def _merged_bitsets(self) -> dict[str, bytes]:
        by_key: dict[str, list[bytes]] = {}
        for report in self._done.values():
            for key, bitset in report[4].items():
                by_key.setdefault(key, []).append(bitset)
        return {key: union_bitsets(parts) for key, parts in by_key.items()}

    def interval_report(self) -> dict[str, Any]:
        self._drain_reports()
        report = super().interval_report()
        streams = self.per_sender().values()
        report["duplicates"] = sum(c["duplicates"] for c in streams)
        report["missing"] = sum(c["missing_below_highest"] for c in streams)
        return report | {"processes": len(self.parts)}

    def reconnects_ns(self) -> list[int]:
        return sorted(t for report in self._done.values() for t in report[6])

    def skipped_by_sut(self) -> int:
        return sum(c.get("skipped_by_sut", 0) for c in self._counters.values())

    def files(self) -> list[str]:
        children = sorted(name for report in self._done.values() for name in report[5])
        return [*children, "receiver-latency.hlog", "receiver-service-latency.hlog", "receiver-sequences.json"]

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
        sequences = {key: encode_bitset(bits) for key, bits in self._merged_bitsets().items()}
        (self._directory / "receiver-sequences.json").write_text(json.dumps(sequences))
        with contextlib.suppress(Exception):
            self._reports.close()
