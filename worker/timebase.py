"""One clock pair per run: schedules run on the monotonic clock, headers carry wall time.

Wall time is read once at the start and advanced by the monotonic clock, so an NTP step
during a run cannot bend the schedule or the timestamps of one run against each other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["Timebase"]


@dataclass(frozen=True)
class Timebase:
    wall0_ns: int = field(default_factory=time.time_ns)
    mono0_ns: int = field(default_factory=time.perf_counter_ns)

    def wall_ns(self, mono_ns: int | None = None) -> int:
        mono = time.perf_counter_ns() if mono_ns is None else mono_ns
        return self.wall0_ns + (mono - self.mono0_ns)
