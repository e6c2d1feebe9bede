"""The receiver's hot path against an in-memory driver: known messages in, exact figures out."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from protocol.fail import FailConditions
from protocol.hdr import read_total
from protocol.ratefile import RateFileWriter, read_rate_file
from protocol.sequences import load_bitset
from worker.drivers.base import Burst
from worker.drivers.memory import MemoryDriver
from worker.latency import LatencyRecorder
from worker.payload import MessageHeader, key_of, make_body
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.run import Watch

T0 = 1_800_000_000_000_000_000  # ns


def _body(test_id: str, sender: str, sequence: int, intended_ns: int, sent_ns: int) -> bytes:
    return make_body(MessageHeader(key_of(test_id), key_of(sender), sequence, intended_ns, sent_ns), 100, bytes(100))


def _receiver_of(directory: Path, driver: MemoryDriver) -> ReceiverRun:
    """A receiver of test t-1 with one client, `driver`, writing into `directory`."""
    return ReceiverRun(
        ReceiverPlan(test_id="t-1", urls=["memory://x/q"], parallel_count=1),
        RateFileWriter(directory, "receiver", {}),
        LatencyRecorder(directory),
        driver_for=lambda _client: driver,
    )


def test_a_burst_is_counted_timed_and_written_exactly(tmp_path: Path) -> None:
    driver = MemoryDriver()
    run = _receiver_of(tmp_path, driver)

    async def scenario() -> None:
        await run.start()
        # Sender a: 0..4, then 2 again (a duplicate). Each arrives 3 ms after it was meant to
        # go and 1 ms after it went. Sender b: 0 and 2 (1 missing). Plus three that are not ours.
        batch = [
            (_body("t-1", "a", i, T0 + i * 1_000_000, T0 + i * 1_000_000 + 2_000_000), T0 + i * 1_000_000 + 3_000_000)
            for i in range(5)
        ]
        batch.append((_body("t-1", "a", 2, T0 + 2_000_000, T0 + 4_000_000), T0 + 9_000_000))
        batch += [(_body("t-1", "b", i, T0, T0 + 10_000), T0 + 7_000_000) for i in (0, 2)]
        batch += [(b"short", T0), (b"X" * 60, T0), (_body("t-2", "a", 0, T0, T0), T0)]
        driver.deliver(batch[:4])
        driver.deliver(batch[4:])
        await run.close()

    asyncio.run(scenario())
    assert run.stats.received == 7
    assert dict(run.stats.foreign) == {"no_header": 2, "other_test": 1}
    assert sum(run.stats.duplicates_per_s.values()) == 1
    per_sender = run.per_sender()
    a, b = per_sender[f"{key_of('a'):016x}"], per_sender[f"{key_of('b'):016x}"]
    assert (a.received, a.duplicates, a.missing_below_highest) == (5, 1, 0)
    assert (b.received, b.duplicates, b.missing_below_highest) == (2, 0, 1)
    # Latency from the intended time: 3 ms for a's five, 7 ms for b's two; service 1 ms and ~7 ms.
    corrected = read_total(tmp_path / "receiver-latency.hlog")
    assert corrected.get_total_count() == 7
    assert corrected.get_value_at_percentile(50) == corrected.get_highest_equivalent_value(3000)
    assert corrected.get_max_value() == corrected.get_highest_equivalent_value(7000)
    service = read_total(tmp_path / "receiver-service-latency.hlog")
    assert service.get_value_at_percentile(50) == service.get_highest_equivalent_value(1000)
    rows = [row for path in run.rate_file.paths for row in read_rate_file(path)]
    assert len(rows) == 7 and rows[0] == (T0 // 1000, (T0 + 3_000_000) // 1000)
    bitsets = json.loads((tmp_path / "receiver-sequences.json").read_text())
    assert load_bitset(bitsets[f"{key_of('b'):016x}"])[0] == 0b101


def _receiver(directory: Path) -> ReceiverRun:
    directory.mkdir()
    return _receiver_of(directory, MemoryDriver())


@pytest.mark.parametrize("stamped_once", [False, True], ids=["stamped-each", "stamped-once"])
@pytest.mark.parametrize("one_size", [False, True], ids=["sizes-mixed", "one-size"])
def test_a_large_burst_read_in_columns_gives_what_message_by_message_gives(
    tmp_path: Path, one_size: bool, stamped_once: bool
) -> None:
    """The column path (bursts of 32 and more) against the one-by-one path (bursts of one), on
    the same arrivals: three senders out of order with duplicates, others' and foreign bodies.
    With one size, every burst's headers are read in place from the joined bodies; with sizes
    mixed (a body too short for a header among them), each header is sliced out first. Stamped
    once, a burst comes as a `Burst` (Kafka's): its bodies and one arrival time."""
    rng = random.Random(7)
    arrivals = []
    for _ in range(3000):
        sender, sequence = rng.choice("abc"), rng.randint(0, 1200)
        intended = T0 + sequence * 1_000_000
        kind = rng.random()
        body = (
            b"short"
            if kind < 0.01 and not one_size
            else b"X" * (100 if one_size else 60)
            if kind < 0.02
            else _body("t-2" if kind < 0.03 else "t-1", sender, sequence, intended, intended + 500_000)
        )
        arrivals.append((body, intended + rng.randint(1_000_000, 3_000_000_000)))
    if stamped_once:  # each burst of 500 arrived at its last message's time
        arrivals = [
            (body, max(t for _, t in arrivals[i - i % 500 : i - i % 500 + 500])) for i, (body, _) in enumerate(arrivals)
        ]
    one, columns = _receiver(tmp_path / "one"), _receiver(tmp_path / "columns")
    try:
        for message in arrivals:
            one._on_messages([message])
        for start in range(0, len(arrivals), 500):
            burst = arrivals[start : start + 500]
            columns._on_columns(Burst([body for body, _ in burst], burst[0][1]) if stamped_once else burst)
        assert columns.stats.received == one.stats.received > 2000
        assert columns.stats.foreign == one.stats.foreign and set(one.stats.foreign) == {"no_header", "other_test"}
        _assert_the_same_accounting(columns, one)
    finally:
        _close(one, columns)


@pytest.mark.parametrize("stamped_once", [False, True], ids=["stamped-each", "stamped-once"])
def test_one_senders_bursts_read_in_columns_give_what_message_by_message_gives(
    tmp_path: Path, stamped_once: bool
) -> None:
    """The usual burst, every message one sender's and this test's, taken without masks: in
    order, then a burst delivered again (duplicates), one out of order, and one that repeats
    messages within itself."""
    rng = random.Random(11)
    runs = [list(range(start, start + 400)) for start in range(0, 2000, 400)]
    runs.append(runs[1])  # delivered again
    runs.append(rng.sample(range(2000, 2400), 400))  # out of order
    runs.append([*range(2400, 2600), *range(2500, 2700)])  # repeats within the burst
    one, columns = _receiver(tmp_path / "one"), _receiver(tmp_path / "columns")
    try:
        for number, run in enumerate(runs):
            burst = []
            for sequence in run:
                intended = T0 + sequence * 1_000_000
                arrived = intended + 2_000_000 + (number * 1_000 if stamped_once else rng.randint(0, 900_000))
                burst.append((_body("t-1", "a", sequence, intended, intended + 500_000), arrived))
            if stamped_once:
                arrival = max(t for _, t in burst)
                burst = [(body, arrival) for body, _ in burst]
            for message in burst:
                one._on_messages([message])
            columns._on_columns(Burst([body for body, _ in burst], burst[0][1]) if stamped_once else burst)
        assert columns.stats.received == one.stats.received == 2700
        assert sum(one.stats.duplicates_per_s.values()) == 500
        _assert_the_same_accounting(columns, one)
    finally:
        _close(one, columns)


def _assert_the_same_accounting(columns: ReceiverRun, one: ReceiverRun) -> None:
    """What the column path recorded is what the message-by-message path recorded."""
    assert columns.stats.duplicates_per_s == one.stats.duplicates_per_s
    assert columns.per_sender() == one.per_sender()
    assert {k: t.bitset.rstrip(b"\0") for k, t in columns.trackers.items()} == {
        k: t.bitset.rstrip(b"\0") for k, t in one.trackers.items()
    }
    assert columns.latency.corrected_us == one.latency.corrected_us
    assert columns.latency.service_us == one.latency.service_us
    assert (columns.rate_file._eta, columns.rate_file._ata) == (one.rate_file._eta, one.rate_file._ata)


def _close(*runs: ReceiverRun) -> None:
    for run in runs:
        run.rate_file.close()
        run.latency.close()


def test_a_burst_reads_as_the_pairs_it_stands_for() -> None:
    burst = Burst([b"a", b"b", b"c"], 7)
    assert len(burst) == 3
    assert list(burst) == [(b"a", 7), (b"b", 7), (b"c", 7)]
    assert burst[1] == (b"b", 7) and burst[-1] == (b"c", 7)
    assert burst[1:] == [(b"b", 7), (b"c", 7)]


def test_a_drain_before_the_first_message_waits_for_it(tmp_path: Path) -> None:
    """Nothing has come yet when the drain begins: it waits its idle time from its start, so a
    message 0.2 s later is taken and the drain ends 0.4 s after that one, not at once."""
    driver = MemoryDriver()
    run = _receiver_of(tmp_path, driver)

    async def scenario() -> tuple[bool, float]:
        await run.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        loop.call_later(0.2, driver.deliver, [(_body("t-1", "a", 0, T0, T0), T0 + 1_000_000)])
        drained = await run.drain(idle_s=0.4, timeout_s=5)
        took = loop.time() - started
        await run.close()
        return drained, took

    drained, took = asyncio.run(scenario())
    assert drained and run.stats.received == 1
    assert 0.6 <= took < 2.0


def test_the_per_second_report_walks_no_histogram_in_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver's report runs on its event loop each second: hdrh's mean, percentile and reset
    loop over the counts in Python, and the whole-run mean once held the loop 40-64 ms a second
    (a quiet run's p99 read 25-45 ms where it is 1-4). The report's figures are hdrh's."""
    driver = MemoryDriver()
    run = _receiver_of(tmp_path, driver)
    latencies_ms = [1, 2, 2, 3, 50]

    async def scenario() -> None:
        await run.start()
        driver.deliver([(_body("t-1", "a", i, T0, T0), T0 + ms * 1_000_000) for i, ms in enumerate(latencies_ms)])
        await asyncio.sleep(0)
        # _hdr_median_equiv_value: the middles of the sum's buckets, 27 ms when made index by index.
        walks = (
            "get_mean_value",
            "get_value_at_percentile",
            "reset",
            "get_recorded_iterator",
            "_hdr_median_equiv_value",
        )
        for walk in walks:
            monkeypatch.setattr(HdrHistogram, walk, lambda *_, name=walk: pytest.fail(f"{name} on the event loop"))
        report = run.interval_report()
        monkeypatch.undo()
        interval = run.last_interval.corrected
        assert (
            report.latency_p50_us == interval.get_value_at_percentile(50) == interval.get_highest_equivalent_value(2000)
        )
        assert report.latency_p99_us == interval.get_value_at_percentile(99)
        assert report.latency_count == 5
        # hdrh's mean times the count, and the known answer: 58 ms, each within a bucket's width.
        total = run.latency.total_corrected
        assert report.latency_sum_us == round(total.get_mean_value() * 5)
        assert abs(report.latency_sum_us - 58_000) <= 20
        run.interval_report()  # the next interval reuses the first's histograms, cleared
        assert run.last_interval.corrected.get_total_count() == 0
        await run.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("reply", [False, True], ids=["receiver", "replier"])
def test_a_latency_bound_judges_a_receivers_latency_and_no_repliers_leg(tmp_path: Path, reply: bool) -> None:
    """Messages 20 ms late against a bound of 5 ms: a receiver fails its interval; a replier's
    latency is the request's leg to it, and the bound is its requesters' to judge on the
    response time (tests/unit/worker/test_requester_loop.py)."""
    run = ReceiverRun(
        ReceiverPlan(test_id="t-1", urls=["memory://x/q"], parallel_count=1, reply=reply),
        RateFileWriter(tmp_path, "receiver", {}),
        LatencyRecorder(tmp_path),
        driver_for=lambda _client: MemoryDriver(),
    )
    run._on_messages([(_body("t-1", "a", i, T0, T0), T0 + 20_000_000) for i in range(3)])
    run.interval_report()
    watch = Watch(FailConditions(), origin=0.0, options_warm_up_s=0.0)
    reason = run.verdict(FailConditions(latency_ms=5), watch, 1.0)
    if reply:
        assert reason is None
    else:
        assert reason is not None and reason.startswith("latency p99 20.") and "> bound 5 ms" in reason, reason
    run.rate_file.close()
    run.latency.close()
