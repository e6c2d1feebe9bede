"""The open-model send schedule: when each message is meant to go, whatever the SUT does.

Latency is measured from these intended times, so a sender held up by a slow SUT cannot hide
the queueing it causes (coordinated omission). How far the actual send falls behind is the
generator lag: when it grows, the generator, not the SUT, was the limit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Schedule"]


@dataclass
class Schedule:
    """Intended send times, in ns on the caller's clock, starting at `start_ns`.

    `rate_per_s` 0 means unbounded: every message is intended "now" (the caller passes it in).
    Poisson arrivals draw exponential gaps with the given mean rate from a seeded generator, so
    a run is repeatable.
    """

    rate_per_s: float
    start_ns: int
    poisson: bool = False
    seed: int = 0
    _sent: int = 0
    _next_ns: float = field(init=False)
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if self.rate_per_s < 0:
            raise ValueError("rate_per_s must be >= 0")
        self._next_ns = float(self.start_ns)
        self._rng = random.Random(self.seed)

    @property
    def unbounded(self) -> bool:
        return self.rate_per_s == 0

    @property
    def interval_ns(self) -> float:
        return 0.0 if self.unbounded else 1e9 / self.rate_per_s

    def next_intended(self, now_ns: int) -> int:
        """The intended time of the next message; the schedule moves on by one message.

        A late sender gets intended times in the past: it sends at once to catch up, and the
        latency of those messages counts from when they should have gone.
        """
        if self.unbounded:
            self._sent += 1
            return now_ns
        intended = self._upcoming()
        self._advance()
        return int(intended)

    def take_due(self, now_ns: int, before_ns: int, most: int, early_ns: int = 0) -> list[int]:
        """The intended times of the next messages due by `now_ns` (or within `early_ns` after
        it) and intended before `before_ns`, at most `most` of them; the schedule moves on past
        them. Unbounded: `most` messages, all intended now (each sent as soon as the one before)."""
        if most <= 0:
            return []
        if self.unbounded:
            self._sent += most
            return [now_ns] * most
        if self.poisson:
            due: list[int] = []
            while len(due) < most and (intended := self._upcoming()) <= now_ns + early_ns and intended < before_ns:
                due.append(int(intended))
                self._advance()
            return due
        # A constant rate: how many by arithmetic, then each time as `_upcoming` makes it (a
        # method call and a property or two per message were 0.3 us of a sender's 9 at 110,000
        # msg/s). The estimate is put right against those same times, so that rounding at the
        # bounds takes exactly the messages the message-by-message test would.
        start, interval, sent = self.start_ns, self.interval_ns, self._sent
        up_to = now_ns + early_ns

        def due_at(k: int) -> bool:
            intended = start + (sent + k) * interval
            return intended <= up_to and intended < before_ns

        count = min(most, max(0, int((min(up_to, before_ns) - start) / interval) - sent + 1))
        while count > 0 and not due_at(count - 1):
            count -= 1
        while count < most and due_at(count):
            count += 1
        self._sent = sent + count
        return [int(start + k * interval) for k in range(sent, sent + count)]

    def slots_before(self, end_ns: int) -> int:
        """How many messages this schedule meant to send before `end_ns`, from its start and
        whatever it has sent: what a sender owed, the slots a stopped or late one never reached
        included. Not for an unbounded schedule (it has no slots). A Poisson schedule's gaps are
        drawn again from its seed, a few hundred ns each, once at the end of a run."""
        if self.unbounded:
            raise ValueError("an unbounded schedule has no slots")
        if self.poisson:
            rng, at, count = random.Random(self.seed), float(self.start_ns), 0
            while int(at) < end_ns:
                count += 1
                at += rng.expovariate(self.rate_per_s) * 1e9
            return count
        # As `take_due` counts: an estimate put right against the times `_upcoming` makes.
        start, interval = self.start_ns, self.interval_ns
        count = max(0, int((end_ns - start) / interval) + 1)
        while count > 0 and not int(start + (count - 1) * interval) < end_ns:
            count -= 1
        while int(start + count * interval) < end_ns:
            count += 1
        return count

    def _upcoming(self) -> float:
        """The next message's intended time, the schedule not moved."""
        if self.poisson:
            return self._next_ns
        # From the start time, not by adding intervals, so rounding never drifts.
        return self.start_ns + self._sent * self.interval_ns

    def _advance(self) -> None:
        if self.poisson:
            self._next_ns += self._rng.expovariate(self.rate_per_s) * 1e9
        self._sent += 1

    @property
    def scheduled(self) -> int:
        return self._sent
