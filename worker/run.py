"""What a worker does with a run, whichever role: the `Run` protocol both the sending runs
(`SenderRun`, `MultiProcessSender`) and the receiving ones (`ReceiverRun` and its multi-process
form) implement, so the daemon never asks which it holds; and the once-a-second watch of the
fail conditions over it."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from protocol.fail import FailConditions
from protocol.json_value import JsonObject
from protocol.live import LiveCounters
from protocol.results import ClientSent, ReceiverAccount, SenderAccount
from worker.drivers.base import DriverError
from worker.heap import frozen_heap

__all__ = ["Run", "SendingRun", "Watch", "run_clients"]

log = logging.getLogger(__name__)


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
    def interval_report(self) -> LiveCounters: ...
    def count(self) -> int: ...
    def start_at_ns(self) -> int: ...
    def idle_on_purpose(self) -> bool: ...
    def verdict(self, conditions: FailConditions, watch: Watch, now: float) -> str | None: ...
    def account(self) -> SenderAccount | ReceiverAccount: ...
    def counters(self) -> JsonObject: ...


class SendingPlan(Protocol):
    """What the sending runs' plans (a sender's, a requester's) have in common."""

    @property
    def start_at_ns(self) -> int: ...
    @property
    def warm_up_s(self) -> float: ...


class SendingStats(Protocol):
    sent: int
    sent_per_client: Counter[int]
    errors: Counter[str]
    disconnects_ns: list[int]
    reconnects_ns: list[int]


P = TypeVar("P", bound=SendingPlan)
S = TypeVar("S", bound=SendingStats)


class SendingRun(Generic[P, S]):
    """What every sending run is to the daemon (the `Run` surface a sender in one process or
    several, and a requester, share), over the plan, stats and keys it holds."""

    VERB: ClassVar[str] = "sent"
    STOPS_WHEN_TRIPPED: ClassVar[bool] = True

    def __init__(self, plan: P, stats: S, keys: dict[int, int], started_ns: int) -> None:
        """`keys`: each client's sender key; `started_ns`: the run's own start (wall clock), from
        which the warm-up runs unless the plan gives a later common start."""
        self.plan = plan
        self.stats = stats
        self.keys = keys
        self.failure: str | None = None
        self._started_ns = started_ns

    @property
    def warm_up_end_ns(self) -> int:
        return max(self._started_ns, self.plan.start_at_ns) + int(self.plan.warm_up_s * 1e9)

    def count(self) -> int:
        return self.stats.sent

    def start_at_ns(self) -> int:
        return self.plan.start_at_ns

    def idle_on_purpose(self) -> bool:
        return False

    def verdict(self, conditions: FailConditions, watch: Watch, now: float) -> str | None:
        """A run with no schedule has none to fall short of (a scheduled sender's has one)."""
        return None

    def account(self) -> SenderAccount:
        s = self.stats
        return SenderAccount(
            sent=s.sent,
            warm_up_end_ns=self.warm_up_end_ns,
            warm_up_s=self.plan.warm_up_s,
            errors=dict(s.errors),
            disconnects_ns=tuple(s.disconnects_ns),
            reconnects_ns=tuple(sorted(s.reconnects_ns)),
            senders={f"{key:016x}": ClientSent(client, s.sent_per_client[client]) for client, key in self.keys.items()},
        )

    def counters(self) -> JsonObject:
        return {"sent": self.stats.sent, "errors": dict(self.stats.errors)}


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
    last_look: float = float("-inf")  # the previous check: where the interval just closed began
    # The interval just closed began in the warm-up, and holds some of it: a verdict on that
    # interval's figures waits for the next (judged 19 ms after a 2 s warm-up, one second that
    # was 98 % warm-up failed a test on a p99 above every figure it printed).
    interval_in_warm_up: bool = False

    def check(self, run: Run, now: float) -> str | None:
        interval_began, self.last_look = self.last_look, now
        count = run.count()
        if not self.last_progress:
            self.last_progress = max(now, self.origin)
        elif count != self.last_count or run.idle_on_purpose():
            self.last_count, self.last_progress = count, now
        if reason := self.conditions.stalled(now - self.last_progress, run.VERB):
            return reason
        warm_up_end = self.origin + self.options_warm_up_s
        if now < warm_up_end:
            return None
        self.interval_in_warm_up = bool(self.options_warm_up_s) and interval_began < warm_up_end
        return run.verdict(self.conditions, self, now)
