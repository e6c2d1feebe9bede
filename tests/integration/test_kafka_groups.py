"""Receivers whose clients share a Kafka consumer group, against tansu: the start waits until the
group holds still, so no message sent after it waits for a rebalance."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path

import pytest

from protocol.hdr import read_total
from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter
from worker.drivers.base import GroupShare
from worker.latency import LatencyRecorder
from worker.processes import MultiProcessReceiver
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import SenderPlan, SenderRun

MESSAGES = 2_000


@pytest.fixture
def no_tracker_left() -> Iterator[list[object]]:
    """The receiver's processes share a queue and an event, whose semaphores multiprocessing's
    resource tracker watches from a process of its own, which would outlive the test. The test
    hands its receiver here: once it is gone (and its semaphores with it), the tracker stops."""
    held: list[object] = []
    yield held
    held.clear()
    gc.collect()
    resource_tracker._resource_tracker._stop()  # type: ignore[attr-defined]


@pytest.mark.kafka
def test_four_consumers_in_two_processes_hold_every_partition_before_the_start_ends(
    tansu: str, tmp_path: Path, no_tracker_left: list[object]
) -> None:
    """The two processes' clients join the group at their own times, and tansu takes partitions
    from the first ones to hand them out again over 3 s rounds. When the start neither waited
    for the group to hold still nor had a process's clients subscribe together, it ended with a
    client between two rounds: the messages on its partition waited 1.8 and 2.0 s for it (two runs
    of two). Either change alone passed three runs of three; the unit tests show each one's own
    behaviour. Every message sent after the start arrives without that wait."""
    topic = f"groups-{uuid.uuid4().hex[:8]}"
    url = f"{tansu}/{topic}?partitions=4&group=g-{topic}&fetch_wait_max_ms=5&acks=1"
    run = MultiProcessReceiver(
        ReceiverPlan(test_id="t-groups", urls=[url], parallel_count=4), 2, tmp_path / "receiver", {}
    )
    no_tracker_left.append(run)
    sender = SenderRun(
        SenderPlan(
            test_id="t-groups",
            peer="s1",
            urls=[url],
            rate_per_s=1_000,
            parallel_count=1,
            duration=Duration(messages=MESSAGES),
            size=MessageSize(100, 100),
        ),
        RateFileWriter(tmp_path / "sender", "sender", {}),
    )

    async def scenario() -> None:
        await run.start()
        try:
            share = run.group_share()
            assert share is not None and share.covers_topic(), share
            await sender.run()
            await sender.close()
            assert sender.failure is None and sender.stats.sent == MESSAGES
            assert await run.drain(idle_s=1.0, timeout_s=30)
        finally:
            run.stop()
            await run.close()

    asyncio.run(scenario())
    assert run.stats.received == MESSAGES
    corrected = read_total(tmp_path / "receiver" / "receiver-latency.hlog")
    assert corrected.get_total_count() == MESSAGES
    # On loopback a message takes milliseconds; one that waited for a rebalance, a second or more.
    assert corrected.get_max_value() < 500_000, corrected.get_max_value()  # µs


@pytest.mark.kafka
def test_repliers_share_their_request_topic_and_start_once_they_hold_all_of_it(tansu: str, tmp_path: Path) -> None:
    """A replier's clients are one consumer group over the request topic, as a receiver's are:
    its start, too, ends with the group's partitions all held and none moving."""
    topic = f"requests-{uuid.uuid4().hex[:8]}"
    run = ReceiverRun(
        ReceiverPlan(test_id="t-groups", urls=[f"{tansu}/{topic}?partitions=3"], parallel_count=3, reply=True),
        RateFileWriter(tmp_path, "receiver", {}),
        LatencyRecorder(tmp_path),
    )

    async def scenario() -> GroupShare | None:
        await run.start()
        try:
            return run.group_share()
        finally:
            await run.close()

    share = asyncio.run(scenario())
    assert share is not None and share.covers_topic(), share
    assert share.owned == {0, 1, 2}
