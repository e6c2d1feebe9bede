"""A Kafka topic with others' records in it, against tansu: a null value (a tombstone, as a
compacted topic's producer writes) and a short body are counted as foreign, and the worker's
own messages around them are all received.

librdkafka gives a null value as None; a receiver that took it for a body failed on it, and the
burst it came in (up to a thousand of the worker's messages) went uncounted with it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.worker_runs import drain, send_unbounded

OURS = 200


@pytest.mark.kafka
def test_a_null_value_and_a_short_body_are_foreign_and_lose_nothing(tansu: str, tmp_path: Path) -> None:
    topic = f"foreign-{uuid.uuid4().hex[:8]}"
    send_unbounded(f"{tansu}/{topic}?partitions=1&acks=1", "t-foreign", "s1", OURS // 2, tmp_path / "first")
    producer = Producer({"bootstrap.servers": tansu.removeprefix("kafka://")})
    producer.produce(topic, value=None, key=b"gone")  # a tombstone
    producer.produce(topic, value=b"hello")
    assert producer.flush(20) == 0
    del producer  # gone before tansu is: it would go on reconnecting to it in the log
    send_unbounded(f"{tansu}/{topic}?acks=1", "t-foreign", "s2", OURS // 2, tmp_path / "second")
    receiver = drain(f"{tansu}/{topic}?group=g-{topic}", "t-foreign", tmp_path / "receiver")
    assert receiver.stats.foreign == {"no_header": 2}
    assert receiver.stats.received == OURS
    assert receiver.stats.duplicates_per_s.total() == 0
