"""Fixed-rate load through real brokers, driven by notes alone: 2 sender and 2 receiver daemons.

Known answers: at 50 msg/s per client, 2 clients per sender, 2 senders, for 10 s, exactly
4000 messages are scheduled; each must arrive once, and the achieved rate must be within 1 %
of the 200 msg/s each sender was asked for.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.outage import check_latency_log
from support.processes import Daemons

from coordinator import Maestro, MaestroError, PeerInfo, PeerRequestError
from protocol.codes import Role
from protocol.notes import (
    DrainComplete,
    DrainRequest,
    StartTest,
    StartWorker,
    StatsReport,
    StopWorker,
    TestFailed,
    TestSucceeded,
)
from protocol.ratefile import read_rate_file
from protocol.sequences import load_bitset, merge_bitsets, union_bitsets

RATE_PER_CLIENT = 50
CLIENTS = 2
SECONDS = 10


def run_fixed_rate(
    daemons: Daemons,
    maestro: Maestro,
    send_url: str,
    receive_url: str,
    receiver_options: dict[str, object] | None = None,
    **sender_options: object,
) -> str:
    for name in ("s1", "s2"):
        daemons.start("maestro-worker", name, "--role", "sender")
    for name in ("r1", "r2"):
        daemons.start("maestro-worker", name, "--role", "receiver")
    maestro.wait_for_peers(4, timeout_s=20)
    test_id = f"t-{uuid.uuid4().hex[:8]}"
    maestro.set(
        {
            "send_url": send_url,
            "rate_per_s": RATE_PER_CLIENT,
            "parallel_count": CLIENTS,
            "duration": f"{SECONDS}s",
            "message_size": 256,
            "warm_up_s": 2,
            **sender_options,
        },
        to=Role.SENDER,
    )
    maestro.set({"receive_url": receive_url, "parallel_count": CLIENTS, **(receiver_options or {})}, to=Role.RECEIVER)
    maestro.request(StartTest(test_id=test_id), to=maestro.workers())
    maestro.request(StartWorker(), to=Role.RECEIVER, timeout_s=30)
    maestro.request(StartWorker(), to=Role.SENDER, timeout_s=30)
    senders = maestro.registry.live(lambda p: p.role == Role.SENDER)
    receivers = maestro.registry.live(lambda p: p.role == Role.RECEIVER)
    done = maestro.wait_for((TestSucceeded, TestFailed), senders, timeout_s=SECONDS + 30)
    assert all(isinstance(n, TestSucceeded) for n in done.values()), done
    # As the coordinator does: the receivers leave only once all have drained (DrainRequest.stop).
    maestro.request(DrainRequest(timeout_s=30, stop=False), to=Role.RECEIVER)
    drained = maestro.wait_for((DrainComplete,), receivers, timeout_s=40)
    assert all(isinstance(n, DrainComplete) and n.success for n in drained.values()), drained
    with pytest.raises(MaestroError, match="no TestSucceeded/TestFailed"):  # still receiving, as asked
        maestro.wait_for((TestSucceeded, TestFailed), receivers, timeout_s=1)
    maestro.request(StopWorker(), to=Role.RECEIVER)
    finished = maestro.wait_for((TestSucceeded, TestFailed), receivers, timeout_s=20)
    assert all(isinstance(n, TestSucceeded) for n in finished.values()), finished
    return test_id


def peer_dir(daemons: Daemons, test_id: str, role: str, name: str) -> Path:
    return daemons.log_dir / name / test_id / role / name


def _missing(bitsets: list[bytes], sent: int) -> list[int]:
    """The first sequence numbers no receiver saw: where in the stream a loss happened."""
    seen = int.from_bytes(union_bitsets(bitsets), "little")
    return [i for i in range(sent) if not (seen >> i) & 1][:20]


def assert_checked(info: dict[str, Any], rows: int) -> None:
    """Each file a peer names is checked as it closed it, and its rate files' rows are `rows`."""
    checks = info["checks"]
    assert set(checks) == set(info["files"])
    assert sum(c["rows"] for name, c in checks.items() if name.endswith(".csv.gz")) == rows


# tansu's own floor at 200 msg/s, one partition, acks=1, no linger: a raw confluent-kafka producer
# and consumer pair (no maestro between them) measured a p50 of 3.6-3.8 ms with a 2 ms fetch wait
# and 4.5-5.6 ms with 5 ms (tansu answers a waiting fetch only when its wait ends). The tool's own
# runs were 2.6-3.9 ms; 5 ms more still fails the bound.
TANSU_P50_BOUND_US = 6_000


def check_latency_size(daemons: Daemons, test_id: str, bound_us: int = 4_000) -> None:
    """The latency's size, not only its consistency with the rows: a time added to every message
    alike keeps the log and the rows in step, and only a bound on the figure sees it. The median
    of every message's latency (its row's arrival less its intended time) through a broker on
    loopback at 200 msg/s is under 4 ms (0.6-1.4 ms measured here for RabbitMQ and Mosquitto;
    tansu's floor is higher: TANSU_P50_BOUND_US); 5 ms more fails it. A test that judges it is
    `quiet`: beside the others in one CI run, RabbitMQ's p50 was 4.1-4.3 ms."""
    latencies = []
    for name in ("r1", "r2"):
        directory = peer_dir(daemons, test_id, "receiver", name)
        info = json.loads((directory / "peer.json").read_text())
        files = [f for f in info["files"] if f.endswith(".csv.gz")]
        latencies += [ata - eta for f in files for eta, ata in read_rate_file(directory / f)]
    p50 = sorted(latencies)[len(latencies) // 2]
    assert 100 <= p50 < bound_us, f"latency p50 {p50} µs, bound {bound_us:,} µs"


def check_results(
    daemons: Daemons, maestro: Maestro, test_id: str, idle_receivers: int = 0, p50_bound_us: int = 4_000
) -> None:
    """`idle_receivers`: how many receivers are expected to get nothing (a one-partition topic
    gives all to one consumer of the group); `p50_bound_us`: check_latency_size's bound."""
    idle = 0
    sent_total = 0
    sent_by_key: dict[str, int] = {}
    for name in ("s1", "s2"):
        directory = peer_dir(daemons, test_id, "sender", name)
        info = json.loads((directory / "peer.json").read_text())
        rows = [row for f in info["files"] if f.endswith(".csv.gz") for row in read_rate_file(directory / f)]
        assert info["sent"] == len(rows) == RATE_PER_CLIENT * CLIENTS * SECONDS
        assert info["errors"] == {}
        assert_checked(info, info["sent"])
        # The warm-up boundary the reporter cuts at: 2 s after the sender started.
        assert info["warm_up_end_ns"] - info["started_ns"] == pytest.approx(2e9, abs=0.5e9)
        # About one self-monitoring sample a second; a sender at 100 msg/s is far from one core.
        assert info["self_monitor"]["samples"] >= SECONDS - 2
        assert 0 < info["self_monitor"]["cpu_percent_mean"] < 90
        first_intended = min(eta for eta, _ in rows)
        last_intended = max(eta for eta, _ in rows)
        # The schedule is exact: 100 per second over 10 s.
        intended_rate = (len(rows) - CLIENTS) / ((last_intended - first_intended) / 1e6)
        assert intended_rate == pytest.approx(RATE_PER_CLIENT * CLIENTS, rel=0.01)
        actual = sorted(ata for _, ata in rows)
        achieved = (len(actual) - CLIENTS) / ((actual[-1] - actual[0]) / 1e6)
        assert achieved == pytest.approx(RATE_PER_CLIENT * CLIENTS, rel=0.01)
        sent_total += len(rows)
        sent_by_key |= {key: client["sent"] for key, client in info["senders"].items()}

    received_total = skipped_total = 0
    bitsets: dict[str, list[bytes]] = {key: [] for key in sent_by_key}
    deliveries: dict[str, int] = dict.fromkeys(sent_by_key, 0)
    for name in ("r1", "r2"):
        directory = peer_dir(daemons, test_id, "receiver", name)
        info = json.loads((directory / "peer.json").read_text())
        assert info["foreign"] == {}
        assert info["latency_clamped"] == 0
        for key, counts in info["per_sender"].items():
            deliveries[key] += counts["deliveries"]
        for key, text in json.loads((directory / "receiver-sequences.json").read_text()).items():
            bitsets[key].append(load_bitset(text))
        rows = [row for f in info["files"] if f.endswith(".csv.gz") for row in read_rate_file(directory / f)]
        assert len(rows) == info["received"]
        assert_checked(info, info["received"])
        assert info["checks"]["receiver-latency.hlog"]["rows"] >= SECONDS - 1  # an interval a second
        received_total += info["received"]
        skipped_total += info["skipped_by_sut"]
        # Each message's own latency, from its row, is in the log: a sample each, no other.
        assert check_latency_log(directory) == info["received"]
        idle += info["received"] == 0
    assert idle == idle_receivers
    check_latency_size(daemons, test_id, p50_bound_us)
    # Every message sent arrived exactly once, spread over the two receivers, but for any the
    # broker's own numbering shows it passed over: tansu can skip one when two producers write a
    # partition at once (worker.drivers.kafka), and the receivers count those. Elsewhere: none.
    assert received_total + skipped_total == sent_total == 2 * RATE_PER_CLIENT * CLIENTS * SECONDS
    # How often tansu's race comes depends on the machine's load: none in 8 runs of this test
    # alone, 5 of 2,000 once in CI beside another test. A receiver that lost a burst of its own
    # would show as hundreds, in a run: that is what this bound is for.
    assert skipped_total <= 10, f"the broker skipped {skipped_total}: more than its rare race explains"
    lost = 0
    for key, sent in sent_by_key.items():
        merged = merge_bitsets(bitsets[key], deliveries[key])
        assert merged.duplicates == 0, (key, merged)
        assert merged.lost(sent) <= skipped_total, (key, "missing:", _missing(bitsets[key], sent))
        lost += merged.lost(sent)
    assert lost == skipped_total
    assert maestro.live_stats and all(isinstance(n, StatsReport) for n in maestro.live_stats), "no live statistics"


@pytest.mark.quiet
@pytest.mark.mosquitto
def test_mqtt_fixed_rate(daemons: Daemons, maestro: Maestro) -> None:
    topic = f"maestro-test/{uuid.uuid4().hex[:8]}"
    # MQTT fans out: every subscriber gets every message. A shared subscription ($share) splits
    # them between the receivers as a queue does, which is what the checks expect.
    test_id = run_fixed_rate(
        daemons,
        maestro,
        f"mqtt://127.0.0.1:1883/{topic}?qos=1",
        f"mqtt://127.0.0.1:1883/$share/maestro/{topic}?qos=1",
    )
    check_results(daemons, maestro, test_id)


@pytest.mark.quiet
@pytest.mark.rabbitmq
@pytest.mark.usefixtures("rabbitmq")
def test_amqp_fixed_rate(daemons: Daemons, maestro: Maestro) -> None:
    queue = f"maestro-test-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@127.0.0.1:5672/{queue}?confirms=true&ack=manual"
    test_id = run_fixed_rate(daemons, maestro, url, url)
    check_results(daemons, maestro, test_id)


@pytest.mark.quiet
@pytest.mark.rabbitmq
@pytest.mark.usefixtures("rabbitmq")
def test_amqp10_fixed_rate(daemons: Daemons, maestro: Maestro) -> None:
    # RabbitMQ's AMQP 1.0 plugin: the address /queue/NAME (note the double slash in the URL).
    queue = f"maestro-test-{uuid.uuid4().hex[:8]}"
    url = f"amqp10://guest:guest@127.0.0.1:5672//queue/{queue}?settle=at-least-once&credit=200"
    # A confirm window: many sends in flight at once, the first of which opens the link.
    test_id = run_fixed_rate(daemons, maestro, url, url, confirm_window=50)
    check_results(daemons, maestro, test_id)


@pytest.mark.quiet
@pytest.mark.kafka
def test_kafka_fixed_rate(daemons: Daemons, maestro: Maestro, tansu: str) -> None:
    topic = f"maestro-test-{uuid.uuid4().hex[:8]}"
    # One consumer group across both receivers, and a partition for each of their 4 consumers.
    # tansu does not answer a waiting fetch when data arrives: librdkafka's default 500 ms wait
    # made the p50 124 ms here; a 2 ms wait (as the demo's) makes it the broker's own.
    # No producer linger (librdkafka's 5 ms would be most of the p50): the tool's own path is measured.
    url = f"{tansu}/{topic}?partitions=4&acks=all&linger_ms=0&group=maestro-{topic}&auto_offset_reset=earliest"
    test_id = run_fixed_rate(daemons, maestro, url, f"{url}&fetch_wait_max_ms=2")
    check_results(daemons, maestro, test_id, p50_bound_us=TANSU_P50_BOUND_US)


@pytest.mark.quiet
@pytest.mark.rabbitmq
@pytest.mark.usefixtures("rabbitmq")
def test_receivers_in_two_processes_merge_to_exact_counts(daemons: Daemons, maestro: Maestro) -> None:
    # Each receiver splits its 2 consumers over 2 processes: 4 competing consumers in 4
    # processes, one latency log and one sequence file per receiver, and the checks of every
    # other test (exact counts, no loss, no duplicates, latency per message).
    queue = f"maestro-test-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@127.0.0.1:5672/{queue}"
    test_id = run_fixed_rate(daemons, maestro, url, url, receiver_options={"processes": 2})
    check_results(daemons, maestro, test_id)
    for name in ("r1", "r2"):
        info = json.loads((peer_dir(daemons, test_id, "receiver", name) / "peer.json").read_text())
        parts = {f.split("-")[1] for f in info["files"] if f.endswith(".csv.gz")}
        assert parts == {"p0", "p1"}, info["files"]


@pytest.mark.quiet
@pytest.mark.kafka
def test_kafka_receivers_subscribed_before_the_topic_exists_miss_nothing(
    daemons: Daemons, maestro: Maestro, tansu: str
) -> None:
    # No partitions=: nobody made the topic. The receivers start first; the first to connect
    # creates it (one partition, Kafka's default), and all 4000 messages arrive, at the one
    # receiver the group gave the partition to.
    topic = f"maestro-new-{uuid.uuid4().hex[:8]}"
    # No producer linger: librdkafka's 5 ms made the p50 8.6 ms at this rate, against the bound.
    # A 2 ms fetch wait, as test_kafka_fixed_rate's: with 5 ms the p50 was 4.0-4.5 ms, at tansu's floor.
    url = f"{tansu}/{topic}?acks=1&linger_ms=0&fetch_wait_max_ms=2"
    test_id = run_fixed_rate(daemons, maestro, url, url)
    check_results(daemons, maestro, test_id, idle_receivers=1, p50_bound_us=TANSU_P50_BOUND_US)


@pytest.mark.mosquitto
def test_a_bad_sut_url_is_refused_at_set(daemons: Daemons, maestro: Maestro) -> None:
    daemons.start("maestro-worker", "s1", "--role", "sender")
    maestro.wait_for_peers(1, timeout_s=20)
    for url, fragment in [
        ("amqp://127.0.0.1/q?prefetsh=5", "unknown option 'prefetsh'"),
        ("amqp://127.0.0.1/q?queue_type=fast", "option 'queue_type': expected one of classic, quorum, stream"),
        ("mqtt://127.0.0.1/t?qos=3", "option 'qos': 3 is out of range"),
        ("mqtt://127.0.0.1/", "names no queue, topic or address"),
    ]:
        with pytest.raises(PeerRequestError, match="option 'send_url'") as caught:
            maestro.set({"send_url": url}, to=Role.SENDER)
        assert fragment in str(caught.value)
    # Nothing was stored: the peer still has no send URL.
    peer: PeerInfo = maestro.find("s1")
    assert maestro.stats(to=peer).replies[peer.peer_id].options == {}  # type: ignore[attr-defined]
