"""The sending side: N clients, each on its own open-model schedule, in one event loop.

A send never waits for the SUT's acknowledgement: each message is handed to the driver and
settled later (`Driver.on_settled`). The one brake is a window per client on the messages
handed over and not yet settled; a full window holds the schedule back, which shows as
schedule lag and as latency from the intended time, never as a failure.

Every message handed over spends its sequence number and counts as sent. One the SUT refused
or never confirmed (nacked, returned, unconfirmed, timed out) is counted under its error kind;
the receivers count it as lost if it never arrives. A message that could not be handed over
because the connection was down is tried again with the same sequence number and intended time
(so its latency shows the outage).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
from hdrh.histogram import HdrHistogram

from protocol.concurrency import wait_event
from protocol.fail import FailConditions
from protocol.hdr import clear, new_histogram, record_samples, value_at_percentile
from protocol.live import LiveCounters
from protocol.options import Duration, MessageSize, ProfileStep
from protocol.precise_timer import PreciseTimer
from protocol.ratefile import RateFileWriter
from protocol.results import SenderAccount
from worker.drivers import driver_for_client
from worker.drivers.base import (
    FIRST_CONNECT_S,
    DisconnectedError,
    Driver,
    SendError,
    backoff_s,
    connect_within,
)
from worker.payload import HEADER_BYTES, HeaderColumns, key_of, pack_header
from worker.run import SendingRun, Watch, run_clients
from worker.schedule import Schedule
from worker.timebase import Timebase

__all__ = ["SenderPlan", "SenderRun", "SenderStats", "interval_report", "sender_key"]

log = logging.getLogger(__name__)

# The event loop's timers wake up 1-2 ms late (epoll rounds its timeout up to whole
# milliseconds), so clients wait for their next message on the run's one `PreciseTimer` (tens
# of µs). With `precise_timing` a client instead sleeps until this long before a message is
# due, then yields to the loop until it is: ~20 µs of lag for a core's worth of CPU from
# 1000 msg/s (bench/HISTORY.md).
_WAKE_EARLY_NS = 2_000_000
# A message due sooner than this goes now: a wake-up would cost more than it is early by.
_MIN_SLEEP_NS = 50_000
# A client starts a burst at most this often by its schedule, with what fell due since: at
# 63,000 msg/s a burst every 50 µs or so (the messages due within `_MIN_SLEEP_NS`), each paying
# the loop's turn, the burst's bookkeeping and a write of its own, took the rest of the core and
# the schedule fell behind (bench/HISTORY.md). A message waits at most this long for
# its burst, half of it at the median; from 4,000 msg/s a client down, nothing changes.
_BURST_GAP_NS = 250_000
# Longer waits than this are taken on the stop event first, so a slow schedule still stops at once.
_LONG_WAIT_NS = 50_000_000
# A client that never has to wait (unbounded rate, a send that does not suspend) still gives
# the event loop a turn this often, or the daemon stops answering notes until the run ends.
_YIELD_EVERY_NS = 2_000_000
# Messages already due when a client wakes go out together, this many at most between two
# looks at the stop, the window and the loop: a burst's per-message work is the header, the
# stamp and the library's call (one call for the burst where the driver takes it whole).
_MOST_PER_BURST = 256
# The same for a driver that takes a burst in one call (Driver.TAKES_BURSTS): its per-burst costs
# (numpy's calls, the library's) are most of what is left, and a message costs ~1.5 µs, so
# 1,024 still look at the loop every 2 ms. Kafka send 0.80 -> 0.86 of the raw loop (bench/HISTORY.md).
_MOST_PER_WHOLE_BURST = 1024
# From this many messages in a burst, their lags and rate rows are made with numpy (and, for a
# driver that takes a burst whole, their bodies).
_COLUMNS_FROM = 16
# Bodies larger than this are built one by one: a run's burst of records (shared by its
# clients) stays under 16 MB, and copying the body is most of the cost anyway.
_COLUMNS_MAX_BYTES = 16 * 1024
# How long the end of a run waits for the SUT to settle what is still in flight.
_SETTLE_TIMEOUT_S = 30.0
_SETTLE_AFTER_STOP_S = 1.0
# A time no run reaches: the end of a run without a duration, the next step of the last one.
_NEVER = 2**63 - 1


def interval_report(stats: SenderStats, lag: HdrHistogram) -> LiveCounters:
    """Counters so far and one interval's schedule lag, as live statistics carry them (an
    interval without a send has no lag, not 0: a sender waiting on its window read as on time)."""
    sent_any = lag.get_total_count() > 0
    return LiveCounters(
        sent=stats.sent,
        errors=dict(stats.errors),
        in_flight=stats.in_flight,
        lag_p50_us=value_at_percentile(lag, 50) if sent_any else None,
        lag_p99_us=value_at_percentile(lag, 99) if sent_any else None,
        lag_max_us=lag.get_max_value() if sent_any else None,
    )


def sender_key(test_id: str, peer: str, client: int) -> int:
    return key_of(f"{test_id}/{peer}/{client}")


@dataclass(frozen=True)
class SenderPlan:
    test_id: str
    peer: str  # name@host: unique per test
    urls: list[str]
    rate_per_s: float  # per client
    parallel_count: int
    duration: Duration
    size: MessageSize
    poisson: bool = False
    warm_up_s: float = 0.0
    start_jitter_s: float = 0.0
    confirm_window: int = 0  # messages in flight per client; 0: the driver's default
    precise_timing: bool = False
    reconnect_budget_s: float = 60.0
    start_at_ns: int = 0  # wall time of the first message (all senders together); 0 = at once
    profile: tuple[ProfileStep, ...] = ()  # rate and clients changing during the run

    def steps(self) -> tuple[ProfileStep, ...]:
        return self.profile or (ProfileStep(0.0, self.rate_per_s, self.parallel_count),)

    def expected_sent(self, seconds: float) -> float | None:
        """Messages the schedule holds in the first `seconds` (all clients); None if unbounded."""
        steps = self.steps()
        total = 0.0
        for i, step in enumerate(steps):
            end = steps[i + 1].at_s if i + 1 < len(steps) else float("inf")
            overlap = max(0.0, min(seconds, end) - step.at_s)
            if overlap and not step.rate_per_s:
                return None
            total += step.rate_per_s * min(step.parallel, self.parallel_count) * overlap
        return total

    def messages_for(self, client: int) -> int | None:
        return self.duration.messages_for(client, self.parallel_count)

    def intended_for(self, client: int, started_ns: int, stopped_ns: int | None = None) -> int | None:
        """How many messages client `client`'s schedule, begun at `started_ns` (monotonic), meant
        to send: its count, or the slots of each step it takes part in before the duration's
        end, or before `stopped_ns` where the run was stopped first (a test stopped 5 s into 30
        read 12,000 intended beside 2,254 sent: slots never due are owed by no one); None where
        a step it sends in is unbounded and no count bounds it (no schedule to count by) or the
        run has no end. The steps' schedules are made as `SenderRun._send_loop` makes them."""
        limit = self.messages_for(client)
        ends = [started_ns + int(self.duration.seconds * 1e9)] if self.duration.seconds is not None else []
        ends += [stopped_ns] if stopped_ns is not None else []
        if not ends:
            return limit
        end_ns = min(ends)
        steps = self.steps()
        total = 0
        for i, step in enumerate(steps):
            begin = started_ns if i == 0 else started_ns + int(step.at_s * 1e9)
            until = min(end_ns, started_ns + int(steps[i + 1].at_s * 1e9) if i + 1 < len(steps) else end_ns)
            if client >= step.parallel or begin >= until:
                continue
            if not step.rate_per_s:  # as fast as it goes: a count is due whole at once
                return limit
            seed = client if i == 0 else client + 7919 * i
            total += Schedule(step.rate_per_s, begin, self.poisson, seed).slots_before(until)
        return total if limit is None else min(limit, total)


@dataclass
class SenderStats:
    sent: int = 0
    sent_per_client: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    # When a client found its connection gone (wall clock, ns): one per outage it rode out, for
    # the report's per-fault reconnect counts.
    disconnects_ns: list[int] = field(default_factory=list)
    reconnects_ns: list[int] = field(default_factory=list)  # the client library's own reconnects
    # By client, once it ended: what its schedule meant to send (None: unbounded), and what the
    # SUT acknowledged (None: its driver's settings acknowledge nothing).
    intended_per_client: dict[int, int | None] = field(default_factory=dict)
    accepted_per_client: dict[int, int | None] = field(default_factory=dict)
    # Handed over and not yet settled by the SUT, all clients together: what a sender that runs
    # past its time is waiting for.
    in_flight: int = 0
    # perf_counter ns when the first message was handed over, and when the last client had
    # everything it sent settled: a run's send rate without its connect and close.
    first_send_mono_ns: int = 0
    all_settled_mono_ns: int = 0
    # Schedule lag: how late each message left against its intended time, in µs. Each message
    # appends its sample (two C calls); they go into this interval's histogram a column at a
    # time, and `fold()` adds the interval to the whole run's.
    lag_samples_us: array[int] = field(default_factory=lambda: array("q"))
    _interval_lag_us: HdrHistogram = field(default_factory=new_histogram)
    _total_lag_us: HdrHistogram = field(default_factory=new_histogram)

    @property
    def interval_lag_us(self) -> HdrHistogram:
        """This interval's schedule lag so far."""
        if self.lag_samples_us:
            # A lag under 1 µs (or a send ahead of its time) counts as 1 µs, the histogram's floor.
            record_samples(self._interval_lag_us, self.lag_samples_us)
            self.lag_samples_us = array("q")
        return self._interval_lag_us

    def fold(self) -> None:
        interval = self.interval_lag_us
        if interval.get_total_count():
            self._total_lag_us.add(interval)
            clear(interval)

    @property
    def lag_us(self) -> HdrHistogram:
        """The whole run's schedule lag so far."""
        self.fold()
        return self._total_lag_us


@dataclass
class _Flight:
    """One client's messages handed over and not yet settled, against its window."""

    window: int
    in_flight: int = 0
    accepted: int = 0  # settled without an error: what the SUT took, where it acknowledges
    room: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False  # the driver is closed: whatever it still settles was counted already
    # A full window reopens once a sixteenth of it has settled, not at each settlement: the
    # sender then hands over a burst per wake-up instead of one message per settlement (an AMQP
    # 0-9-1 stream without confirms spent a wake-up of the sender per message that way).
    low_water: int = field(init=False)

    def __post_init__(self) -> None:
        self.low_water = self.window - max(1, self.window // 16)


# A sender's rate is judged only this long after its warm-up: one slow second at the start does
# not decide the test.
RATE_JUDGED_AFTER_S = 5.0


class ScheduledSending(SendingRun[SenderPlan, SenderStats]):
    """A sender on a schedule, in one process or several: its rate is judged against the
    schedule, and its account holds its retries and how late the schedule ran."""

    def verdict(self, conditions: FailConditions, watch: Watch, now: float) -> str | None:
        """The rate achieved since the first look after warm-up against the schedule's over the
        same span (all clients together). The span starts at that look, not at the warm-up's end:
        the count is taken there, and a look comes up to a stats interval late, which counted
        against the rate read a sender on schedule as 80 % of it at its first verdict."""
        count = self.count()
        if watch.count_at_warm_up is None:
            watch.count_at_warm_up, watch.warm_up_looked_at = count, now
            return None
        seconds = now - watch.warm_up_looked_at
        if seconds < RATE_JUDGED_AFTER_S:
            return None
        expected_now = self.plan.expected_sent(now - watch.origin)
        expected_then = self.plan.expected_sent(watch.warm_up_looked_at - watch.origin)
        if expected_now is None or expected_then is None:
            return None  # unbounded: no target to fall short of
        return conditions.rate(count - watch.count_at_warm_up, seconds, (expected_now - expected_then) / seconds)

    def account(self) -> SenderAccount:
        lag = self.stats.lag_us
        schedule_lag: dict[str, float] = {p: lag.get_value_at_percentile(float(p)) for p in ("50", "99", "99.9")}
        schedule_lag["max"] = lag.get_max_value()
        account = super().account()
        s = self.stats
        senders = {
            key: replace(c, intended=s.intended_per_client.get(c.client), accepted=s.accepted_per_client.get(c.client))
            for key, c in account.senders.items()
        }
        return replace(account, senders=senders, retries=s.retries, schedule_lag_us=schedule_lag)


class SenderRun(ScheduledSending):
    def __init__(
        self,
        plan: SenderPlan,
        rate_file: RateFileWriter,
        timebase: Timebase | None = None,
        clients: range | None = None,
        driver_for: Callable[[int], Driver] | None = None,
    ) -> None:
        """`clients`: the client numbers this process runs (all of them unless several
        processes share the plan). `driver_for(client)`: the driver a client sends with (by
        default from the plan's URLs; tests give an in-memory one)."""
        self.timebase = timebase or Timebase()
        self.clients = clients if clients is not None else range(plan.parallel_count)
        keys = {client: sender_key(plan.test_id, plan.peer, client) for client in self.clients}
        super().__init__(plan, SenderStats(), keys, self.timebase.wall0_ns)
        self.rate_file = rate_file
        self._down_clients: set[int] = set()
        self._down_reason = ""  # what the driver said when a client last found its connection down
        self.test_key = key_of(plan.test_id)
        self._stop = asyncio.Event()
        self._stopped_ns: int | None = None  # perf_counter: when it was stopped, if before its end
        self._filler = random.Random(0).randbytes(plan.size.max_bytes)
        self._tails: dict[int, bytes] = {}  # filler after the header, by message size
        # Same-size bodies, a burst at a time, for drivers that take a burst whole (_burst).
        self._columns: HeaderColumns | None = None
        self._columns_fit = plan.size.fixed and HEADER_BYTES <= plan.size.min_bytes <= _COLUMNS_MAX_BYTES
        self._driver_for = driver_for or functools.partial(driver_for_client, plan.urls, "send_url")
        self._timer: PreciseTimer  # made by run(), on its loop
        self._size_rng = random.Random(1)

    def stop(self) -> None:
        if self._stopped_ns is None:
            self._stopped_ns = time.perf_counter_ns()
        self._stop.set()

    def files(self) -> list[str]:
        return self.rate_file.names()

    async def close(self) -> None:
        self.rate_file.close()

    async def run(self) -> None:
        """Run every client to its end (duration, count, stop, or a failure)."""
        self._timer = PreciseTimer(asyncio.get_running_loop())
        try:
            self.failure = await run_clients([self._client(i) for i in self.clients], "sender") or self.failure
        finally:
            self._timer.close()
            self.rate_file.flush()

    async def _client(self, client: int) -> None:
        plan = self.plan
        driver = self._driver_for(client)
        flight = _Flight(plan.confirm_window or driver.window())
        driver.on_settled = functools.partial(self._settled, flight)
        begin = time.perf_counter_ns()  # until the schedule's own start is known
        # Connect first, so the time a connection takes does not skew the common start.
        await connect_within(driver, FIRST_CONNECT_S)
        try:
            await driver.start_sending()
            # With a common start every client's schedule has the same origin, to the
            # nanosecond (a profile's steps change together); else it starts once connected.
            origin = time.perf_counter_ns()
            if plan.start_at_ns:
                origin = self.timebase.mono0_ns + (plan.start_at_ns - self.timebase.wall0_ns)
            begin = origin + int(random.uniform(0, plan.start_jitter_s) * 1e9)
            await self._sleep_or_stop(max(0, begin - time.perf_counter_ns()) / 1e9)
            if self._stop.is_set():
                return
            await self._send_loop(client, driver, flight, begin)
            await self._settle(flight, _SETTLE_TIMEOUT_S)
            self.stats.all_settled_mono_ns = max(self.stats.all_settled_mono_ns, time.perf_counter_ns())
        finally:
            self.stats.reconnects_ns += driver.reconnects_ns
            await driver.close()
            await asyncio.sleep(0)  # settlements the close itself scheduled
            flight.closed = True
            if flight.in_flight:  # never settled: their fate is unknown
                self.stats.errors["unconfirmed"] += flight.in_flight
                self.stats.in_flight -= flight.in_flight
                flight.in_flight = 0
            self.stats.accepted_per_client[client] = flight.accepted if driver.acknowledges() else None
            intended = plan.intended_for(client, begin, self._stopped_ns)
            if intended is not None and self._stopped_ns is not None:
                # A burst takes the slots due within a wake-up's worth: sent, so meant to be.
                intended = max(intended, self.stats.sent_per_client[client])
            self.stats.intended_per_client[client] = intended

    def _settled(self, flight: _Flight, count: int, error: SendError | None) -> None:
        if flight.closed:
            return
        flight.in_flight -= count
        self.stats.in_flight -= count
        if error is None:
            flight.accepted += count
        else:
            self.stats.errors[error.kind] += count
        if flight.in_flight <= flight.low_water:
            flight.room.set()

    async def _settle(self, flight: _Flight, timeout_s: float) -> None:
        """Wait until the SUT settled everything in flight, or the timeout passed."""
        deadline = time.monotonic() + timeout_s
        while flight.in_flight and time.monotonic() < deadline:
            if self._stop.is_set():  # stopped: a short grace for the last acknowledgements only
                deadline = min(deadline, time.monotonic() + _SETTLE_AFTER_STOP_S)
            flight.room.clear()
            await wait_event(flight.room, 0.05)

    async def _wait_for_room(self, flight: _Flight) -> None:
        while flight.in_flight > flight.low_water and not self._stop.is_set():
            flight.room.clear()
            await wait_event(flight.room, 0.1)

    async def _send_loop(self, client: int, driver: Driver, flight: _Flight, started: int) -> None:
        plan = self.plan
        limit = plan.messages_for(client)
        end_ns = _NEVER if plan.duration.seconds is None else started + int(plan.duration.seconds * 1e9)
        steps = plan.steps()
        step = 0

        def step_start(i: int) -> int:
            return started + int(steps[i].at_s * 1e9) if i < len(steps) else _NEVER

        schedule = Schedule(steps[0].rate_per_s, started, poisson=plan.poisson, seed=client)
        sequence = 0
        last_turn = last_burst = started
        while not self._stop.is_set() and (limit is None or sequence < limit):
            now = time.perf_counter_ns()
            intended = schedule.next_intended(now)
            # A profile's next step begins when the schedule reaches it (not the clock: a late
            # sender still owes the messages of the step it is in).
            while step + 1 < len(steps) and intended >= step_start(step + 1):
                step += 1
                schedule = Schedule(steps[step].rate_per_s, step_start(step), plan.poisson, seed=client + 7919 * step)
                intended = schedule.next_intended(max(now, step_start(step)))
            if client >= steps[step].parallel:  # idle in this step
                if step + 1 >= len(steps):
                    break
                await self._sleep_or_stop(max(0, step_start(step + 1) - time.perf_counter_ns()) / 1e9)
                step += 1
                schedule = Schedule(steps[step].rate_per_s, step_start(step), plan.poisson, seed=client + 7919 * step)
                continue
            if intended >= end_ns:
                break
            wake = intended if plan.precise_timing or schedule.unbounded else max(intended, last_burst + _BURST_GAP_NS)
            if plan.precise_timing or wake - now > _MIN_SLEEP_NS:
                if not await self._wait_until(wake, now):
                    break
                last_turn = now
            elif now - last_turn > _YIELD_EVERY_NS:
                await asyncio.sleep(0)
                last_turn = now
            if flight.in_flight >= flight.window:
                # The window is the only brake: the wait shows as this message's schedule lag.
                await self._wait_for_room(flight)
                last_turn = time.perf_counter_ns()
            # This message, and those after it that are due already or in less than a wake-up's
            # worth (a late, fast or unbounded client), within the window's room, the count, this
            # step of the profile and the duration.
            most = self._burst_room(driver, flight, _NEVER if limit is None else limit - sequence)
            # By the schedule, not the clock: a late wake-up does not push the next one later.
            last_burst = intended
            more = schedule.take_due(time.perf_counter_ns(), min(end_ns, step_start(step + 1)), most - 1, _MIN_SLEEP_NS)
            due = [intended, *more]
            sent = await self._send_due(client, driver, flight, sequence, due)
            if sent is None:
                return
            sequence += sent

    async def _wait_until(self, due: int, now: int) -> bool:
        """Wait until `due` (perf_counter ns) by the plan's timing; False if the run was stopped
        meanwhile."""
        if self.plan.precise_timing:
            if due - now > _WAKE_EARLY_NS:
                await asyncio.sleep((due - now - _WAKE_EARLY_NS) / 1e9)
            while time.perf_counter_ns() < due:  # noqa: ASYNC110 - a timed wait is what is too coarse
                await asyncio.sleep(0)
            return True
        if due - now > _LONG_WAIT_NS:
            await self._sleep_or_stop((due - now - _WAKE_EARLY_NS) / 1e9)
            if self._stop.is_set():
                return False
        await self._timer.sleep_until(due)
        return True

    def _burst_room(self, driver: Driver, flight: _Flight, left: int) -> int:
        """How many messages the next burst may hold: the burst's bound, the window's room, and
        the `left` of the count."""
        most = _MOST_PER_WHOLE_BURST if driver.TAKES_BURSTS and self._columns_fit else _MOST_PER_BURST
        return min(most, flight.window - flight.in_flight, left)

    async def _send_due(
        self, client: int, driver: Driver, flight: _Flight, sequence: int, due: list[int]
    ) -> int | None:
        """Hand over the messages `due` (intended monotonic ns), numbered from `sequence`, riding
        out an outage on the way; how many went, or None if the run was stopped during one."""
        sent = 0
        while due:
            handed = self._hand_over(client, driver, flight, sequence + sent, due)
            sent += handed
            if handed == len(due):
                break
            # The connection was down at due[handed]: ride it out with that message, then the rest.
            if not await self._ride_out(client, driver, flight, sequence + sent, due[handed]):
                return None
            sent += 1
            due = due[handed + 1 :]
        return sent

    def _hand_over(self, client: int, driver: Driver, flight: _Flight, sequence: int, intended: list[int]) -> int:
        """Hand messages to the driver, numbered from `sequence`, at their `intended` times
        (monotonic ns): the hot path, no coroutine. Returns how many went; fewer than asked if the
        connection was down (counted; that one's number not spent), for `_ride_out` to try again."""
        stats = self.stats
        sent_mono: array[int] = array("q")
        bodies: Iterable[bytes]
        if driver.TAKES_BURSTS and len(intended) >= _COLUMNS_FROM and self._columns_fit:
            bodies, sent_mono = self._burst(client, sequence, intended)
        else:
            bodies = self._bodies(client, sequence, intended, sent_mono)
        done = driver.publish_many(bodies, sequence)
        handed = done.handed
        if done.down is not None:
            # The message that met the closed connection was built and stamped (the last of
            # `sent_mono`): it goes again later, stamped anew.
            stats.errors["disconnected"] += 1
            self._down_reason = str(done.down)
            if client not in self._down_clients:  # one per outage a client rides out, not per message
                self._down_clients.add(client)
                stats.disconnects_ns.append(time.time_ns())
        if handed:
            refused = done.refused.total()
            flight.in_flight += handed - refused
            stats.in_flight += handed - refused
            stats.errors.update(done.refused)
            if not stats.first_send_mono_ns:
                stats.first_send_mono_ns = sent_mono[0]
            stats.sent += handed
            stats.sent_per_client[client] += handed
            self._keep(intended[:handed], sent_mono[:handed])
        return handed

    def _keep(self, intended_mono: list[int], sent_mono: array[int]) -> None:
        """Handed-over messages' schedule lags and rate rows (intended and sent, wall µs), a
        column at a time once a burst is large enough to pay for numpy's calls."""
        to_wall = self.timebase.wall0_ns - self.timebase.mono0_ns
        lags = self.stats.lag_samples_us
        if len(sent_mono) < _COLUMNS_FROM:
            etas, atas = array("q"), array("q")
            for intended, sent in zip(intended_mono, sent_mono, strict=True):
                lags.append((sent - intended) // 1000)
                etas.append((intended + to_wall) // 1000)
                atas.append((sent + to_wall) // 1000)
            self.rate_file.write_many(etas, atas)
            return
        intended_ns = np.array(intended_mono, dtype=np.int64)
        sent_ns = np.frombuffer(sent_mono, dtype=np.int64)
        lags.frombytes(((sent_ns - intended_ns) // 1000).tobytes())
        self.rate_file.write_many((intended_ns + to_wall) // 1000, (sent_ns + to_wall) // 1000)

    def _bodies(self, client: int, sequence: int, intended: list[int], sent_mono: array[int]) -> Iterator[bytes]:
        """The messages due at `intended` (monotonic ns), numbered from `sequence`, each built
        and stamped as the driver takes it; the stamps (monotonic ns) kept in `sent_mono`."""
        tb, size = self.timebase, self.plan.size
        to_wall = tb.wall0_ns - tb.mono0_ns
        clock, stamp, test_key, key = time.perf_counter_ns, sent_mono.append, self.test_key, self.keys[client]
        tail = self._tail(size.min_bytes) if size.fixed else b""
        for due in intended:
            if not size.fixed:
                tail = self._tail(self._size_rng.randint(size.min_bytes, size.max_bytes))
            sent = clock()
            stamp(sent)
            yield pack_header(test_key, key, sequence, due + to_wall, sent + to_wall) + tail
            sequence += 1

    def _burst(self, client: int, sequence: int, intended: list[int]) -> tuple[list[bytes], array[int]]:
        """`_bodies` for a driver that takes a burst in one call: built at once, every message
        stamped with the one instant just before, when the library is about to take them all."""
        columns = self._columns
        if columns is None:
            size = self.plan.size.min_bytes
            columns = self._columns = HeaderColumns(self.test_key, size, self._filler, _MOST_PER_WHOLE_BURST)
        to_wall = self.timebase.wall0_ns - self.timebase.mono0_ns
        sent = time.perf_counter_ns()
        intended_wall = np.array(intended, dtype=np.int64) + to_wall
        bodies = columns.bodies(self.keys[client], sequence, intended_wall, sent + to_wall)
        return bodies, array("q", [sent]) * len(intended)

    def _tail(self, size_bytes: int) -> bytes:
        """The filler after the header for a message of `size_bytes`."""
        tail = self._tails.get(size_bytes)
        if tail is None:
            tail = self._tails[size_bytes] = self._filler[: max(0, size_bytes - HEADER_BYTES)]
        return tail

    async def _ride_out(self, client: int, driver: Driver, flight: _Flight, sequence: int, intended_mono: int) -> bool:
        """The connection was down: try the same message again with backoff until it goes, the
        reconnect budget runs out (raises), or the run is stopped (False)."""
        down_since = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            self.stats.retries += 1
            await self._sleep_or_stop(backoff_s(attempt))
            if self._stop.is_set():
                return False
            if self._hand_over(client, driver, flight, sequence, [intended_mono]):
                self._down_clients.discard(client)
                return True
            if time.monotonic() - down_since > self.plan.reconnect_budget_s:
                budget = self.plan.reconnect_budget_s
                raise DisconnectedError(f"{self._down_reason} for more than {budget:g} s", retry=False)

    async def _sleep_or_stop(self, seconds: float) -> None:
        await wait_event(self._stop, seconds)

    def interval_report(self) -> LiveCounters:
        """Counters and this interval's schedule lag; starts the next interval."""
        self.rate_file.flush()
        report = interval_report(self.stats, self.stats.interval_lag_us)
        self.stats.fold()
        return report
