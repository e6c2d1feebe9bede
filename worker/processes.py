"""Senders across several processes, for when one core cannot keep up.

The plan's clients are split over child processes (spawned: the parent runs threads for MQTT
and drivers, which a fork would copy half-way). All share one timebase, so intended times and
timestamps line up; each child writes its own rate files (`sender-p<k>-*.csv.gz`) and sends
its counters and schedule-lag histogram to the parent once a second and when it ends. The
parent offers the same surface as a one-process `SenderRun`.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.synchronize
import queue
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from protocol.ratefile import RateFileWriter
from worker.sender import SenderPlan, SenderRun, SenderStats, interval_report, sender_key
from worker.timebase import Timebase

__all__ = ["MultiProcessSender", "split_clients"]

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


class MultiProcessSender:
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
        self._live_lag = HdrHistogram(1, 3_600_000_000, 3)

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
