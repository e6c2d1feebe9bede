"""The sender's loop against an in-memory driver: counts, order, the window, lag, errors by kind.

Known answers: the schedule fixes how many messages a run holds, and the driver fixes when and
how each is settled, so every count below is exact.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path

import pytest
from support.waiting import until

from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter, read_rate_file
from worker.drivers.base import SendError
from worker.drivers.memory import MemoryDriver
from worker.payload import make_body, read_header
from worker.sender import SenderPlan, SenderRun


def _plan(**overrides: object) -> SenderPlan:
    fields: dict[str, object] = {
        "test_id": "t-1",
        "peer": "s1@host",
        "urls": ["memory://x/q"],
        "rate_per_s": 0.0,
        "parallel_count": 1,
        "duration": Duration(messages=100),
        "size": MessageSize(64, 64),
    }
    fields.update(overrides)
    return SenderPlan(**fields)  # type: ignore[arg-type]


def _run(plan: SenderPlan, tmp_path: Path, drivers: dict[int, MemoryDriver]) -> SenderRun:
    return SenderRun(plan, RateFileWriter(tmp_path, "sender", {}), driver_for=drivers.__getitem__)


def _rows(run: SenderRun) -> list[tuple[int, int]]:
    return [row for path in run.rate_file.paths for row in read_rate_file(path)]


@pytest.mark.parametrize("batches", [False, True], ids=["one-by-one", "batches"])
def test_every_message_goes_once_in_order_with_its_header(tmp_path: Path, batches: bool) -> None:
    drivers = {0: MemoryDriver(0, batches=batches), 1: MemoryDriver(1, batches=batches)}
    run = _run(_plan(parallel_count=2, duration=Duration(messages=101)), tmp_path, drivers)
    asyncio.run(run.run())
    run.rate_file.close()
    assert run.failure is None
    assert run.stats.sent == 101 and dict(run.stats.sent_per_client) == {0: 51, 1: 50}
    assert not run.stats.errors
    for client, driver in drivers.items():
        headers = [read_header(body) for body in driver.bodies]
        assert [h.sequence for h in headers] == list(range(len(headers)))
        assert {h.sender_key for h in headers} == {run.keys[client]}
        assert all(len(body) == 64 for body in driver.bodies)
        assert all(h.sent_ns >= h.intended_ns for h in headers)
        assert driver.closed
        # Each body is its header and the filler, whether packed one by one or built a burst at
        # a time for a driver that takes bursts whole.
        filler = random.Random(0).randbytes(64)
        assert all(body == make_body(read_header(body), 64, filler) for body in driver.bodies)
        # Unbounded: bursts of due messages, taken whole by a batching driver, which takes every
        # message of a burst at once: one sent stamp for a burst built at once.
        assert not batches or max(driver.bursts) > 1
        if batches:
            start = 0
            for size in driver.bursts:
                stamps = {header.sent_ns for header in headers[start : start + size]}
                assert len(stamps) == 1 or size < 16
                start += size
    # The rate rows are the headers' stamps (intended and sent, µs), in bursts both below and
    # above the size where they are made a column at a time.
    stamps = [read_header(body) for driver in drivers.values() for body in driver.bodies]
    assert sorted(_rows(run)) == sorted((h.intended_ns // 1000, h.sent_ns // 1000) for h in stamps)
    assert run.stats.lag_us.get_total_count() == 101


def test_a_driver_that_takes_bursts_whole_gets_bursts_of_up_to_1024_with_every_header_right(tmp_path: Path) -> None:
    driver = MemoryDriver(batches=True)
    run = _run(_plan(duration=Duration(messages=5000)), tmp_path, {0: driver})
    asyncio.run(run.run())
    run.rate_file.close()
    assert run.stats.sent == 5000 and not run.stats.errors
    assert 256 < max(driver.bursts) <= 1024  # beyond the one-by-one bound, within its own
    headers = [read_header(body) for body in driver.bodies]
    assert [h.sequence for h in headers] == list(range(5000))
    filler = random.Random(0).randbytes(64)
    assert all(body == make_body(header, 64, filler) for body, header in zip(driver.bodies, headers, strict=True))
    assert sorted(_rows(run)) == sorted((h.intended_ns // 1000, h.sent_ns // 1000) for h in headers)


def test_a_fast_bounded_schedule_goes_in_bursts_a_quarter_millisecond_apart(tmp_path: Path) -> None:
    """At 40,000 msg/s a message is due every 25 µs; a burst per wake-up of the messages due
    within 50 µs (two or three) cost more than the sending. A client starts a burst at most every
    250 µs of its schedule, with what fell due since, and every message still goes, in order."""
    driver = MemoryDriver(batches=True)
    run = _run(_plan(rate_per_s=40_000, duration=Duration(messages=4000)), tmp_path, {0: driver})
    asyncio.run(run.run())
    run.rate_file.close()
    assert run.stats.sent == 4000 and not run.stats.errors
    headers = [read_header(body) for body in driver.bodies]
    assert [h.sequence for h in headers] == list(range(4000))
    firsts, at = [], 0
    for size in driver.bursts:
        firsts.append(headers[at])
        at += size
    # A burst starts once its schedule is 250 µs past the one before's first message (less the
    # 50 µs a message may go early), however late that one went: late, it goes at once.
    waits_us = [(later.sent_ns - earlier.intended_ns) / 1000 for earlier, later in itertools.pairwise(firsts)]
    assert min(waits_us) >= 200, sorted(waits_us)[:5]


def test_the_window_bounds_what_is_in_flight_and_the_wait_is_lag_not_failure(tmp_path: Path) -> None:
    driver = MemoryDriver(confirm_delay_s=None)  # nothing settles until the test says so
    run = _run(_plan(confirm_window=5, duration=Duration(messages=12)), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: len(driver.tokens) == 5)
        await asyncio.sleep(0.2)
        assert driver.tokens == [0, 1, 2, 3, 4]  # the window is full: the sender waits
        assert run.interval_report().in_flight == 5  # what a late sender's reason tells
        waiting = run.interval_report()  # an interval in which nothing was sent has no lag, not 0
        assert (waiting.lag_p50_us, waiting.lag_p99_us, waiting.lag_max_us) == (None, None, None)
        driver.release(3)
        await until(lambda: len(driver.tokens) == 8)
        await asyncio.sleep(0.05)
        assert driver.tokens == list(range(8))
        driver.release(100)
        await until(lambda: len(driver.tokens) == 12)
        driver.release(100)
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    assert driver.max_in_flight == 5
    assert run.stats.sent == 12 and not run.stats.errors and run.failure is None
    assert run.stats.in_flight == 0
    # Messages 5..7 waited ~0.2 s for room: schedule lag, as an unbounded schedule intended them at once.
    assert run.stats.lag_us.get_max_value() >= 150_000


def test_a_full_window_reopens_once_a_sixteenth_of_it_settled(tmp_path: Path) -> None:
    # Window 32: full at 32 in flight, open again at 30 (32 - 32 // 16), and then the sender
    # fills it up to the window in one go.
    driver = MemoryDriver(confirm_delay_s=None)
    run = _run(_plan(confirm_window=32, duration=Duration(messages=40)), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: len(driver.tokens) == 32)
        driver.release(1)
        await asyncio.sleep(0.2)
        assert len(driver.tokens) == 32  # 31 in flight: above the low-water mark, still waiting
        driver.release(1)
        await until(lambda: len(driver.tokens) >= 34)
        await asyncio.sleep(0.05)
        assert len(driver.tokens) == 34  # 30 in flight: reopened, and filled to the window
        driver.release(100)
        await until(lambda: len(driver.tokens) == 40)
        driver.release(100)
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    assert driver.max_in_flight == 32
    assert run.stats.sent == 40 and not run.stats.errors and run.failure is None


def test_a_slow_acknowledgement_does_not_slow_the_schedule(tmp_path: Path) -> None:
    # 100 msg/s for 0.3 s with every confirm taking 0.5 s. A send that waited for its confirm
    # (a closed loop) would send the 30th message ~15 s late; the open model sends each on time.
    driver = MemoryDriver(confirm_delay_s=0.5)
    run = _run(_plan(rate_per_s=100.0, duration=Duration(seconds=0.3)), tmp_path, {0: driver})
    asyncio.run(run.run())
    run.rate_file.close()
    assert run.stats.sent == 30 and not run.stats.errors
    assert driver.max_in_flight == 30  # all in flight at once: nothing waited for a confirm
    assert run.stats.lag_us.get_max_value() < 250_000


def test_refused_and_unconfirmed_messages_count_by_kind_and_stay_sent(tmp_path: Path) -> None:
    def verdict(token: int) -> SendError | None:
        return SendError("nacked", retry=False, kind="nacked") if token % 3 == 0 else None

    driver = MemoryDriver(verdict=verdict)
    run = _run(_plan(duration=Duration(messages=30)), tmp_path, {0: driver})
    asyncio.run(run.run())
    run.rate_file.close()
    # Sequence numbers are spent: the receivers count the nacked ones as lost if they never arrive.
    assert run.stats.sent == 30
    assert dict(run.stats.errors) == {"nacked": 10}


@pytest.mark.parametrize("batches", [False, True], ids=["one-by-one", "batches"])
def test_a_disconnected_send_is_tried_again_with_the_same_sequence(tmp_path: Path, batches: bool) -> None:
    driver = MemoryDriver(down_for=lambda token, attempt: token == 4 and attempt < 2, batches=batches)
    run = _run(_plan(duration=Duration(messages=10)), tmp_path, {0: driver})
    asyncio.run(run.run())
    run.rate_file.close()
    assert driver.tokens == list(range(10))
    assert driver.attempts[4] == 3
    assert run.stats.sent == 10 and run.stats.retries == 2
    assert dict(run.stats.errors) == {"disconnected": 2}
    assert len(run.stats.disconnects_ns) == 1  # one outage ridden out, however many tries
    # The stamps of the tries that met the closed connection are not kept: one row and one lag
    # sample per message, each message's header stamped when it finally went.
    rows = _rows(run)
    assert len(rows) == 10 and run.stats.lag_us.get_total_count() == 10
    sent_us = sorted(actual for _, actual in rows)
    assert sent_us == sorted(read_header(body).sent_ns // 1000 for body in driver.bodies)


@pytest.mark.parametrize("batches", [False, True], ids=["one-by-one", "batches"])
def test_a_message_refused_outright_is_counted_by_kind_and_never_in_flight(tmp_path: Path, batches: bool) -> None:
    driver = MemoryDriver(confirm_delay_s=None, refuse=lambda token: token % 4 == 1, batches=batches)
    run = _run(_plan(duration=Duration(messages=12)), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: sum(driver.attempts.values()) == 12)
        driver.release(100)  # the 9 taken settle; the 3 refused were never in flight
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    assert run.stats.sent == 12  # their numbers are spent: the receivers count them lost
    assert dict(run.stats.errors) == {"refused": 3}  # not "unconfirmed" as well


def test_what_never_settles_is_counted_unconfirmed_when_the_run_ends(tmp_path: Path) -> None:
    driver = MemoryDriver(confirm_delay_s=None)
    run = _run(_plan(duration=Duration(messages=4)), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: len(driver.tokens) == 4)
        driver.release(1)
        run.stop()  # stops the settle wait too
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    assert run.stats.sent == 4
    assert dict(run.stats.errors) == {"unconfirmed": 3}
    assert run.stats.in_flight == 0  # counted failed, no longer waited for


def test_a_client_down_past_its_budget_fails_the_run_and_ends_the_others(tmp_path: Path) -> None:
    # Client 0's connection never comes back; client 1 would send for ever (unbounded, no count).
    down = MemoryDriver(0, down_for=lambda _token, _attempt: True)
    fine = MemoryDriver(1)
    plan = _plan(parallel_count=2, duration=Duration(seconds=None), reconnect_budget_s=0.3)
    run = _run(plan, tmp_path, {0: down, 1: fine})
    asyncio.run(asyncio.wait_for(run.run(), 30))
    run.rate_file.close()
    assert run.failure is not None and "for more than 0.3 s" in run.failure
    assert down.closed and fine.closed  # the other client was ended and closed, not left running
    assert run.stats.sent_per_client[0] == 0 and run.stats.sent_per_client[1] > 0


def test_confirms_that_come_back_together_and_out_of_order_are_counted_exactly(tmp_path: Path) -> None:
    # Confirms arrive 64 at a time in a shuffled order, every fifth a nack, through a window of
    # 100: each message is counted once, by its own verdict, and the window is never passed.
    def verdict(token: int) -> SendError | None:
        return SendError("nacked", retry=False, kind="nacked") if token % 5 == 0 else None

    driver = MemoryDriver(confirm_delay_s=0.002, settle_batch=64, seed=3, verdict=verdict)
    run = _run(_plan(confirm_window=100, duration=Duration(messages=1000)), tmp_path, {0: driver})
    asyncio.run(run.run())
    run.rate_file.close()
    assert run.stats.sent == 1000 and dict(run.stats.errors) == {"nacked": 200}
    assert max(driver.settled_in) == 64 and len(driver.settled_in) > 16  # they did come back together
    assert driver.max_in_flight == 100


def test_a_dropped_connection_fails_what_was_in_flight_and_the_rest_is_sent_once_it_is_back(tmp_path: Path) -> None:
    # 20 messages go and none is confirmed; the connection drops: those 20 are unconfirmed (the
    # broker may or may not have them), and the next ones wait for the connection, with their
    # sequence numbers kept, and are sent once it is back.
    driver = MemoryDriver(confirm_delay_s=None)
    run = _run(_plan(duration=Duration(messages=30), reconnect_budget_s=10), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: len(driver.tokens) == 30)
        driver.release(10)
        driver.drop()
        assert driver.held == []
        driver.restore()
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    assert run.stats.sent == 30 and dict(run.stats.errors) == {"unconfirmed": 20}
    assert [read_header(b).sequence for b in driver.bodies] == list(range(30))


def test_sends_during_a_drop_are_tried_again_once_the_connection_is_back(tmp_path: Path) -> None:
    driver = MemoryDriver(confirm_delay_s=0.0)
    run = _run(_plan(rate_per_s=200.0, duration=Duration(messages=60), reconnect_budget_s=10), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: len(driver.tokens) >= 20)
        driver.drop()
        await asyncio.sleep(0.1)  # ~20 more fall due meanwhile, each tried and refused
        driver.restore()
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    assert run.stats.sent == 60 and run.stats.retries >= 1
    assert sorted(read_header(b).sequence for b in driver.bodies) == list(range(60))
    assert len(run.stats.disconnects_ns) == 1


def _accounts(run: SenderRun) -> list[tuple[int | None, int, int | None]]:
    """Each stream's (intended, sent, accepted), as peer.json will hold them."""
    return [(c.intended, c.sent, c.accepted) for c in run.account().senders.values()]


def test_accepted_is_what_the_sut_acknowledged_and_intended_the_count(tmp_path: Path) -> None:
    # 30 sent, every third nacked (tokens 0, 3, ..., 27: 10 of them): 20 accepted.
    nacked = MemoryDriver(verdict=lambda token: SendError("no", retry=False, kind="nacked") if token % 3 == 0 else None)
    run = _run(_plan(duration=Duration(messages=30)), tmp_path, {0: nacked})
    asyncio.run(run.run())
    run.rate_file.close()
    assert _accounts(run) == [(30, 30, 20)]


def test_what_never_settled_is_not_accepted(tmp_path: Path) -> None:
    driver = MemoryDriver(confirm_delay_s=None)
    run = _run(_plan(duration=Duration(messages=4)), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: len(driver.tokens) == 4)
        driver.release(1)
        run.stop()
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    assert _accounts(run) == [(4, 4, 1)]  # 3 unconfirmed


def test_a_driver_that_acknowledges_nothing_gives_no_accepted_count(tmp_path: Path) -> None:
    run = _run(_plan(duration=Duration(messages=10)), tmp_path, {0: MemoryDriver(acknowledges=False)})
    asyncio.run(run.run())
    run.rate_file.close()
    assert _accounts(run) == [(10, 10, None)]


def test_a_stopped_sender_owes_the_slots_due_before_its_stop(tmp_path: Path) -> None:
    # 200 msg/s for 5 s: 1,000 slots, 0 to 995 ms apart. Stopped after 10 went: it meant to send
    # those that came due before the stop (it read 1,000: a shortfall no one made).
    driver = MemoryDriver()
    run = _run(_plan(rate_per_s=200.0, duration=Duration(seconds=5.0)), tmp_path, {0: driver})

    async def scenario() -> None:
        task = asyncio.create_task(run.run())
        await until(lambda: len(driver.tokens) >= 10)
        run.stop()
        await task

    asyncio.run(scenario())
    run.rate_file.close()
    [(intended, sent, accepted)] = _accounts(run)
    assert 10 <= sent <= intended <= sent + 20 and accepted == sent, (intended, sent)  # 100 ms of lag at most
