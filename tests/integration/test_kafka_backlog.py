"""A Kafka receiver behind a large backlog, against tansu: it reads on without a pause.

librdkafka fetches ahead into a local queue; once that holds `queued.min.messages` (100,000) it
stops fetching for `fetch.queue.backoff.ms`, 1 s by default. A receiver slower than the fetches
then read the queue dry and sat idle for most of that second: 840-880 ms in 3 of 5 runs over
200,000 messages (bench/README.md, session 17), a stall that a test's latency and rate would
show as the broker's.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from pathlib import Path

import pytest

from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter, read_rate_file
from worker.latency import LatencyRecorder
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import SenderPlan, SenderRun

MESSAGES = 400_000


@pytest.mark.kafka
def test_a_receiver_behind_a_backlog_reads_it_without_a_pause(tansu: str, tmp_path: Path) -> None:
    topic = f"backlog-{uuid.uuid4().hex[:8]}"
    sender = SenderRun(
        SenderPlan(
            test_id="t-backlog",
            peer="s1",
            urls=[f"{tansu}/{topic}?partitions=1&acks=1&linger_ms=5"],
            rate_per_s=0,  # unbounded: the backlog is there before the receiver starts
            parallel_count=1,
            duration=Duration(messages=MESSAGES),
            size=MessageSize(100, 100),
        ),
        RateFileWriter(tmp_path / "sender", "sender", {}),
    )
    receiver = ReceiverRun(
        ReceiverPlan(test_id="t-backlog", urls=[f"{tansu}/{topic}?group=g-{topic}"], parallel_count=1),
        RateFileWriter(tmp_path / "receiver", "receiver", {}),
        LatencyRecorder(tmp_path / "receiver"),
    )

    async def scenario() -> None:
        await sender.run()
        await sender.close()
        assert sender.failure is None and sender.stats.sent == MESSAGES
        await receiver.start()
        try:
            assert await receiver.drain(idle_s=1.5, timeout_s=60)
        finally:
            receiver.stop()
            await receiver.close()

    asyncio.run(scenario())
    assert receiver.stats.received == MESSAGES
    arrivals = sorted(ata for path in receiver.rate_file.paths for _, ata in read_rate_file(path))
    assert len(arrivals) == MESSAGES
    longest_us = max(later - earlier for earlier, later in itertools.pairwise(arrivals))
    # The whole backlog takes about half a second to read here; a fetch backoff, near a second.
    assert longest_us < 500_000, f"the receiver stood idle for {longest_us / 1000:.0f} ms inside the backlog"
