"""What a worker does with a run, whichever role: the `Run` protocol both the sending runs
(`SenderRun`, `MultiProcessSender`) and the receiving ones (`ReceiverRun` and its multi-process
form) implement, so the daemon never asks which it holds; and the once-a-second watch of the
fail conditions over it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from protocol.fail import FailConditions
from worker.drivers.base import DriverError
from worker.heap import frozen_heap

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram

    from worker.latency import IntervalLatency
    from worker.receiver import ReceiverPlan, ReceiverStats
    from worker.sender import SenderPlan, SenderStats

__all__ = ["RATE_JUDGED_AFTER_S", "ReceivingAccount", "Run", "SendingAccount", "Watch", "run_clients"]

log = logging.getLogger(__name__)

# A sender's rate is judged only this long after its warm-up: one slow second at the start does
# not decide the test.
RATE_JUDGED_AFTER_S = 5.0


async def run_clients(clients: list[Coroutine[Any, Any, None]], role: str) -> str | None:
    """A sending role's clients run to their ends, the heap frozen meanwhile (worker.heap); a
    driver's failure ends them all and is returned. Every client is cancelled and awaited
    before this returns."""
    with frozen_heap():
        tasks = [asyncio.create_task(client) for client in clients]
        try:
            await asyncio.gather(*tasks)
        except DriverError as exc:
            log.error("%s failed: %s", role, exc)
            return str(exc)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return None


class Run(Protocol):
    VERB: ClassVar[str]  # "sent" or "received", for messages and reasons
    # A fail condition ends a sending run at once; a receiving one says so and goes on until
    # drained, so what is in flight is counted as received, not as lost.
    STOPS_WHEN_TRIPPED: ClassVar[bool]
    failure: str | None

    async def run(self) -> None: ...
    def stop(self) -> None: ...
    async def close(self) -> None: ...
    def files(self) -> list[str]: ...
    def interval_report(self) -> dict[str, Any]: ...
    def count(self) -> int: ...
    def start_at_ns(self) -> int: ...
    def idle_on_purpose(self) -> bool: ...
    def verdict(self, conditions: FailConditions, watch: Watch, now: float) -> str | None: ...
    def account(self) -> dict[str, Any]: ...
    def counters(self) -> dict[str, Any]: ...


class SendingAccount:
    """The `Run` methods of a sending run, over its plan, stats and keys."""

    VERB: ClassVar[str] = "sent"
    STOPS_WHEN_TRIPPED: ClassVar[bool] = True
    plan: SenderPlan
    stats: SenderStats
    keys: dict[int, int]

    @property
    def warm_up_end_ns(self) -> int:
        raise NotImplementedError

    def count(self) -> int:
        return self.stats.sent

    def start_at_ns(self) -> int:
        return self.plan.start_at_ns

    def idle_on_purpose(self) -> bool:
        return False

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

    def account(self) -> dict[str, Any]:
        lag: HdrHistogram = self.stats.lag_us
        schedule_lag: dict[str, Any] = {p: lag.get_value_at_percentile(float(p)) for p in ("50", "99", "99.9")}
        schedule_lag["max"] = lag.get_max_value()
        return {
            "sent": self.stats.sent,
            "warm_up_end_ns": self.warm_up_end_ns,
            "warm_up_s": self.plan.warm_up_s,
            "errors": dict(self.stats.errors),
            "retries": self.stats.retries,
            "disconnects_ns": self.stats.disconnects_ns,
            "reconnects_ns": sorted(self.stats.reconnects_ns),
            "senders": {
                f"{key:016x}": {"client": client, "sent": self.stats.sent_per_client[client]}
                for client, key in self.keys.items()
            },
            "schedule_lag_us": schedule_lag,
        }

    def counters(self) -> dict[str, Any]:
        return {"sent": self.stats.sent, "errors": dict(self.stats.errors)}


class ReceivingAccount:
    """The `Run` methods of a receiving run."""

    VERB: ClassVar[str] = "received"
    STOPS_WHEN_TRIPPED: ClassVar[bool] = False
    plan: ReceiverPlan
    stats: ReceiverStats
    paused: bool
    last_interval: IntervalLatency | None
    latency: Any

    def per_sender(self) -> dict[str, dict[str, int]]:
        raise NotImplementedError

    def reconnects_ns(self) -> list[int]:
        raise NotImplementedError

    def skipped_by_sut(self) -> int:
        raise NotImplementedError

    def count(self) -> int:
        return self.stats.received

    def start_at_ns(self) -> int:
        return 0

    def idle_on_purpose(self) -> bool:
        # A paused receiver is idle on purpose: its stall clock starts again when it resumes.
        return self.paused

    def verdict(self, conditions: FailConditions, watch: Watch, now: float) -> str | None:
        """The corrected latency of the interval just closed."""
        if self.last_interval is None:
            return None
        return conditions.latency(self.last_interval.corrected, self.plan.latency_shift_us)

    def account(self) -> dict[str, Any]:
        replier = {}
        if self.plan.reply:
            stats = self.stats
            replier = {"replier": {"replied": stats.replied, "reply_errors": dict(stats.reply_errors)}}
        return replier | {
            "received": self.stats.received,
            "foreign": dict(self.stats.foreign),
            "latency_clamped": self.latency.clamped,
            "per_sender": self.per_sender(),
            "duplicates_per_s": {str(s): n for s, n in sorted(self.stats.duplicates_per_s.items())},
            "reconnects_ns": self.reconnects_ns(),
            "skipped_by_sut": self.skipped_by_sut(),
        }

    def counters(self) -> dict[str, Any]:
        return {"received": self.stats.received, "foreign": dict(self.stats.foreign)}


@dataclass
class Watch:
    """The fail conditions applied to one run, with what they remember between intervals."""

    conditions: FailConditions
    origin: float  # monotonic, when load starts
    options_warm_up_s: float
    last_count: int = 0
    last_progress: float = 0.0
    count_at_warm_up: int | None = None
    warm_up_looked_at: float = 0.0  # when count_at_warm_up was taken (monotonic)

    def check(self, run: Run, now: float) -> str | None:
        count = run.count()
        if not self.last_progress:
            self.last_progress = max(now, self.origin)
        elif count != self.last_count or run.idle_on_purpose():
            self.last_count, self.last_progress = count, now
        if reason := self.conditions.stalled(now - self.last_progress, run.VERB):
            return reason
        if now < self.origin + self.options_warm_up_s:
            return None
        return run.verdict(self.conditions, self, now)
