"""The receiving side: N consumers, one latency recorder, sequence accounting per sender.

A replier (request/reply tests) is a receiver that answers: each request is counted as any
message is (its latency is the request leg, from its intended time), then, after the service
time, answered to its reply address with the request's header and the replier's stamps
(worker.payload). Requests are served side by side, each on its own timer: as many at once as
the consumers' prefetch lets in.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from protocol.fail import FailConditions
from protocol.hdr import counts_at_or_below, sum_of, value_at_percentile
from protocol.json_value import JsonObject
from protocol.live import LiveCounters
from protocol.options import Delay
from protocol.precise_timer import PreciseTimer
from protocol.ratefile import RateFileWriter
from protocol.results import SEQUENCES_FILE, ReceiverAccount, ReplierAccount, SenderDeliveries, write_sequences
from protocol.sequences import SequenceTracker, bitsets_of
from worker.drivers import driver_for_client
from worker.drivers.base import FIRST_CONNECT_S, Burst, Driver, DriverError, GroupShare, SendError, connect_within
from worker.heap import HeapHold
from worker.latency import IntervalLatency, LatencyRecorder
from worker.payload import HEADER_BYTES, HEADER_DTYPE, HEADER_LAYOUT, MAGIC, REPLY_STAMPS, headers_every, key_of
from worker.run import Watch

__all__ = ["ReceiverPlan", "ReceiverRun"]

log = logging.getLogger(__name__)

# A receiver whose clients share a consumer group waits, once each has had partitions, for the
# group to stop moving them (`ReceiverRun.settle_group`): a client that joins after the others
# has the broker take partitions away from those and hand them out again, and messages sent
# meanwhile wait in the broker, their latency reading the rebalance. tansu answers a join round
# after half the session timeout (3 s), so a group seen from here only in part (the rest is
# another receiver's) is still once nothing changed for longer than a round.
_GROUP_STEADY_S = 0.5  # the whole topic held: two of a child process's reports
_GROUP_QUIET_S = 4.0  # part of it held
_GROUP_SETTLE_S = 15.0  # at most

# A burst this large is read a column at a time (numpy); below it, numpy's fixed costs per call
# outweigh a few Python operations per message.
_COLUMNS_FROM = 32


@dataclass(frozen=True)
class ReceiverPlan:
    test_id: str
    urls: list[str]
    parallel_count: int
    processing_delay_s: float = 0.0
    duration_s: float | None = None  # stop by itself after this, once drained
    drain_idle_s: float = 2.0  # draining ends after this long without a message
    reconnect_budget_s: float = 60.0
    latency_shift_us: int = 0  # the clock correction its samples are recorded with (StartWorker)
    reply: bool = False  # a replier: answer each request
    service_time: Delay = field(default_factory=Delay)
    replier_key: int = 0  # key_of its peer id, stamped into each reply


@dataclass
class ReceiverStats:
    received: int = 0
    foreign: Counter[str] = field(default_factory=Counter)  # not ours: no header, short, other test
    last_message_mono: float = 0.0
    # Deliveries of a message already received, by the wall-clock second they arrived in: the
    # rate file holds first deliveries only, and the report places duplicates in fault windows.
    duplicates_per_s: Counter[int] = field(default_factory=Counter)
    replied: int = 0
    reply_errors: Counter[str] = field(default_factory=Counter)  # replies the SUT did not take


class ReceiverRun:
    """The receiving side's run: its clients consume, each message is accounted for by sender
    and sequence, its latency recorded; a replier answers requests too."""

    VERB: ClassVar[str] = "received"
    # A fail condition does not end a receiving run: it says so and goes on until drained, so
    # what is in flight is counted as received, not as lost.
    STOPS_WHEN_TRIPPED: ClassVar[bool] = False

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
        self._closed_skipped = 0  # skipped_by_sut of drivers closed already
        self._stop = asyncio.Event()
        self._driver_for = driver_for or functools.partial(driver_for_client, plan.urls, "receive_url")
        self._timer: PreciseTimer | None = None  # a replier's, for service times
        self._heap = HeapHold()  # frozen from start to close (worker.heap)
        self._service_rng = random.Random(3)
        self._answering: set[asyncio.Future[None]] = set()  # held until done: the loop keeps weak references
        self.clients = clients if clients is not None else range(plan.parallel_count)

    async def start(self, settle_group: bool = True) -> None:
        """Connect every consumer; returns once all of them are consuming, and, where they share
        a consumer group, once its partitions stopped moving (`settle_group`; a process that
        runs part of the clients leaves that to the one that sees them all)."""
        self._heap.hold()
        if self.plan.reply:
            self._timer = PreciseTimer(asyncio.get_running_loop())
        for client in self.clients:
            driver = self._driver_for(client)
            await connect_within(driver, FIRST_CONNECT_S)
            self._drivers.append(driver)  # connected: closed by close() whatever comes next
        # All clients subscribe at once: consumers of one group then join in the same round,
        # where one after the other each join was a rebalance of its own (3 s a round on tansu).
        outcomes = await asyncio.gather(*map(self._consume, self._drivers), return_exceptions=True)
        if failed := [outcome for outcome in outcomes if isinstance(outcome, BaseException)]:
            raise failed[0]
        if settle_group:
            await self.settle_group()

    async def _consume(self, driver: Driver) -> None:
        if self.plan.reply:
            driver.on_settled = self._reply_settled
            await driver.serve(functools.partial(self._on_requests, driver))
        else:
            await driver.receive(self._on_messages, self.plan.processing_delay_s)

    def group_share(self) -> GroupShare | None:
        """Its clients' shares of their consumer group, merged; None if they are in none."""
        shares = [share for driver in self._drivers if (share := driver.group_share()) is not None]
        return GroupShare.merged(shares) if shares else None

    async def settle_group(self) -> None:
        """Wait until the clients' consumer group holds still: the senders start after this, and
        no message of theirs should wait for a rebalance. Still means the clients hold every
        partition of the topic, none of them moving, for `_GROUP_STEADY_S` (a process that runs
        part of the clients tells its share every 0.25 s); or, in a group shared with consumers
        elsewhere (another receiver's), what they hold has not changed for `_GROUP_QUIET_S`."""
        started = changed = time.monotonic()
        last: GroupShare | None = None
        while (share := self.group_share()) is not None:
            now = time.monotonic()
            if share != last:
                last, changed = share, now
            quiet_s, whole = now - changed, share.covers_topic()
            if not share.rebalancing and quiet_s >= (_GROUP_STEADY_S if whole else _GROUP_QUIET_S):
                if not whole:
                    held = f"{len(share.owned)} of {share.partitions if share.partitions is not None else '?'}"
                    log.info("the consumer group is still; its partitions here: %s (the rest elsewhere)", held)
                return
            if now - started >= _GROUP_SETTLE_S:
                log.warning(
                    "the consumer group still moved partitions after %g s; going on (messages sent during a "
                    "rebalance wait in the broker, and their latency shows it)",
                    _GROUP_SETTLE_S,
                )
                return
            await asyncio.sleep(0.05)

    def _on_requests(self, driver: Driver, batch: list[tuple[bytes, int, Any]]) -> None:
        """Requests are counted as messages are, then each answered after its service time."""
        self._on_messages([(body, arrived) for body, arrived, _ in batch])
        service = self.plan.service_time
        for body, arrived, address in batch:
            if len(body) < HEADER_BYTES or body[:4] != MAGIC:
                continue  # counted foreign: nobody waits for its answer
            delay_s = service.sample_s(self._service_rng)
            if delay_s:
                task = asyncio.ensure_future(self._answer_later(driver, body, arrived, address, delay_s))
                self._answering.add(task)
                task.add_done_callback(self._answering.discard)
            else:
                self._answer(driver, body, arrived, address)

    async def _answer_later(self, driver: Driver, body: bytes, arrived: int, address: Any, delay_s: float) -> None:
        # The service time runs from the arrival, by the precise timer (the loop's own wakes 1-2 ms late).
        assert self._timer is not None
        due = time.perf_counter_ns() + int(delay_s * 1e9) - (time.time_ns() - arrived)
        await self._timer.sleep_until(due)
        self._answer(driver, body, arrived, address)

    def _answer(self, driver: Driver, body: bytes, arrived: int, address: Any) -> None:
        reply = body[:HEADER_BYTES] + REPLY_STAMPS.pack(self.plan.replier_key, arrived, time.time_ns())
        try:
            driver.reply(address, reply, 0)
        except SendError as exc:
            self.stats.reply_errors[exc.kind] += 1
            return
        except DriverError:  # the connection is down: the requester times this one out
            self.stats.reply_errors["disconnected"] += 1
            return
        self.stats.replied += 1

    def _reply_settled(self, count: int, error: SendError | None) -> None:
        if error is not None:
            self.stats.reply_errors[error.kind] += count

    def _on_messages(self, batch: Sequence[tuple[bytes, int]]) -> None:
        """A burst of messages from one client: the hot path. A large burst (Kafka's consume,
        a backlog) is read a column at a time; a small one, a few operations per message."""
        if len(batch) >= _COLUMNS_FROM:
            self._on_columns(batch)
            return
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

    def _on_columns(self, batch: Sequence[tuple[bytes, int]]) -> None:
        """`_on_messages` for a large burst: the headers side by side in one numpy record array,
        the sequence bits set per sender, latencies and rate rows as columns. The same counts,
        bits, samples and rows as the message-by-message path (tests/unit/worker)."""
        stats = self.stats
        read = self._headers(batch)
        if read is None:
            return
        heads, arrived = read
        ours = heads["magic"] == MAGIC
        clean = bool(ours.all())
        if not clean:
            stats.foreign["no_header"] += int((~ours).sum())
        other = ours & (heads["test"] != self.test_key)
        if other.any():
            clean = False
            stats.foreign["other_test"] += int(other.sum())
            ours &= ~other
        senders, sequences = heads["sender"], heads["sequence"].astype(np.int64)
        if clean and bool((senders == senders[0]).all()):
            # The usual burst, all of it one sender's: no masks to make and apply.
            first = self._tracker(int(senders[0])).record_many(sequences)
        else:
            first = np.zeros(len(heads), dtype=bool)
            keys = senders[ours]
            for key in np.unique(keys).tolist():
                mine = ours & (senders == key)
                first[mine] = self._tracker(key).record_many(sequences[mine])
        intended, sent = heads["intended"], heads["sent"]
        if not first.all():
            again = ours & ~first
            if again.any():
                stats.duplicates_per_s.update(Counter((arrived[again] // 1_000_000_000).tolist()))
            arrived, intended, sent = arrived[first], intended[first], sent[first]
        intended, sent = intended.astype(np.int64), sent.astype(np.int64)
        self.latency.record_many((arrived - intended) // 1000, (arrived - sent) // 1000)
        self.rate_file.write_many(intended // 1000, arrived // 1000)
        stats.received += len(arrived)
        stats.last_message_mono = time.monotonic()

    def _headers(self, batch: Sequence[tuple[bytes, int]]) -> tuple[np.ndarray, np.ndarray] | None:
        """A burst's headers as one record array, and its arrival times (ns); bodies too short
        for a header counted foreign and left out (None if nothing is left)."""
        stats = self.stats
        stamps: list[int] | None = None  # None: all stamped at once (a Burst)
        if isinstance(batch, Burst):
            bodies = batch.bodies
        else:
            # Not zip(*batch): its iterator per message sets off a garbage collection every 700.
            bodies = [body for body, _ in batch]
            stamps = [stamp for _, stamp in batch]
        sizes = set(map(len, bodies))  # one pass in C: 24 µs for 1,000 bodies, a list and its min and max 45
        if len(sizes) == 1 and (size := sizes.pop()) >= HEADER_BYTES:
            # One size, as a fixed-size sender's: the headers are read in place.
            heads = np.frombuffer(b"".join(bodies), dtype=headers_every(size))
        else:
            whole = [i for i, body in enumerate(bodies) if len(body) >= HEADER_BYTES]
            stats.foreign["no_header"] += len(bodies) - len(whole)
            if not whole:
                return None
            if len(whole) < len(bodies):
                bodies = [bodies[i] for i in whole]
                stamps = None if stamps is None else [stamps[i] for i in whole]
            heads = np.frombuffer(b"".join([body[:HEADER_BYTES] for body in bodies]), dtype=HEADER_DTYPE)
        if stamps is None:
            assert isinstance(batch, Burst)
            arrived = np.full(len(bodies), batch.arrived_ns, dtype=np.int64)
        else:
            arrived = np.array(stamps, dtype=np.int64)
        return heads, arrived

    def _tracker(self, sender_key: int) -> SequenceTracker:
        tracker = self.trackers.get(sender_key)
        if tracker is None:
            tracker = self.trackers[sender_key] = SequenceTracker()
        return tracker

    def reconnects_ns(self) -> list[int]:
        """When its clients' libraries reconnected by themselves (wall clock, ns)."""
        return sorted(self._closed_reconnects_ns + [t for driver in self._drivers for t in driver.reconnects_ns])

    def skipped_by_sut(self) -> int:
        """Messages its clients never got because the SUT passed them over (Driver.skipped_by_sut)."""
        return self._closed_skipped + sum(driver.skipped_by_sut for driver in self._drivers)

    async def run(self) -> None:
        """Receive until stopped, or until the duration passed and the queue ran dry."""
        started = time.monotonic()
        while not self._stop.is_set():
            await asyncio.sleep(0.1)
            if self.plan.duration_s is not None and time.monotonic() - started >= self.plan.duration_s:
                await self.drain(self.plan.drain_idle_s, timeout_s=60)
                break

    async def drain(self, idle_s: float, timeout_s: float) -> bool:
        """Keep receiving until nothing came for `idle_s`; False if `timeout_s` passed first. A
        receiver that has had nothing yet waits `idle_s` from now: what was sent may still be on
        its way (a backlog, a slow path), and ending at once counted all of it lost."""
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            last = self.stats.last_message_mono or started
            if time.monotonic() - last >= idle_s:
                return True
            await asyncio.sleep(0.05)
        return False

    def why_undrained(self, timeout_s: float) -> str:
        """What kept a drain from ending within `timeout_s`."""
        share = self.group_share()
        if share is not None and share.rebalancing:
            # Its clients hand over empty batches meanwhile (nothing is idle in a rebalance).
            return (
                f"its consumer group was still rebalancing after {timeout_s:g} s: the broker had not "
                "assigned the partitions again, so what they hold could not be read"
            )
        return f"still receiving after {timeout_s:g} s"

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
        return [*names, "receiver-latency.hlog", "receiver-service-latency.hlog", SEQUENCES_FILE]

    async def close(self) -> None:
        self._heap.release()  # first: a close that fails must not leave the daemon's heap frozen
        if self._answering:  # answers still in their service time go out before the clients close
            await asyncio.wait(self._answering, timeout=5 + self.plan.service_time.mean_s * 10)
        if self._timer is not None:
            self._timer.close()
        for driver in self._drivers:
            self._closed_reconnects_ns += driver.reconnects_ns
            await driver.close()
            self._closed_skipped += driver.skipped_by_sut
        self._drivers.clear()
        self.rate_file.close()
        self.latency.close()
        if self.latency.directory is not None:  # else a parent process writes it, merged
            write_sequences(self.latency.directory, bitsets_of(self.trackers))

    # --- the Run surface ----------------------------------------------------------------------

    def count(self) -> int:
        return self.stats.received

    def start_at_ns(self) -> int:
        return 0

    def idle_on_purpose(self) -> bool:
        # A paused receiver is idle on purpose: its stall clock starts again when it resumes.
        return self.paused

    def verdict(self, conditions: FailConditions, watch: Watch, now: float) -> str | None:
        """The corrected latency of the interval just closed. A replier's is a request's leg to
        it: its requesters judge the response time, the figure a closed system is read by."""
        if self.last_interval is None or self.plan.reply or watch.interval_in_warm_up:
            return None
        return conditions.latency(self.last_interval.corrected)

    def account(self) -> ReceiverAccount:
        stats = self.stats
        return ReceiverAccount(
            received=stats.received,
            foreign=dict(stats.foreign),
            latency_clamped=self.latency.clamped,
            # What the samples in the latency logs were moved by as they were recorded: the
            # reports correct the rest of the way (protocol.clock_correction).
            latency_shift_us=self.latency.shift_us,
            per_sender=self.per_sender(),
            duplicates_per_s={str(s): n for s, n in sorted(stats.duplicates_per_s.items())},
            reconnects_ns=tuple(self.reconnects_ns()),
            skipped_by_sut=self.skipped_by_sut(),
            replier=ReplierAccount(stats.replied, dict(stats.reply_errors)) if self.plan.reply else None,
        )

    def counters(self) -> JsonObject:
        return {"received": self.stats.received, "foreign": dict(self.stats.foreign)}

    def per_sender(self) -> dict[str, SenderDeliveries]:
        out = {}
        for key, tracker in self.trackers.items():
            counts = tracker.counts()
            out[f"{key:016x}"] = SenderDeliveries(
                received=counts.received,
                deliveries=counts.received + counts.duplicates,
                duplicates=counts.duplicates,
                out_of_order=counts.out_of_order,
                highest_sequence=counts.highest,
                missing_below_highest=counts.missing(),
            )
        return out

    def interval_report(self) -> LiveCounters:
        self.rate_file.flush()
        interval = self.last_interval = self.latency.roll()
        corrected = interval.corrected  # recorded with the clock correction (LatencyRecorder)
        total = self.latency.total_corrected
        arrived = corrected.get_total_count() > 0  # an interval with no message has no latency, not 0
        return LiveCounters(
            received=self.stats.received,
            foreign=dict(self.stats.foreign),
            duplicates=sum(t.counts().duplicates for t in self.trackers.values()),
            # Lost so far, as this receiver sees it: gaps below the highest sequence number of
            # each sender. Exact when one receiver takes a sender's whole stream; the merged
            # count at the end is the test's figure.
            missing=sum(t.counts().missing() for t in self.trackers.values()),
            latency_p50_us=value_at_percentile(corrected, 50) if arrived else None,
            latency_p99_us=value_at_percentile(corrected, 99) if arrived else None,
            latency_max_us=corrected.get_max_value() if arrived else None,
            # Since the run began, for /metrics' histogram (reports/metrics.py): at or below each
            # of protocol.hdr.BUCKET_BOUNDS_US, how many, and their sum.
            latency_le_us=tuple(counts_at_or_below(total)),
            latency_count=total.get_total_count(),
            latency_sum_us=sum_of(total),
        )
