"""The requesting side of a request/reply test: a closed system (seed 003).

Each client keeps at most `outstanding` requests waiting (default 1): it sends one, waits for
the reply or the timeout, thinks, and sends the next. No schedule sets the pace: the clients
are the load, and Little's law ties them to what comes out (clients x outstanding ≈ throughput
x (response time + think time)).

A request is counted sent once handed over, under its sequence number, as a sender's message
is: the repliers' bitsets tell which reached them. A reply that does not come within
`request_timeout_s` counts its request timed out, and nobody waits for it again; a reply that
comes after counts as late, a second one as a duplicate, one that is not ours as foreign.

Its rate file holds one row per request answered in time: the intended time and the reply's
arrival, so the figures' rate by whole seconds is the closed system's throughput.

Response time runs from the request's intended time (when its client was ready to send it) to
the reply's arrival, on this host's clock. The legs come from the replier's stamps: request
leg (sent -> received by the replier), replier time (received -> replied, one clock) and reply
leg (replied -> arrived). The two legs cross clocks: each is corrected by the offsets the
coordinator measured for this peer and the replier (StartWorker.clock_offsets_ns).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from protocol.concurrency import wait_event
from protocol.fail import FailConditions
from protocol.hdr import counts_at_or_below, sum_of, value_at_percentile
from protocol.json_value import JsonObject
from protocol.live import LiveCounters
from protocol.options import Delay, Duration, MessageSize
from protocol.precise_timer import PreciseTimer
from protocol.ratefile import RateFileWriter
from protocol.results import RequestReplyAccount, SenderAccount
from protocol.sequences import SequenceTracker
from worker.drivers import driver_for_client
from worker.drivers.base import (
    FIRST_CONNECT_S,
    DisconnectedError,
    Driver,
    DriverError,
    SendError,
    connect_within,
    retry_within,
)
from worker.latency import IntervalLatency, LatencyRecorder
from worker.payload import HEADER_BYTES, MAGIC, REPLY_BYTES, REPLY_LAYOUT, key_of, pack_header
from worker.run import SendingRun, Watch, run_clients
from worker.sender import sender_key

__all__ = ["REQUESTER_LOGS", "RequesterPlan", "RequesterRun", "RequesterStats"]

log = logging.getLogger(__name__)

# The requester's two recorders: response time with the replier's time, and the two legs.
REQUESTER_LOGS = (
    (("response", "requester-response.hlog"), ("replier", "requester-replier.hlog")),
    (("request leg", "requester-request-leg.hlog"), ("reply leg", "requester-reply-leg.hlog")),
)
_RETRY_PAUSE_S = 0.1  # between tries to hand a request to a client whose connection is down


@dataclass(frozen=True)
class RequesterPlan:
    test_id: str
    peer: str  # name@host: unique per test
    urls: list[str]
    parallel_count: int
    duration: Duration
    size: MessageSize
    outstanding: int = 1  # requests one client may wait on at once
    think_time: Delay = field(default_factory=Delay)
    request_timeout_s: float = 5.0
    warm_up_s: float = 0.0
    start_at_ns: int = 0
    reconnect_budget_s: float = 60.0
    # Each peer's clock minus the coordinator's, ns, by the peer's key (StartWorker), and ours:
    # a replier's stamps are off by the difference.
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)
    own_offset_ns: int = 0


@dataclass
class RequesterStats:
    sent: int = 0
    sent_per_client: Counter[int] = field(default_factory=Counter)
    replies: int = 0
    timed_out: int = 0
    late: int = 0  # replies that came after their request timed out
    duplicates: int = 0  # a second reply to a request
    foreign: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # requests the SUT did not take
    # After warm-up, from a reply's arrival to its turn's next request: the think time as lived,
    # the planned one plus the timer's lateness and the loop's hand-over.
    thought_ns: int = 0
    thoughts: int = 0
    disconnects_ns: list[int] = field(default_factory=list)
    reconnects_ns: list[int] = field(default_factory=list)
    skipped_by_sut: int = 0  # replies the SUT passed over (Driver.skipped_by_sut): they time out


class RequesterRun(SendingRun[RequesterPlan, RequesterStats]):
    """A closed system's requesting side: each client's `outstanding` turns request, wait for
    the reply, think, and go again. A sending run without a schedule to fall short of: its
    timeouts are judged at the end."""

    def __init__(
        self,
        plan: RequesterPlan,
        rate_file: RateFileWriter,
        directory: Path | None,
        driver_for: Callable[[int], Driver] | None = None,
    ) -> None:
        keys = {client: sender_key(plan.test_id, plan.peer, client) for client in range(plan.parallel_count)}
        super().__init__(plan, RequesterStats(), keys, time.time_ns())
        self.rate_file = rate_file
        self.test_key = key_of(plan.test_id)
        (first, second) = REQUESTER_LOGS
        self.latency = LatencyRecorder(directory, logs=first)  # response, replier
        self.legs = LatencyRecorder(directory, logs=second)  # request leg, reply leg
        self._waiting: dict[tuple[int, int], asyncio.Future[int]] = {}  # resolved with the arrival
        self._replied: dict[int, SequenceTracker] = {}  # by sender key: requests answered
        self._given_up: set[tuple[int, int]] = set()  # timed out, no reply yet
        self._stop = asyncio.Event()
        self._driver_for = driver_for or functools.partial(driver_for_client, plan.urls, "send_url")
        self._filler = random.Random(0).randbytes(max(0, plan.size.max_bytes - HEADER_BYTES))
        self._timer: PreciseTimer | None = None
        self._think_rng = random.Random(2)
        self._size_rng = random.Random(3)  # a range of sizes is drawn from uniformly, as senders do
        self.last_interval: IntervalLatency | None = None  # what the last interval_report() closed

    # --- the clients ----------------------------------------------------------------------------

    async def run(self) -> None:
        self._timer = PreciseTimer(asyncio.get_running_loop())
        try:
            clients = [self._client(c) for c in range(self.plan.parallel_count)]
            self.failure = await run_clients(clients, "requester") or self.failure
        finally:
            self._timer.close()
            self.rate_file.flush()

    async def _client(self, client: int) -> None:
        driver = self._driver_for(client)
        driver.on_settled = self._settled
        await connect_within(driver, FIRST_CONNECT_S)
        try:
            await retry_within(lambda: driver.open_replies(self._on_replies), FIRST_CONNECT_S)
            await driver.start_sending()
            if self.plan.start_at_ns:
                await self._sleep_or_stop(max(0, self.plan.start_at_ns - time.time_ns()) / 1e9)
            started = time.perf_counter_ns()
            end_ns = None if self.plan.duration.seconds is None else started + int(self.plan.duration.seconds * 1e9)
            numbers = _Numbers(self.plan.duration.messages_for(client, self.plan.parallel_count))
            slots = [self._slot(client, driver, numbers, end_ns) for _ in range(self.plan.outstanding)]
            await asyncio.gather(*slots)
        finally:
            self.stats.reconnects_ns += driver.reconnects_ns
            await driver.close()
            self.stats.skipped_by_sut += driver.skipped_by_sut

    async def _slot(self, client: int, driver: Driver, numbers: _Numbers, end_ns: int | None) -> None:
        """One of a client's `outstanding` turns: request, wait, think, again."""
        key, plan = self.keys[client], self.plan
        loop = asyncio.get_running_loop()
        size, sizes = plan.size, self._size_rng
        answered_ns: int | None = None  # the arrival of this turn's last reply
        while not self._stop.is_set() and (end_ns is None or time.perf_counter_ns() < end_ns):
            sequence = numbers.take()
            if sequence is None:
                return
            size_bytes = size.min_bytes if size.fixed else sizes.randint(size.min_bytes, size.max_bytes)
            intended = time.time_ns()
            if answered_ns is not None and answered_ns >= self.warm_up_end_ns:
                self.stats.thought_ns += intended - answered_ns
                self.stats.thoughts += 1
            reply: asyncio.Future[int] = loop.create_future()
            self._waiting[(key, sequence)] = reply
            if not await self._hand_over(driver, key, sequence, intended, size_bytes):
                self._waiting.pop((key, sequence), None)
                return
            self.stats.sent_per_client[client] += 1
            answered_ns = None
            try:
                # Not asyncio.wait_for, which can lose this task's cancellation (see wait_event).
                async with asyncio.timeout(plan.request_timeout_s):
                    answered_ns = await reply
            except TimeoutError:
                self.stats.timed_out += 1
                self._given_up.add((key, sequence))
            finally:
                self._waiting.pop((key, sequence), None)
            think_s = plan.think_time.sample_s(self._think_rng)
            if think_s and self._timer is not None:
                # From the reply's arrival, not from this turn's wake-up after it: the hand-over
                # to the loop is part of the thinking, not added to it.
                since_ns = time.time_ns() - answered_ns if answered_ns is not None else 0
                await self._timer.sleep_until(time.perf_counter_ns() + int(think_s * 1e9) - max(0, since_ns))

    async def _hand_over(self, driver: Driver, key: int, sequence: int, intended: int, size_bytes: int) -> bool:
        """Send one request, trying again while the connection is down (within the budget)."""
        down_since: float | None = None
        while not self._stop.is_set():
            sent = time.time_ns()
            body = pack_header(self.test_key, key, sequence, intended, sent) + self._filler[: size_bytes - HEADER_BYTES]
            try:
                driver.request(body, 0, f"{key:016x}:{sequence}")
            except DisconnectedError as exc:
                now = time.monotonic()
                if down_since is None:
                    down_since = now
                    self.stats.disconnects_ns.append(time.time_ns())
                if now - down_since > self.plan.reconnect_budget_s:
                    budget = self.plan.reconnect_budget_s
                    raise DriverError(f"down for more than {budget:g} s: {exc}", retry=False) from exc
                await self._sleep_or_stop(_RETRY_PAUSE_S)
                continue
            except SendError as exc:
                self.stats.errors[exc.kind] += 1
            self.stats.sent += 1
            return True
        return False

    def _settled(self, count: int, error: SendError | None) -> None:
        if error is not None:
            self.stats.errors[error.kind] += count

    # --- the replies (the hot path) -----------------------------------------------------------

    def _on_replies(self, batch: Sequence[tuple[bytes, int]]) -> None:
        stats, waiting, unpack = self.stats, self._waiting, REPLY_LAYOUT.unpack_from
        offsets, own = self.plan.clock_offsets_ns, self.plan.own_offset_ns
        record, record_legs = self.latency.record, self.legs.record
        for body, arrived in batch:
            if len(body) < REPLY_BYTES:
                stats.foreign["no_header"] += 1
                continue
            magic, test_key, key, sequence, intended, sent, replier, received, replied = unpack(body)
            if magic != MAGIC:
                stats.foreign["no_header"] += 1
                continue
            if test_key != self.test_key:
                stats.foreign["other_test"] += 1
                continue
            tracker = self._replied.get(key)
            if tracker is None:
                tracker = self._replied[key] = SequenceTracker()
            if not tracker.record(sequence):
                stats.duplicates += 1
                continue
            reply = waiting.get((key, sequence))
            if reply is None or reply.done():
                if (key, sequence) in self._given_up:
                    self._given_up.discard((key, sequence))
                    stats.late += 1
                else:
                    stats.foreign["unknown_request"] += 1
                continue
            reply.set_result(arrived)
            stats.replies += 1
            self.rate_file.write(intended // 1000, arrived // 1000)
            skew = offsets.get(replier, 0) - own  # its clock minus ours
            record((arrived - intended) // 1000, (replied - received) // 1000)
            record_legs((received - sent - skew) // 1000, (arrived - replied + skew) // 1000)

    # --- the Run surface ----------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        self.rate_file.close()
        self.latency.close()
        self.legs.close()

    def files(self) -> list[str]:
        return [*self.rate_file.names(), *(name for logs in REQUESTER_LOGS for _, name in logs)]

    def interval_report(self) -> LiveCounters:
        self.rate_file.flush()
        interval = self.last_interval = self.latency.roll()
        self.legs.roll()
        response, s, total = interval.corrected, self.stats, self.latency.total_corrected
        answered = response.get_total_count() > 0  # an interval with no reply has no response time, not 0
        return LiveCounters(
            sent=s.sent,
            errors=dict(s.errors),
            replies=s.replies,
            timed_out=s.timed_out,
            response_p50_us=value_at_percentile(response, 50) if answered else None,
            response_p99_us=value_at_percentile(response, 99) if answered else None,
            # Since the run began, for /metrics' histogram, as a receiver's latency.
            response_le_us=tuple(counts_at_or_below(total)),
            response_count=total.get_total_count(),
            response_sum_us=sum_of(total),
        )

    def verdict(self, conditions: FailConditions, watch: Watch, now: float) -> str | None:
        """The response time of the interval just closed: a closed system's latency, which the
        fail condition on latency bounds (the replier judges no leg of it)."""
        if self.last_interval is None or watch.interval_in_warm_up:
            return None
        return conditions.latency(self.last_interval.corrected, "response time")

    def account(self) -> SenderAccount:
        s, plan = self.stats, self.plan
        closed = RequestReplyAccount(
            clients=plan.parallel_count,
            outstanding=plan.outstanding,
            think_time=str(plan.think_time),
            think_time_mean_s=plan.think_time.mean_s,
            think_time_measured_s=s.thought_ns / s.thoughts / 1e9 if s.thoughts else None,
            request_timeout_s=plan.request_timeout_s,
            replies=s.replies,
            timed_out=s.timed_out,
            late=s.late,
            duplicates=s.duplicates,
            foreign=dict(s.foreign),
            skipped_by_sut=s.skipped_by_sut,
        )
        return replace(super().account(), request_reply=closed)

    def counters(self) -> JsonObject:
        s = self.stats
        return {"sent": s.sent, "replies": s.replies, "timed_out": s.timed_out, "errors": dict(s.errors)}

    async def _sleep_or_stop(self, seconds: float) -> None:
        await wait_event(self._stop, seconds)


class _Numbers:
    """A client's sequence numbers, shared by its turns; None once a request count is spent."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.next = 0

    def take(self) -> int | None:
        if self.limit is not None and self.next >= self.limit:
            return None
        self.next += 1
        return self.next - 1
