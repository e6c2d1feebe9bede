"""A Kafka topic with others' records in it, against tansu: a null value (a tombstone, as a
compacted topic's producer writes) and a short body are counted as foreign, and the worker's
own messages around them are all received.

librdkafka gives a null value as None; a receiver that took it for a body failed on it, and the
burst it came in (up to a thousand of the worker's messages) went uncounted with it.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter
from worker.latency import LatencyRecorder
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import SenderPlan, SenderRun

OURS = 200


def _send(tansu: str, topic: str, directory: Path, peer: str) -> None:
    sender = SenderRun(
        SenderPlan(
            test_id="t-foreign",
            peer=peer,
            urls=[f"{tansu}/{topic}?partitions=1&acks=1"],
            rate_per_s=0,
            parallel_count=1,
            duration=Duration(messages=OURS // 2),
            size=MessageSize(100, 100),
        ),
        RateFileWriter(directory, "sender", {}),
    )

    async def run() -> None:
        await sender.run()
        await sender.close()

    asyncio.run(run())
    assert sender.failure is None and sender.stats.sent == OURS // 2


@pytest.mark.kafka
def test_a_null_value_and_a_short_body_are_foreign_and_lose_nothing(tansu: str, tmp_path: Path) -> None:
    topic = f"foreign-{uuid.uuid4().hex[:8]}"
    _send(tansu, topic, tmp_path / "first", "s1")
    producer = Producer({"bootstrap.servers": tansu.removeprefix("kafka://")})
    producer.produce(topic, value=None, key=b"gone")  # a tombstone
    producer.produce(topic, value=b"hello")
    assert producer.flush(20) == 0
    del producer  # gone before tansu is: it would go on reconnecting to it in the log
    _send(tansu, topic, tmp_path / "second", "s2")
    receiver = ReceiverRun(
        ReceiverPlan(test_id="t-foreign", urls=[f"{tansu}/{topic}?group=g-{topic}"], parallel_count=1),
        RateFileWriter(tmp_path / "receiver", "receiver", {}),
        LatencyRecorder(tmp_path / "receiver"),
    )

    async def scenario() -> None:
        await receiver.start()
        try:
            assert await receiver.drain(idle_s=1.5, timeout_s=60)
        finally:
            receiver.stop()
            await receiver.close()

    asyncio.run(scenario())
    assert receiver.stats.foreign == {"no_header": 2}
    assert receiver.stats.received == OURS
    assert receiver.stats.duplicates_per_s.total() == 0
