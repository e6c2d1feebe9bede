"""Fail conditions: one type for the test definition (`coordinator.Fail`), the SET options
that carry it (`fail_*`) and the worker that checks itself against it once a second, as
Maestro's workers do.

The first to trip ends the worker's run; the reason goes to the coordinator in NOTIFY_FAIL and
stops the whole test. Loss is not judged by a worker: only the merged sequence numbers of every
receiver can tell it exactly, so the coordinator checks `max_loss_ratio` when the files are in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from hdrh.histogram import HdrHistogram

from protocol.hdr import value_at_percentile
from protocol.json_value import JsonObject
from protocol.parsing import OptionError, choice, number, parse_seconds

__all__ = ["DEFAULT_STALL_S", "FailConditions"]

DEFAULT_STALL_S = 30.0


def _parses(parser: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    return {"parse": parser}


@dataclass(frozen=True)
class FailConditions:
    """Fail conditions; the first to trip stops the test and is its reason.

    latency_ms: bound on the corrected latency of each 1 s interval (0 = none), at
    `latency_percentile` (soft) or on the interval's max (hard); min_rate_ratio: achieved /
    target rate of each sender since warm-up; max_loss_ratio: lost / sent over the whole test
    (checked by the coordinator on the merged sequence numbers); stall_s: no progress this long;
    inspector_errors: this many failed samples in a row from an inspector fail the test (0: they
    are only counted); latency_uncertainty_ratio: latency across hosts is a figure only while
    the clocks are known to within this fraction of its p50 (0: no bound), and only where no
    clock correction had to clamp a sample and no clock stepped; untrusted_latency: what a
    test whose latency is not such a figure becomes: "invalid" (neither success nor failure:
    it did not measure the SUT), "failure", or "warn" (a success that says so);
    max_generator_shortfall: a run whose load generator was the limit and whose senders sent
    more than this fraction short of the target is invalid. Checked by the coordinator on the
    merged figures. Checked when made: a bad value is refused in the test definition."""

    # Each field with the parser of its SET option (`fail_<field>`): one check for the definition
    # and the peers (protocol.options builds its table from these).
    latency_ms: float = field(default=0.0, metadata=_parses(number(0)))  # 0 = no latency bound
    latency_percentile: float = field(default=99.0, metadata=_parses(number(0, 100)))
    latency_policy: str = field(default="soft", metadata=_parses(choice("soft", "hard")))
    min_rate_ratio: float = field(default=0.0, metadata=_parses(number(0, 1)))
    max_loss_ratio: float = field(default=0.0, metadata=_parses(number(0, 1)))
    stall_s: float = field(default=DEFAULT_STALL_S, metadata=_parses(parse_seconds))
    # Failed samples in a row; 0: never fail.
    inspector_errors: int = field(default=0, metadata=_parses(number(0, 1_000_000, integer=True)))
    # Clock ± / corrected p50; 0 = no bound.
    latency_uncertainty_ratio: float = field(default=0.1, metadata=_parses(number(0, 1000)))
    untrusted_latency: str = field(default="invalid", metadata=_parses(choice("invalid", "failure", "warn")))
    # A run whose senders, the load generator being the limit (a core's worth of CPU, a late
    # event loop), sent more than this fraction short of the target measured the generator: invalid.
    max_generator_shortfall: float = field(default=0.05, metadata=_parses(number(0, 1)))

    def __post_init__(self) -> None:
        for f in fields(self):
            try:
                f.metadata["parse"](getattr(self, f.name))
            except (ValueError, TypeError) as exc:
                raise OptionError(f"fail_{f.name}", str(exc)) from exc

    def options(self) -> JsonObject:
        """As SET options: each field as `fail_<field>`."""
        return {f"fail_{f.name}": getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> FailConditions:
        """From parsed SET options; what was not set keeps its default."""
        return cls(**{f.name: options[f"fail_{f.name}"] for f in fields(cls) if f"fail_{f.name}" in options})

    def stalled(self, idle_s: float, what: str) -> str | None:
        if self.stall_s and idle_s >= self.stall_s:
            return f"stalled: nothing {what} for {idle_s:.0f} s (bound {self.stall_s:g} s)"
        return None

    def latency(self, interval: HdrHistogram, what: str = "latency") -> str | None:
        """Judge one interval of corrected latency (µs; recorded with the receiver's clock
        correction where its senders run on other hosts), or of the figure `what` names (a
        requester's response time)."""
        if not self.latency_ms or not interval.get_total_count():
            return None
        if self.latency_policy == "hard":
            value_us, label = interval.get_max_value(), "max"
        else:
            value_us, label = value_at_percentile(interval, self.latency_percentile), f"p{self.latency_percentile:g}"
        if value_us > self.latency_ms * 1000:
            return f"{what} {label} {value_us / 1000:.3f} ms > bound {self.latency_ms:g} ms ({self.latency_policy})"
        return None

    def rate(self, sent: int, seconds: float, target_per_s: float) -> str | None:
        """Judge the rate achieved since warm-up against the target (all clients together)."""
        if not self.min_rate_ratio or not target_per_s or seconds <= 0:
            return None
        achieved = sent / seconds
        if achieved < self.min_rate_ratio * target_per_s:
            return (
                f"rate {achieved:.1f} msg/s is {achieved / target_per_s:.1%} of the target {target_per_s:g} msg/s "
                f"(bound {self.min_rate_ratio:.0%})"
            )
        return None
