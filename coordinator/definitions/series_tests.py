"""Tests made of phases of one fixed-rate test: incremental, search, repeated and sweep; and
A-B-A, phases of a baseline test and a candidate."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from coordinator.definitions.fixed_rate import DefinitionError, FixedRateTest
from protocol.json_value import JsonObject
from protocol.sut_url import split_urls

__all__ = ["AbaTest", "IncrementalTest", "RepeatedTest", "SearchTest", "SweepTest"]


class _OnBase:
    """A test made of phases of `base`: its name and labels are the base test's."""

    base: FixedRateTest

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def labels(self) -> JsonObject:
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
        _times(self.times, "repeat a test at least twice")


@dataclass(frozen=True)
class AbaTest(_OnBase):
    """Baseline, candidate, baseline again: `times` runs of each, back to back on one cast of
    peers, and the candidate judged against both baselines (`maestro aba TEST_ID`, the series'
    report: reports.aba). One build's check, where a night against the test's history cannot
    see a step inside the noise (#39). `base` is the baseline; `candidate` the same test against
    the build to check (its URLs, usually: `dataclasses.replace(base, send_url=...)`). Neither
    leg is a run of the test's history."""

    base: FixedRateTest
    candidate: FixedRateTest
    times: int = 5

    KIND = "aba"

    def __post_init__(self) -> None:
        _times(self.times, "an A-B-A test needs at least 2 runs a leg (its noise is their spread)")
        for side in ("base", "candidate"):
            if not isinstance(getattr(self, side), FixedRateTest):
                raise DefinitionError(f"{side}: a test (FixedRateTest, RequestReplyTest…), not {getattr(self, side)!r}")
        if type(self.candidate) is not type(self.base):
            raise DefinitionError(
                f"the candidate is a {type(self.candidate).__name__}, the baseline a {type(self.base).__name__}:"
                " an A-B-A test compares the same test on two builds"
            )
        if differ := _beyond_where(self.base, self.candidate):
            raise DefinitionError(
                f"the candidate differs from the baseline in {', '.join(differ)}: an A-B-A test compares the same "
                "test on two builds (where they are: a URL's host, port and path, inspectors, agents, labels); a "
                "SweepTest compares settings"
            )


# What may differ between an A-B-A test's baseline and candidate: where the build under test is.
_WHERE = frozenset({"inspectors", "agents", "labels", "name"})
# URLs, by what they ask of it: their scheme (the protocol) and query (the client's settings).
_URLS = frozenset({"send_url", "receive_url", "request_url", "reply_url"})


def _asked(urls: str | list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    return [
        (urlsplit(u).scheme, sorted(parse_qsl(urlsplit(u).query, keep_blank_values=True))) for u in split_urls(urls)
    ]


def _beyond_where(base: FixedRateTest, candidate: FixedRateTest) -> list[str]:
    """The fields in which `candidate` asks other than `base` of the SUT: all but where the
    SUT is (a URL by its scheme and query, a flow by its counts, rates and URLs so, an action by
    when and what, not by which agent)."""
    differ = []
    for f in dataclasses.fields(base):
        if f.name in _WHERE:
            continue
        mine, theirs = getattr(base, f.name), getattr(candidate, f.name)
        if f.name == "receive_url":  # none: the send URL's
            mine, theirs = mine or base.send_url, theirs or candidate.send_url
        if f.name in _URLS:
            mine, theirs = _asked(mine), _asked(theirs)
        elif f.name == "flows":
            mine, theirs = (
                [(dataclasses.replace(x, send_url="", receive_url=""), *map(_asked, x.urls())) for x in v]
                for v in (mine, theirs)
            )
        elif f.name == "actions":
            mine, theirs = ([(a.at_s, a.command, a.args) for a in v] for v in (mine, theirs))
        if mine != theirs:
            differ.append(f.name)
    return differ


def _times(times: object, least_why: str) -> None:
    """A number of runs: a whole number, at least 2 (`least_why`); 2.5 ran a leg once."""
    if isinstance(times, bool) or not isinstance(times, int) or times < 2:
        raise DefinitionError(f"times {times!r}: {least_why}")


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

    def points(self) -> list[JsonObject]:
        return [dict(zip(self.grid, values, strict=True)) for values in itertools.product(*self.grid.values())]

    def at(self, point: JsonObject) -> FixedRateTest:
        test = self.base
        fields: dict[str, Any] = {}  # keyword arguments of replace()
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

    each = split_urls(urls)  # `U1,U2`: the query goes on each, not on the last alone
    return one(each[0]) if len(each) == 1 else [one(u) for u in each]
