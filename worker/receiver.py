"""The receiving side: N consumers, one latency recorder, sequence accounting per sender."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.ratefile import RateFileWriter
from protocol.sequences import SequenceTracker, dump_bitsets
from worker.drivers import driver_for_client
from worker.drivers.base import FIRST_CONNECT_S, Driver, connect_within
from worker.latency import IntervalLatency, LatencyRecorder
from worker.payload import HEADER_LAYOUT, MAGIC, key_of
from worker.run import ReceivingAccount

__all__ = ["ReceiverPlan", "ReceiverRun"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReceiverPlan:
    test_id: str
    urls: list[str]
    parallel_count: int
    processing_delay_s: float = 0.0
    duration_s: float | None = None  # stop by itself after this, once drained
    drain_idle_s: float = 2.0  # draining ends after this long without a message
    reconnect_budget_s: float = 60.0
    latency_shift_us: int = 0  # the clock correction its bound and live figures use (StartWorker)


@dataclass
class ReceiverStats:
    received: int = 0
    foreign: Counter[str] = field(default_factory=Counter)  # not ours: no header, short, other test
    last_message_mono: float = 0.0
    # Deliveries of a message already received, by the wall-clock second they arrived in: the
    # rate file holds first deliveries only, and the report places duplicates in fault windows.
    duplicates_per_s: Counter[int] = field(default_factory=Counter)


class ReceiverRun(ReceivingAccount):
    def __init__(
        self,
        plan: ReceiverPlan,
        rate_file: RateFileWriter,
        latency: LatencyRecorder,
        driver_for: Callable[[int], Driver] | None = None,
        clients: range | None = None,
    ) -> None:
        """`driver_for(client)`: the driver a client receives with (by default from the plan's
        URLs; tests give an in-memory one). `clients`: the client numbers this process runs
        (all of them unless several processes share the plan)."""
        self.plan = plan
        self.rate_file = rate_file
        self.latency = latency
        self.stats = ReceiverStats()
        self.trackers: dict[int, SequenceTracker] = {}
        self.test_key = key_of(plan.test_id)
        self.failure: str | None = None
        self.paused = False
        self.last_interval: IntervalLatency | None = None  # what the last interval_report() closed
        self._drivers: list[Driver] = []
        self._closed_reconnects_ns: list[int] = []  # of drivers closed already
        self._stop = asyncio.Event()
        self._driver_for = driver_for or functools.partial(driver_for_client, plan.urls, "receive_url")
        self.clients = clients if clients is not None else range(plan.parallel_count)

    async def start(self) -> None:
        """Connect every consumer; returns once all of them are consuming."""
        for client in self.clients:
            driver = self._driver_for(client)
            await connect_within(driver, FIRST_CONNECT_S)
            await driver.receive(self._on_messages, self.plan.processing_delay_s)
            self._drivers.append(driver)

    def _on_messages(self, batch: list[tuple[bytes, int]]) -> None:
        """A burst of messages from one client: the hot path, a few operations per message."""
        stats, trackers, test_key = self.stats, self.trackers, self.test_key
        unpack, header_bytes = HEADER_LAYOUT.unpack_from, HEADER_LAYOUT.size
        record_latency, write_row = self.latency.record, self.rate_file.write
        received = 0
        for body, arrived_ns in batch:
            if len(body) < header_bytes:
                stats.foreign["no_header"] += 1
                continue
            magic, key, sender_key, sequence, intended_ns, sent_ns = unpack(body)
            if magic != MAGIC:
                stats.foreign["no_header"] += 1
                continue
            if key != test_key:
                stats.foreign["other_test"] += 1
                continue
            tracker = trackers.get(sender_key)
            if tracker is None:
                tracker = trackers[sender_key] = SequenceTracker()
            if tracker.record(sequence):
                received += 1
                record_latency((arrived_ns - intended_ns) // 1000, (arrived_ns - sent_ns) // 1000)
                write_row(intended_ns // 1000, arrived_ns // 1000)
            else:
                stats.duplicates_per_s[arrived_ns // 1_000_000_000] += 1
        stats.received += received
        stats.last_message_mono = time.monotonic()

    def reconnects_ns(self) -> list[int]:
        """When its clients' libraries reconnected by themselves (wall clock, ns)."""
        return sorted(self._closed_reconnects_ns + [t for driver in self._drivers for t in driver.reconnects_ns])

    async def run(self) -> None:
        """Receive until stopped, or until the duration passed and the queue ran dry."""
        started = time.monotonic()
        while not self._stop.is_set():
            await asyncio.sleep(0.1)
            if self.plan.duration_s is not None and time.monotonic() - started >= self.plan.duration_s:
                await self.drain(self.plan.drain_idle_s, timeout_s=60)
                break

    async def drain(self, idle_s: float, timeout_s: float) -> bool:
        """Keep receiving until nothing came for `idle_s`; False if `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            last = max(self.stats.last_message_mono, 0.0)
            if time.monotonic() - last >= idle_s:
                return True
            await asyncio.sleep(0.05)
        return False

    async def pause(self) -> None:
        for driver in self._drivers:
            await driver.pause()
        self.paused = True

    async def resume(self) -> None:
        for driver in self._drivers:
            await driver.resume()
        self.paused = False

    def stop(self) -> None:
        self._stop.set()

    def files(self) -> list[str]:
        names = self.rate_file.names()
        return [*names, "receiver-latency.hlog", "receiver-service-latency.hlog", "receiver-sequences.json"]

    async def close(self) -> None:
        for driver in self._drivers:
            self._closed_reconnects_ns += driver.reconnects_ns
            await driver.close()
        self._drivers.clear()
        self.rate_file.close()
        self.latency.close()
        if self.latency.directory is not None:  # else a parent process writes it, merged
            path = self.latency.directory / "receiver-sequences.json"
            path.write_text(json.dumps(dump_bitsets(self.trackers)))

    def per_sender(self) -> dict[str, dict[str, int]]:
        out = {}
        for key, tracker in self.trackers.items():
            counts = tracker.counts()
            out[f"{key:016x}"] = {
                "received": counts.received,
                "deliveries": counts.received + counts.duplicates,
                "duplicates": counts.duplicates,
                "out_of_order": counts.out_of_order,
                "highest_sequence": counts.highest,
                "missing_below_highest": counts.missing(),
            }
        return out

    def interval_report(self) -> dict[str, Any]:
        self.rate_file.flush()
        interval = self.last_interval = self.latency.roll()
        corrected, shift = interval.corrected, self.plan.latency_shift_us
        return {
            "received": self.stats.received,
            "foreign": dict(self.stats.foreign),
            "duplicates": sum(t.counts().duplicates for t in self.trackers.values()),
            "latency_p50_us": max(corrected.get_value_at_percentile(50) + shift, 0),
            "latency_p99_us": max(corrected.get_value_at_percentile(99) + shift, 0),
            "latency_max_us": max(corrected.get_max_value() + shift, 0),
        }
