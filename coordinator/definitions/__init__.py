"""What a test script declares: plain dataclasses, checked when made.

    FixedRateTest(send_url="amqp://sut:5672/q", rate=1000, size=256, parallel=5, duration="10m")

A fixed-rate test (`coordinator.definitions.fixed_rate`) is one phase of load; the other kinds
(`coordinator.definitions.series_tests`) are made of phases of one.
"""

from __future__ import annotations

import dataclasses

from coordinator.definitions.fixed_rate import (
    Action,
    DefinitionError,
    Fail,
    FixedRateTest,
    Flow,
    UnboundedTest,
    span_text,
)
from coordinator.definitions.request_reply import RequestReplyTest
from coordinator.definitions.series_tests import AbaTest, IncrementalTest, RepeatedTest, SearchTest, SweepTest
from protocol.json_value import JsonObject
from protocol.secrets import redact_text
from protocol.sut_url import split_urls

__all__ = [
    "AbaTest",
    "Action",
    "DefinitionError",
    "Fail",
    "FixedRateTest",
    "Flow",
    "IncrementalTest",
    "RepeatedTest",
    "RequestReplyTest",
    "SearchTest",
    "SweepTest",
    "TestDefinition",
    "UnboundedTest",
    "to_dict",
    "workload",
    "workload_labels",
]

TestDefinition = FixedRateTest | IncrementalTest | SearchTest | RepeatedTest | SweepTest | AbaTest


def to_dict(test: TestDefinition) -> JsonObject:
    """The definition as stored with the results (test.json)."""
    return {"kind": test.KIND, **dataclasses.asdict(test)}


def workload(test: TestDefinition) -> str:
    """The test as it will run, in a line, as the console, test.json, the report and the live page
    state it first: kind (as test.json names it), the load (rate per client and in all; a closed
    system's clients, think, service and timeout times), clients per side, size, length, where
    (a URL's password hidden), and the options given."""
    base = test if isinstance(test, FixedRateTest) else test.base  # a series' steps are its base test's
    kind = "unbounded" if test.KIND == "fixed-rate" and not base.rate else test.KIND
    if isinstance(base, RequestReplyTest):
        load = (
            f"closed: {base.outstanding} outstanding per client, think time {span_text(base.think_time)}, "
            f"service time {span_text(base.service_time)}, request timeout {span_text(base.request_timeout)}"
        )
        clients = f"{base.parallel} client(s) in each of {base.senders} requester(s); {base.receivers} replier(s)"
    else:
        load = f"{base.rate:g} msg/s per client, {base.target_rate():g} in all" if base.rate else "as fast as it goes"
        clients = f"{base.parallel} client(s) in each of {base.senders} sender(s) and {base.receivers} receiver(s)"
    load, clients = _series_load(test, load, clients)
    urls = ", ".join(split_urls(base.send_url))
    # The SET options a script or --option gave (the drivers' own defaults are the report's).
    options = "".join(f"; {key}={value}" for key, value in sorted(base.options.items()))
    return redact_text(
        f"{kind}: {load}; {clients}; {_size(base)}; {_length(base)}, warm-up {span_text(base.warm_up)}; {urls}{options}"
    )


def workload_labels(test: FixedRateTest) -> dict[str, str]:
    """A phase's workload in parts (protocol.live.WORKLOAD_LABELS), for /metrics' labels: the rate
    per client (0: as fast as it goes; "closed": a closed system's), clients per sender, size,
    length, warm-up and where (a URL's password hidden)."""
    closed = isinstance(test, RequestReplyTest)
    return {
        "rate_per_client": "closed" if closed else f"{test.rate:g}",
        "target_rate": "closed" if closed else f"{test.target_rate():g}",
        "clients": str(test.parallel),
        "senders": str(test.senders),
        "receivers": str(test.receivers),
        "message_size": _size(test),
        "length": _length(test),
        "warm_up": span_text(test.warm_up),
        "destination": redact_text(", ".join(split_urls(test.send_url))),
    }


def _size(test: FixedRateTest) -> str:
    size = str(test.size).strip()
    return f"{size} B" if size.lstrip("~").replace("-", "").isdigit() else size  # "1MiB" says its unit


def _length(test: FixedRateTest) -> str:
    return f"{test.count:,} messages per sender" if test.count is not None else span_text(test.duration)


def _series_load(test: TestDefinition, load: str, clients: str) -> tuple[str, str]:
    """A series' load and clients as its steps run them, not as its base test states them (an
    incremental test from 10 msg/s per client once read "100 msg/s per client", its base's)."""
    if isinstance(test, IncrementalTest):
        load = f"{test.initial_rate:g} to {test.ceiling_rate:g} msg/s per client in steps of {test.rate_step:g}"
        if test.ceiling_parallel > test.initial_parallel:
            load += f", at {test.initial_parallel} to {test.ceiling_parallel} clients in steps of {test.parallel_step}"
            clients = clients.replace(f"{test.base.parallel} client(s)", "the step's client(s)", 1)
        else:
            clients = clients.replace(f"{test.base.parallel} client(s)", f"{test.initial_parallel} client(s)", 1)
    elif isinstance(test, SearchTest):
        load = f"searched between {test.low_rate:g} and {test.high_rate:g} msg/s per client to {test.resolution:.0%}"
    elif isinstance(test, RepeatedTest):
        load += f", {test.times} times"
    elif isinstance(test, AbaTest):
        candidate = ", ".join(split_urls(test.candidate.send_url))
        load += f", {test.times} times as the baseline, the candidate ({candidate}), the baseline again"
    elif isinstance(test, SweepTest):
        grid = " x ".join(f"{key} {', '.join(str(v) for v in values)}" for key, values in test.grid.items())
        # The grid's rate or clients, not the base's (a sweep of rate 20, 40 read "100 msg/s per client").
        if "rate" in test.grid:
            load = "the point's msg/s per client"
        elif "parallel" in test.grid and test.base.rate:  # no total: it is the point's
            load = f"{test.base.rate:g} msg/s per client"
        if "parallel" in test.grid:
            clients = clients.replace(f"{test.base.parallel} client(s)", "the point's client(s)", 1)
        load += f", each point of {grid}"
    return load, clients
