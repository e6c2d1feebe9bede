"""The requester against an in-memory replier: known replies in, exact counts and legs out."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from protocol.fail import FailConditions
from protocol.hdr import read_total
from protocol.live import LiveCounters
from protocol.options import Duration, MessageSize, parse_delay
from protocol.ratefile import RateFileWriter
from protocol.results import ClientSent
from worker.drivers.base import ConnectError, OnMessages
from worker.drivers.memory import MemoryDriver
from worker.payload import HEADER_BYTES, HEADER_LAYOUT, REPLY_STAMPS, key_of, read_header
from worker.requester import RequesterPlan, RequesterRun
from worker.run import Watch

REPLIER = key_of("r1@elsewhere")
SKEW_NS = 2_000_000  # the replier's clock runs 2 ms ahead of the requester's
MS = 1_000_000


class EchoDriver(MemoryDriver):
    """Answers request n as `behaviour[n]` says: "reply", "late" (after the timeout), "twice",
    or "never"; each reply 1 ms on the way there, 5 ms at the replier and 1 ms back, stamped by
    a replier whose clock is SKEW_NS ahead."""

    def __init__(self, behaviour: dict[int, str]) -> None:
        super().__init__()
        self.behaviour = behaviour
        self.correlations: list[str] = []

    async def open_replies(self, on_replies: OnMessages) -> None:
        self.on_replies = on_replies

    def request(self, body: bytes, token: int, correlation: str) -> bool:
        self.correlations.append(correlation)
        self.bodies.append(body)
        _, _, _, sequence, _, sent = HEADER_LAYOUT.unpack_from(body)
        received = sent + 1 * MS + SKEW_NS
        replied = received + 5 * MS
        reply = body[:HEADER_BYTES] + REPLY_STAMPS.pack(REPLIER, received, replied)
        arrival = sent + 7 * MS  # by the requester's clock
        loop = asyncio.get_running_loop()
        what = self.behaviour.get(sequence, "reply")
        if what in ("reply", "twice"):
            loop.call_later(0.001, self.on_replies, [(reply, arrival)])
        if what == "twice":
            loop.call_later(0.002, self.on_replies, [(reply, arrival + MS)])
        if what == "late":
            loop.call_later(0.08, self.on_replies, [(reply, arrival + 80 * MS)])
        return False

    def answer_foreign(self, bodies: list[Any]) -> None:
        self.on_replies(bodies)


def _echoed(tmp_path: Path, driver: EchoDriver, messages: int, request_timeout_s: float, **more: Any) -> RequesterRun:
    """A requester of `messages` requests, one client, answered by `driver`."""
    plan = RequesterPlan(
        test_id="t-1",
        peer="s1@here",
        urls=["memory://x/q"],
        parallel_count=1,
        duration=Duration(messages=messages),
        size=MessageSize(100, 100),
        request_timeout_s=request_timeout_s,
        **more,
    )
    return RequesterRun(plan, RateFileWriter(tmp_path, "sender", {}), tmp_path, driver_for=lambda _c: driver)


def test_replies_timeouts_late_duplicate_and_foreign_are_counted_and_the_legs_corrected(tmp_path: Path) -> None:
    driver = EchoDriver({1: "never", 2: "late", 3: "twice"})
    run = _echoed(
        tmp_path,
        driver,
        6,
        0.03,
        clock_offsets_ns={REPLIER: SKEW_NS + 500_000},  # its offset from the coordinator ...
        own_offset_ns=500_000,  # ... and ours: the difference is the skew
    )

    async def scenario() -> None:
        await run.run()
        await asyncio.sleep(0.1)  # the late reply comes after its request's timeout
        driver.answer_foreign([(b"short", 0), (b"X" * 70, 0)])
        await run.close()

    asyncio.run(scenario())
    s = run.stats
    # 6 requests: 0, 3, 4 and 5 answered in time (3 twice), 1 never, 2 after its timeout.
    assert (s.sent, s.replies, s.timed_out, s.late, s.duplicates) == (6, 4, 2, 1, 1)
    assert dict(s.foreign) == {"no_header": 2}
    key = run.keys[0]
    assert driver.correlations == [f"{key:016x}:{n}" for n in range(6)]
    account = run.account()
    assert account.senders == {f"{key:016x}": ClientSent(client=0, sent=6)}
    assert account.request_reply is not None and account.request_reply.timed_out == 2
    # A row per request answered in time, stamped with the reply's arrival.
    assert run.rate_file.rows == 4
    # The legs as they were, not as the skewed stamps read: 1 ms there, 5 ms at the replier,
    # 1 ms back (the histograms' precision: 3 significant digits).
    for name, expected_us in (
        ("requester-request-leg.hlog", 1000),
        ("requester-replier.hlog", 5000),
        ("requester-reply-leg.hlog", 1000),
    ):
        total = read_total(tmp_path / name)
        assert total.get_total_count() == 4, name
        low, high = total.get_lowest_equivalent_value(expected_us), total.get_highest_equivalent_value(expected_us)
        assert low <= total.get_min_value() <= total.get_max_value() <= high, name
    # Response time: from each request's intended time to its reply's arrival, 7 ms after it
    # was sent: 7 ms and the request's own wait from intended to sent, exactly.
    response = read_total(tmp_path / "requester-response.hlog")
    assert response.get_total_count() == 4
    expected_us = sorted(
        (7 * MS + header.sent_ns - header.intended_ns) // 1000
        for header in (read_header(body) for body in driver.bodies)
        if header.sequence in (0, 3, 4, 5)
    )
    assert response.get_lowest_equivalent_value(expected_us[0]) <= response.get_min_value()
    assert response.get_max_value() <= response.get_highest_equivalent_value(expected_us[-1])


class PromptDriver(MemoryDriver):
    """Answers each request 2 ms later, stamped with the real arrival."""

    async def open_replies(self, on_replies: OnMessages) -> None:
        self.on_replies = on_replies

    def request(self, body: bytes, token: int, correlation: str) -> bool:
        self.bodies.append(body)
        _, _, _, _, _, sent = HEADER_LAYOUT.unpack_from(body)
        reply = body[:HEADER_BYTES] + REPLY_STAMPS.pack(REPLIER, sent, sent)

        def arrive() -> None:
            self.on_replies([(reply, time.time_ns())])

        asyncio.get_running_loop().call_later(0.002, arrive)
        return False


def test_the_think_time_as_lived_runs_from_a_reply_to_the_next_request(tmp_path: Path) -> None:
    """20 ms of think time between 10 requests: 9 gaps, each the planned 20 ms and the timer's
    lateness (a fraction of a millisecond), never less."""
    run = _run_to_its_end(tmp_path, PromptDriver(), 10, think_time=parse_delay("20ms"))
    assert (run.stats.replies, run.stats.thoughts) == (10, 9)
    closed = run.account().request_reply
    assert closed is not None and closed.think_time_measured_s is not None
    assert 0.020 <= closed.think_time_measured_s < 0.025, closed
    assert closed.think_time_mean_s == 0.020


def test_a_range_of_request_sizes_is_drawn_from_as_a_senders_is(tmp_path: Path) -> None:
    """A request/reply test given 100-2000 B sent every request at 2,000 B (hostile pass, #40:
    its MB/s, from the mean size, read half what went over the wire)."""
    driver = PromptDriver()
    _run_to_its_end(tmp_path, driver, 300, size=MessageSize(100, 2000))
    sizes = [len(body) for body in driver.bodies]
    assert len(sizes) == 300 and min(sizes) >= 100 and max(sizes) <= 2000
    assert len(set(sizes)) > 200 and 950 <= sum(sizes) / len(sizes) <= 1150  # uniform: mean 1,050


class SlowReplyTopicDriver(PromptDriver):
    """Its reply address cannot be made at the first try (a broker too busy to answer a topic's
    creation in time), and can at the second."""

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    async def open_replies(self, on_replies: OnMessages) -> None:
        self.tries += 1
        if self.tries == 1:
            raise ConnectError("memory://x/q: no answer to creating the topic r within 20 s", retry=True)
        await super().open_replies(on_replies)


def test_a_reply_address_that_cannot_be_made_at_once_is_tried_again(tmp_path: Path) -> None:
    driver = SlowReplyTopicDriver()
    run = _run_to_its_end(tmp_path, driver, 3)
    assert run.failure is None
    assert (driver.tries, run.stats.replies) == (2, 3)


def _run_to_its_end(tmp_path: Path, driver: MemoryDriver, messages: int, **plan: Any) -> RequesterRun:
    """One client's run of `messages` requests through `driver`, run and closed."""
    run = RequesterRun(
        RequesterPlan(
            test_id="t-1",
            peer="s1@here",
            urls=["memory://x/q"],
            parallel_count=1,
            duration=Duration(messages=messages),
            **({"size": MessageSize(100, 100)} | plan),
        ),
        RateFileWriter(tmp_path, "sender", {}),
        tmp_path,
        driver_for=lambda _c: driver,
    )

    async def scenario() -> None:
        await run.run()
        await run.close()

    asyncio.run(scenario())
    return run


def test_a_latency_bound_judges_the_response_time(tmp_path: Path) -> None:
    """Each reply arrives 7 ms after its request was sent (a 1 ms leg there): the fail condition
    on latency bounds the 7 ms a requester waits, and names it, where the replier's verdict
    once judged the 1 ms leg and a bound of 5 ms passed."""
    driver = EchoDriver({})
    run = _echoed(tmp_path, driver, 5, 1.0, clock_offsets_ns={REPLIER: SKEW_NS})

    watch = Watch(FailConditions(), origin=0.0, options_warm_up_s=0.0)

    async def scenario() -> LiveCounters:
        await run.run()
        assert run.verdict(FailConditions(latency_ms=5), watch, 1.0) is None  # no interval closed yet
        report = run.interval_report()
        await run.close()
        return report

    report = asyncio.run(scenario())
    assert report.response_p99_us is not None and 7000 <= report.response_p99_us < 8000
    reason = run.verdict(FailConditions(latency_ms=5), watch, 1.0)
    assert reason is not None and reason.startswith("response time p99 7."), reason
    assert reason.endswith("ms > bound 5 ms (soft)"), reason
    assert run.verdict(FailConditions(latency_ms=8), watch, 1.0) is None
