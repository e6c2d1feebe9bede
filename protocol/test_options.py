"""A test's options as a peer holds them: one typed, frozen record with unit-bearing names and
the defaults in one place, built from what SET gave (parsed by `protocol.options`, the one
parser family) every time SET changes it. Daemons read fields, never a dict with a default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from protocol.fail import FailConditions
from protocol.options import Delay, Duration, MessageSize, ProfileStep

__all__ = ["TestOptions"]


@dataclass(frozen=True)
class TestOptions:
    test_id: str = ""
    send_url: tuple[str, ...] = ()
    receive_url: tuple[str, ...] = ()
    rate_per_s: float = 0.0  # per client; 0 = as fast as the SUT takes it
    arrivals: str = "uniform"  # or "poisson"
    profile: tuple[ProfileStep, ...] = ()
    parallel_count: int = 1
    processes: int = 1
    message_size: MessageSize = field(default_factory=lambda: MessageSize(256, 256))
    duration: Duration = field(default_factory=lambda: Duration(seconds=60.0))  # a time or a message count
    warm_up_s: float = 0.0
    confirm_window: int = 0  # 0: the driver's own window
    processing_delay_ms: float = 0.0
    start_jitter_s: float = 0.0
    reconnect_budget_s: float = 60.0
    precise_timing: bool = False
    fail: FailConditions = field(default_factory=FailConditions)
    management_url: str = ""
    inspector: str = ""
    inspector_interval_s: float = 10.0
    data_server_url: str = ""
    upload_retry_s: float = 120.0
    labels: Mapping[str, Any] = field(default_factory=dict)
    request_reply: bool = False  # senders request and wait, receivers answer (a closed system)
    outstanding: int = 1
    think_time: Delay = field(default_factory=Delay)
    service_time: Delay = field(default_factory=Delay)
    request_timeout_s: float = 5.0

    __test__ = False  # not a pytest class

    @property
    def duration_s(self) -> float | None:
        return self.duration.seconds

    @property
    def count(self) -> int | None:
        return self.duration.messages

    @classmethod
    def from_parsed(cls, options: Mapping[str, Any]) -> TestOptions:
        """From `parse_options`' output; anything not set keeps its default."""
        given: dict[str, Any] = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        for name in ("send_url", "receive_url", "profile"):
            if name in given:
                given[name] = tuple(given[name])
        given["fail"] = FailConditions.from_options(options)
        return cls(**given)
