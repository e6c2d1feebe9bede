"""What a test script declares: plain dataclasses, checked when made.

    FixedRateTest(send_url="amqp://sut:5672/q", rate=1000, size=256, parallel=5, duration="10m")

`rate` is messages per second per client (as PerfTest's --rate per producer); a sender runs
`parallel` clients, so one sender's target is rate x parallel. `rate=0` is unbounded: as fast
as the SUT takes it.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from protocol.options import (
    OptionError,
    parse_duration,
    parse_message_size,
    parse_options,
    parse_profile,
    parse_seconds,
)

__all__ = [
    "Action",
    "DefinitionError",
    "Fail",
    "FixedRateTest",
    "Flow",
    "IncrementalTest",
    "RepeatedTest",
    "SearchTest",
    "SweepTest",
    "TestDefinition",
    "UnboundedTest",
    "to_dict",
]


class DefinitionError(ValueError):
    pass


@dataclass(frozen=True)
class Fail:
    """Fail conditions; the first to trip stops the test and is its reason.

    latency_ms: bound on the corrected latency of each 1 s interval (0 = none), at
    `latency_percentile` (soft) or on the interval's max (hard); min_rate_ratio: achieved /
    target rate of each sender since warm-up; max_loss_ratio: lost / sent over the whole test
    (checked on the merged sequence numbers); stall_s: no progress this long; inspector_errors:
    this many failed samples in a row from an inspector fail the test (0: they are only counted)."""

    latency_ms: float = 0.0
    latency_percentile: float = 99.0
    latency_policy: str = "soft"
    min_rate_ratio: float = 0.0
    max_loss_ratio: float = 0.0
    stall_s: float = 30.0
    inspector_errors: int = 0

    def options(self) -> dict[str, Any]:
        return {
            "fail_latency_ms": self.latency_ms,
            "fail_latency_percentile": self.latency_percentile,
            "fail_latency_policy": self.latency_policy,
            "fail_min_rate_ratio": self.min_rate_ratio,
            "fail_max_loss_ratio": self.max_loss_ratio,
            "fail_stall_s": self.stall_s,
            "fail_inspector_errors": self.inspector_errors,
        }


@dataclass(frozen=True)
class Flow:
    """One path through the SUT: `senders` workers publish to send_url, `receivers` workers
    consume from receive_url (the same URL when not given). A test may hold several flows,
    e.g. two queues, one fed by two senders and one by five (seed 004 §7.4)."""

    send_url: str | list[str]
    receive_url: str | list[str] = ""
    senders: int = 1
    receivers: int = 1
    parallel: int = 1  # clients per sender and per receiver
    rate: float | None = None  # per client; None: the test's

    def urls(self) -> tuple[list[str], list[str]]:
        send = [self.send_url] if isinstance(self.send_url, str) else list(self.send_url)
        receive = self.receive_url or send
        return send, [receive] if isinstance(receive, str) else list(receive)


@dataclass(frozen=True)
class Action:
    """At `at` into the load (a time, "3m"), ask agent `agent` to run `command` with `args`:
    a built-in action on a configured service (`Action("30s", "a1", "restart", ("broker",))`,
    `("broker", "duration_s=10")` to undo it after 10 s) or a handler by name."""

    at: str | float
    agent: str
    command: str
    args: tuple[str, ...] = ()

    @property
    def at_s(self) -> float:
        return parse_seconds(self.at)


@dataclass(frozen=True)
class FixedRateTest:
    """Fixed rate for a time or a message count, through one flow or several."""

    send_url: str | list[str] = ""
    receive_url: str | list[str] = ""
    rate: float = 100.0
    size: int | str = 256
    parallel: int = 1
    duration: str | float = "60s"  # a number is seconds; `count` bounds by messages instead
    count: int | None = None  # messages per sender
    warm_up: str | float = 0
    senders: int = 1
    receivers: int = 1
    flows: tuple[Flow, ...] = ()
    fail: Fail = field(default_factory=Fail)
    options: dict[str, Any] = field(default_factory=dict)  # more SET options: confirm_window, processes…
    # A test profile (seed 004 §3.1): (at, rate per client, clients) steps changing the load
    # during the run, e.g. ((0, 100, 2), ("30s", 200, 4)); the first at 0. Overrides rate/parallel
    # for senders.
    profile: tuple[tuple[str | float, float, int], ...] = ()
    inspectors: tuple[str, ...] = ()  # "name" or "name=management-url"
    agents: tuple[str, ...] = ()  # agent peer names that join the test (those named in actions do too)
    actions: tuple[Action, ...] = ()  # fault actions on a schedule
    labels: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    drain_timeout_s: float = 60.0

    KIND = "fixed-rate"

    def __post_init__(self) -> None:
        if not self.flows and not self.send_url:
            raise DefinitionError("a test needs send_url (or flows)")
        try:
            self.duration_option()
            parse_message_size(self.size)
            parse_seconds(self.warm_up)
            parse_options(self.options)
        except (ValueError, OptionError) as exc:
            raise DefinitionError(str(exc)) from exc
        if self.profile:
            try:
                parse_profile([list(step) for step in self.profile])
            except ValueError as exc:
                raise DefinitionError(f"profile: {exc}") from exc
        for action in self.actions:
            try:
                action.at_s  # noqa: B018 - parses the time
            except ValueError as exc:
                raise DefinitionError(f"action {action.command}: {exc}") from exc
        if self.rate < 0 or self.parallel < 1 or self.senders < 0 or self.receivers < 0:
            raise DefinitionError("rate must be >= 0, parallel >= 1, senders and receivers >= 0")

    def duration_option(self) -> str | int:
        if self.count is not None:
            return parse_duration(int(self.count)).messages or 0
        value = f"{self.duration:g}s" if isinstance(self.duration, int | float) else self.duration
        parse_duration(value)
        if parse_duration(value).messages is not None:
            raise DefinitionError(f"duration {self.duration!r}: give a time; a message count goes in count=")
        return value

    def all_flows(self) -> tuple[Flow, ...]:
        if self.flows:
            return self.flows
        return (Flow(self.send_url, self.receive_url, self.senders, self.receivers, self.parallel),)

    def sender_options(self, flow: Flow) -> dict[str, Any]:
        send, _ = flow.urls()
        profile = {}
        if self.profile:
            steps = [list(step) for step in self.profile]
            profile = {"profile": steps, "parallel_count": max(int(step[2]) for step in steps)}
        return {
            **self.options,
            "send_url": send,
            "rate_per_s": self.rate if flow.rate is None else flow.rate,
            "parallel_count": flow.parallel,
            "duration": self.duration_option(),
            "message_size": self.size,
            "warm_up_s": parse_seconds(self.warm_up),
            **self.fail.options(),
            **profile,
        }

    def receiver_options(self, flow: Flow) -> dict[str, Any]:
        _, receive = flow.urls()
        return {
            **{k: v for k, v in self.options.items() if k not in ("duration",)},
            "receive_url": receive,
            "parallel_count": flow.parallel,
            "warm_up_s": parse_seconds(self.warm_up),
            **self.fail.options(),
        }

    def target_rate(self) -> float:
        """All senders' clients together, msg/s (0 = unbounded); a profile's peak."""
        if self.profile:
            peak = max(float(rate) * int(parallel) for _, rate, parallel in self.profile)
            return peak * sum(f.senders for f in self.all_flows())
        return sum((self.rate if f.rate is None else f.rate) * f.parallel * f.senders for f in self.all_flows())

    def expected_seconds(self) -> float | None:
        return parse_seconds(self.duration) if self.count is None else None

    def with_load(self, rate: float, parallel: int) -> FixedRateTest:
        flows = tuple(dataclasses.replace(f, rate=None, parallel=parallel) for f in self.flows)
        return dataclasses.replace(self, rate=rate, parallel=parallel, flows=flows)


def UnboundedTest(**fields: Any) -> FixedRateTest:  # noqa: N802 - reads as a test kind, like the others
    """As fast as the SUT takes it (rate 0), for a time or a message count (seed 004 Table 6.2)."""
    return FixedRateTest(**{"rate": 0.0, **fields})


class _OnBase:
    """A test made of phases of `base`: its name and labels are the base test's."""

    base: FixedRateTest

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def labels(self) -> dict[str, Any]:
        return self.base.labels


@dataclass(frozen=True)
class IncrementalTest(_OnBase):
    """Maestro's incremental test: raise the rate by `rate_step` from `initial_rate` to
    `ceiling_rate`; past the ceiling, raise the parallel count by `parallel_step` and start the
    rate again; stop at the first step a fail condition trips. The result names the highest
    passing step: the maximum sustainable throughput."""

    base: FixedRateTest
    initial_rate: float
    ceiling_rate: float
    rate_step: float
    initial_parallel: int = 1
    ceiling_parallel: int = 1
    parallel_step: int = 1

    KIND = "incremental"

    def __post_init__(self) -> None:
        if self.rate_step <= 0 or self.initial_rate <= 0 or self.ceiling_rate < self.initial_rate:
            raise DefinitionError("need 0 < initial_rate <= ceiling_rate and rate_step > 0")
        if self.parallel_step < 1 or self.initial_parallel < 1 or self.ceiling_parallel < self.initial_parallel:
            raise DefinitionError("need 1 <= initial_parallel <= ceiling_parallel and parallel_step >= 1")

    def steps(self) -> list[tuple[float, int]]:
        points = []
        parallel = self.initial_parallel
        while parallel <= self.ceiling_parallel:
            rate = self.initial_rate
            while rate <= self.ceiling_rate + 1e-9:
                points.append((rate, parallel))
                rate += self.rate_step
            parallel += self.parallel_step
        return points


@dataclass(frozen=True)
class SearchTest(_OnBase):
    """A faster search than the incremental test: bisection on the rate per client between
    `low_rate` and `high_rate` under the base test's fail conditions (a latency bound, usually),
    until the step between passing and failing is under `resolution` of the rate. Every point
    measured is kept: the latency-vs-throughput curve."""

    base: FixedRateTest
    low_rate: float
    high_rate: float
    resolution: float = 0.05
    max_steps: int = 10

    KIND = "search"

    def __post_init__(self) -> None:
        if not 0 < self.low_rate < self.high_rate:
            raise DefinitionError("need 0 < low_rate < high_rate")
        if not 0 < self.resolution < 1 or self.max_steps < 2:
            raise DefinitionError("need 0 < resolution < 1 and max_steps >= 2")


@dataclass(frozen=True)
class RepeatedTest(_OnBase):
    """The same test `times` times; the figures get a mean and a 95 % confidence interval
    (seed 003: one run is an anecdote)."""

    base: FixedRateTest
    times: int = 3

    KIND = "repeated"

    def __post_init__(self) -> None:
        if self.times < 2:
            raise DefinitionError("repeat a test at least twice")


@dataclass(frozen=True)
class SweepTest(_OnBase):
    """One test per point of a grid, and a comparison (seed 001: batch size x linger x
    partitions). A key is a test field (`rate`, `parallel`, `size`), a SET option
    (`option.confirm_window`) or a SUT URL query parameter (`url.linger_ms`, set on the send and
    receive URLs). Put `{test_id}` in a URL for a fresh queue or topic per point."""

    base: FixedRateTest
    grid: dict[str, list[Any]]

    KIND = "sweep"

    def __post_init__(self) -> None:
        if not self.grid or any(not values for values in self.grid.values()):
            raise DefinitionError("a sweep needs a grid: each key with at least one value")
        for point in self.points():
            self.at(point)  # a bad key or value is refused now, not after hours of earlier points

    def points(self) -> list[dict[str, Any]]:
        return [dict(zip(self.grid, values, strict=True)) for values in itertools.product(*self.grid.values())]

    def at(self, point: dict[str, Any]) -> FixedRateTest:
        test = self.base
        fields: dict[str, Any] = {}
        options = dict(test.options)
        query: dict[str, str] = {}
        for key, value in point.items():
            if key.startswith("option."):
                options[key.removeprefix("option.")] = value
            elif key.startswith("url."):
                query[key.removeprefix("url.")] = str(value)
            elif key in {"rate", "parallel", "size", "duration", "count", "warm_up", "senders", "receivers"}:
                fields[key] = value
            else:
                raise DefinitionError(
                    f"sweep key {key!r}: a test field (rate, parallel, size…), option.NAME or url.NAME"
                )
        if query:
            if test.send_url:
                fields["send_url"] = _with_query(test.send_url, query)
                fields["receive_url"] = _with_query(test.receive_url or test.send_url, query)
            flows = []
            for f in test.flows:
                receive = _with_query(f.receive_url or f.send_url, query)
                flows.append(dataclasses.replace(f, send_url=_with_query(f.send_url, query), receive_url=receive))
            fields["flows"] = tuple(flows)
        return dataclasses.replace(test, options=options, **fields)


def _with_query(urls: str | list[str], query: dict[str, str]) -> str | list[str]:
    def one(url: str) -> str:
        parts = urlsplit(url)
        pairs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in query]
        # Unquoted, so `%d` destinations and `{test_id}` placeholders survive.
        joined = "&".join(f"{k}={v}" for k, v in [*pairs, *query.items()])
        return urlunsplit(parts._replace(query=joined))

    return one(urls) if isinstance(urls, str) else [one(u) for u in urls]


TestDefinition = FixedRateTest | IncrementalTest | SearchTest | RepeatedTest | SweepTest


def to_dict(test: TestDefinition) -> dict[str, Any]:
    """The definition as stored with the results (test.json)."""
    return {"kind": test.KIND, **dataclasses.asdict(test)}
