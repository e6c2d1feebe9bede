"""Inspectors against the real RabbitMQ management API and the real /proc of this host."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
import subprocess
import threading
import time
import uuid
from pathlib import Path

import aio_pika
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.jolokia_broker import PASSWORD, USER, jolokia_broker
from support.processes import Daemons
from support.qdrouter_management import ANSWERS, management_peer
from support.runs import run_with

from coordinator import Fail, FixedRateTest
from inspector.amqp_management import ENTITY_TYPES, AmqpManagementSource
from inspector.jolokia import JolokiaSource
from inspector.kafka import KafkaSource
from inspector.sources import HostSource, RabbitMqSource, SourceError
from protocol.embedded_broker import free_port

MANAGEMENT = "http://guest:guest@127.0.0.1:15672"

pytestmark = pytest.mark.rabbitmq


def start_pair_and_inspector(daemons: Daemons) -> None:
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-inspector", "i1")


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.mosquitto
def test_rabbitmq_and_host_inspectors_record_a_backlog_during_a_test(
    daemons: Daemons, prefix: str, data_server: tuple[str, Path]
) -> None:
    url, root = data_server
    start_pair_and_inspector(daemons)
    queue = f"maestro-insp-{uuid.uuid4().hex[:8]}"
    # A consumer that manages ~100 msg/s against 150 msg/s offered: the queue grows, then drains.
    test = FixedRateTest(
        send_url=f"amqp://guest:guest@127.0.0.1:5672/{queue}?prefetch=1",
        rate=150,
        duration="6s",
        options={"processing_delay_ms": 10, "inspector_interval_s": 1},
        inspectors=(f"rabbitmq={MANAGEMENT}", "host"),
    )
    result = run_with(daemons, url, test, peers=3)
    assert result.passed, result.reason
    assert result.summary.received == result.summary.sent == 900
    folder = root / result.test_id / "inspector" / "i1"
    ours = [r for r in rows(folder / "rabbitmq-queues.csv") if r["queue"] == queue]
    depths = [int(r["messages"]) for r in ours]
    # The management API refreshes every 5 s by default: at least one sample sees the backlog.
    assert len(ours) >= 6 and max(depths) > 20, depths
    assert rows(folder / "rabbitmq-overview.csv") and rows(folder / "rabbitmq-nodes.csv")
    host = rows(folder / "host-host.csv")
    assert len(host) >= 5 and all(0 <= float(r["cpu_user_percent"]) <= 100 for r in host)
    assert ours[0]["timestamp"].endswith("Z") and "T" in ours[0]["timestamp"]
    info = json.loads((folder / "peer.json").read_text())
    assert info["inspectors"]["rabbitmq"]["errors"] == 0 and info["inspectors"]["rabbitmq"]["samples"] >= 6
    # Credentials never reach a file.
    for path in folder.iterdir():
        assert "guest:guest" not in path.read_text(), path.name


@pytest.mark.mosquitto
def test_an_unreachable_management_interface_is_counted_and_makes_the_run_invalid_not_failed(
    daemons: Daemons, prefix: str, data_server: tuple[str, Path]
) -> None:
    url, root = data_server
    start_pair_and_inspector(daemons)
    test = FixedRateTest(
        send_url=f"amqp://guest:guest@127.0.0.1:5672/maestro-insp-{uuid.uuid4().hex[:8]}",
        rate=10,
        duration="3s",
        options={"inspector_interval_s": 1},
        inspectors=("rabbitmq=http://admin:s3cret@127.0.0.1:1",),
    )
    result = run_with(daemons, url, test, peers=3)
    # The load ran and was measured; what the inspector promised was not: invalid, not failed.
    assert result.outcome == "invalid", (result.outcome, result.reason)
    assert result.reason is not None and "inspector rabbitmq on i1 collected no sample" in result.reason
    assert "s3cret" not in result.reason
    info = json.loads((root / result.test_id / "inspector" / "i1" / "peer.json").read_text())
    summary = info["inspectors"]["rabbitmq"]
    assert summary["errors"] >= 3 and summary["samples"] == 0
    assert summary["url"] == "http://***@127.0.0.1:1"
    assert "s3cret" not in json.dumps(info) and "s3cret" not in daemons.log("i1")

    # The same, in a test that asked to fail on it: the third failed sample in a row ends it.
    strict = dataclasses.replace(test, fail=Fail(inspector_errors=3), duration="20s")
    result = run_with(daemons, url, strict, peers=3)
    assert not result.passed
    assert result.reason is not None and "inspector rabbitmq: 3 failed samples in a row" in result.reason
    assert "s3cret" not in result.reason


def test_rabbitmq_source_reads_the_real_api() -> None:
    sample = RabbitMqSource(MANAGEMENT).sample()
    assert {"overview", "queues", "nodes"} <= set(sample)
    assert sample["nodes"][0]["fd_total"] > 0
    # The broker's own version, which the results index keeps with each run (#39).
    version = subprocess.run(["rabbitmqctl", "version"], capture_output=True, text=True, check=True, timeout=60)
    assert sample["overview"][0]["version"] == version.stdout.strip()
    with pytest.raises(SourceError, match="HTTP 401"):
        RabbitMqSource("http://guest:wrong@127.0.0.1:15672").sample()


def test_a_new_queues_rate_at_a_1_s_interval_is_never_0_while_messages_go_through() -> None:
    """RabbitMQ refreshes its statistics every 5 s and gives a new queue's first refresh a rate
    of 0: sampled each second, a test's own queue read 0 msg/s for 5-10 s at 200 msg/s (#40)."""
    queue = f"maestro-rate-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()

    async def publish() -> None:
        connection = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(queue, auto_delete=False)
            start = time.monotonic()
            sent = 0
            while not stop.is_set():  # 200 msg/s on a schedule
                await channel.default_exchange.publish(aio_pika.Message(b"x" * 64), routing_key=queue)
                sent += 1
                await asyncio.sleep(max(0.0, start + sent / 200 - time.monotonic()))
            await channel.queue_delete(queue)

    publisher = threading.Thread(target=asyncio.run, args=(publish(),))
    publisher.start()
    source = RabbitMqSource(MANAGEMENT)
    samples = []
    try:
        for _ in range(16):
            rows = [q for q in source.sample()["queues"] if q["queue"] == queue]
            samples += [(q["published"], q["publish_rate"]) for q in rows]
            time.sleep(1.0)
    finally:
        stop.set()
        publisher.join(10)
    moving = [rate for published, rate in samples if published > 0]
    assert len(moving) >= 8, samples  # the counter moved within the first refresh or two
    assert 0.0 not in moving, samples
    # Until a second refresh, no rate is known (the first rise may include messages from before
    # the first sample): an empty cell, for one refresh at most.
    unknown = moving.index(next(rate for rate in moving if rate is not None))
    assert moving[unknown:].count(None) == 0 and unknown <= 6, samples
    # Then RabbitMQ's own rate or a refresh's rise over its time: 200 msg/s, ± a sample's second in 5.
    assert all(140 <= rate <= 260 for rate in moving[unknown:]), samples


def test_host_values_move_when_the_machine_works(tmp_path: Path) -> None:
    source = HostSource()
    assert source.sample() == {}  # the base for the deltas
    deadline = time.process_time() + 0.5
    while time.process_time() < deadline:
        pass
    (row,) = source.sample()["host"]
    assert float(row["cpu_user_percent"]) > 0
    assert int(row["memory_available"]) > 0


def test_jolokia_reads_a_real_activemq_and_its_jvm_in_one_bulk_request() -> None:
    queue = f"maestro.jolokia.{uuid.uuid4().hex[:6]}"
    with jolokia_broker(queue, messages=7) as anonymous:
        # Without credentials, the broker refuses, and the inspector says so in one line.
        with pytest.raises(SourceError, match="401") as refused:
            JolokiaSource(anonymous).sample()
        assert "\n" not in str(refused.value)
        url = anonymous.replace("http://", f"http://{USER}:{PASSWORD}@")
        source = JolokiaSource(url)
        sample = source.sample()
        (broker,) = sample["broker"]
        # java.lang MBeans of the JVM that serves them: sizes in bytes, counts as counts.
        assert broker["heap_used"] > 0 and broker["heap_committed"] >= broker["heap_used"]
        assert broker["eden_used"] is not None and broker["tenured_max"] is not None and broker["pm_used"] > 0
        assert broker["open_fds"] > 0 and broker["free_fds"] > 0 and broker["free_memory"] > 0
        queues = {row["queue"]: row for row in sample["queues"]}
        assert queues[queue] == {
            "broker": "maestro-test",
            "queue": queue,
            "queue_size": 7,
            "consumers": 0,
            "acknowledged": 0,
            "expired": 0,
            "enqueued": 7,
        }
        assert queues[f"{queue}.consumed"]["consumers"] == 1
        # Credentials in the URL go as basic auth (taken above) and never into an error.
        with pytest.raises(SourceError) as caught:
            JolokiaSource(url.replace("/jolokia", "/nowhere")).sample()
        assert PASSWORD not in str(caught.value)


def test_amqp_management_reads_what_qpid_dispatch_router_answers_as_it_answers_it() -> None:
    """Against answers captured from a real router 1.19.0: presettled, typed, and with the
    allocator's numeric correlation ids dropped (support/qdrouter_management.py)."""
    with management_peer() as (url, router):
        source = AmqpManagementSource(url)
        try:
            first = source.sample()
            second = source.sample()
        finally:
            source.close()
    assert set(first) == {"general", "memory", "links", "connections", "addresses"}
    (general,) = first["general"]
    assert (general["name"], general["version"], general["mode"]) == ("Router.A", "1.19.0", "interior")
    assert (general["link_routes"], general["links"], general["nodes"], general["connections"]) == (0, 2, 0, 1)
    assert second["general"][0]["deliveries_ingress"] - general["deliveries_ingress"] == 10  # fresh each time
    captured = ANSWERS["entities"]
    assert len(first["memory"]) == len(captured["org.apache.qpid.dispatch.allocator"]["results"]) == 38
    assert first["memory"][0] == {
        "name": "qd_log_entry_t",
        "size": 2112,
        "batch": 16,
        "thread_max": 32,
        "total": 128,
        "in_threads": 128,
        "rebal_in": 0,
        "rebal_out": 0,
        "total_free_to_heap": 0,
        "global_free_list_max": 0,
    }
    assert [link["link_dir"] for link in first["links"]] == ["out", "in"]
    assert first["connections"][0]["authenticated"] is True and first["connections"][0]["user"] == "anonymous"
    assert len(first["addresses"]) == 12
    # Plain Python values: proton's ulong would be written to the CSV file as "ulong(3120)".
    values = [v for rows in first.values() for row in rows for v in row.values()]
    assert {type(v) for v in values} <= {int, str, bool, type(None)}
    # One QUERY per entity type per sample, each as the management spec words it.
    assert len(router.queries) == 10
    assert {q["operation"] for q in router.queries} == {"QUERY"}
    assert {q["type"] for q in router.queries} == {"org.amqp.management"}
    assert {q["entityType"] for q in router.queries} == set(ENTITY_TYPES)


def test_amqp_management_errors_are_named_and_the_next_sample_reconnects() -> None:
    with pytest.raises(SourceError, match="not an amqp"):
        AmqpManagementSource("http://router:5672")
    source = AmqpManagementSource(f"amqp://user:s3cret@127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(SourceError) as caught:
        source.sample()
    assert "s3cret" not in str(caught.value) and "***@127.0.0.1" in str(caught.value)


@pytest.mark.kafka
def test_kafka_reports_watermarks_and_a_consumer_groups_lag(tansu: str) -> None:
    bootstrap = tansu.removeprefix("kafka://")
    topic, group = f"insp-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=2)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, b"x", partition=i % 2)
        producer.flush(10)  # one record per batch: the offsets count records on any broker
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "session.timeout.ms": 6000}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    taken = 0
    deadline = time.monotonic() + 20
    while taken < 3 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and not message.error():
            taken += 1
    consumer.commit(asynchronous=False)
    consumer.close()

    source = KafkaSource(tansu)
    try:
        sample = source.sample()
    finally:
        source.close()
    partitions = [row for row in sample["partitions"] if row["topic"] == topic]
    assert [(p["partition"], p["low"], p["high"], p["messages"]) for p in partitions] == [(0, 0, 5, 5), (1, 0, 5, 5)]
    assert all(p["replicas"] == 1 and p["in_sync"] == 1 for p in partitions)
    groups = [row for row in sample["groups"] if row["group"] == group]
    assert groups == [{"group": group, "topic": topic, "partition": 0, "committed": 3, "high": 5, "lag": 2}]
