"""Load under trouble: a SUT broker that dies mid-test, and messages that are not ours."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from hdrh.log import HistogramLogReader
from paho.mqtt.enums import CallbackAPIVersion
from support.outage import outage
from support.processes import Daemons, private_mosquitto

from coordinator import Maestro, PeerInfo, PeerRequestError
from protocol.codes import Role
from protocol.embedded_broker import free_port
from protocol.hdr import new_histogram
from protocol.notes import (
    DrainComplete,
    DrainRequest,
    PauseWorker,
    ResumeWorker,
    StartTest,
    StartWorker,
    StatsResponse,
    StopWorker,
    TestFailed,
    TestSucceeded,
)
from protocol.ratefile import read_rate_file
from protocol.sequences import load_bitset, merge_bitsets
from worker.payload import HEADER_BYTES, MAGIC


def start_pair(
    daemons: Daemons,
    maestro: Maestro,
    send_url: str,
    receive_url: str,
    options: dict[str, object],
    *,
    start_in_s: float = 0.0,
) -> str:
    """A sender and a receiver running the test; `start_in_s`: a common start that far ahead, as
    the coordinator gives (0: the sender starts once connected)."""
    daemons.start("maestro-worker", "s1", "--role", "sender")
    daemons.start("maestro-worker", "r1", "--role", "receiver")
    maestro.wait_for_peers(2, timeout_s=20)
    test_id = f"t-{uuid.uuid4().hex[:8]}"
    maestro.set({"send_url": send_url, **options}, to=Role.SENDER)
    maestro.set({"receive_url": receive_url}, to=Role.RECEIVER)
    maestro.request(StartTest(test_id=test_id), to=maestro.workers())
    maestro.request(StartWorker(), to=Role.RECEIVER, timeout_s=30)
    start_at_ns = time.time_ns() + int(start_in_s * 1e9) if start_in_s else 0
    maestro.request(StartWorker(start_at_ns=start_at_ns), to=Role.SENDER, timeout_s=30)
    return test_id


def finish_pair(maestro: Maestro, timeout_s: float) -> None:
    (sender,) = maestro.registry.live(lambda p: p.role == Role.SENDER)
    (receiver,) = maestro.registry.live(lambda p: p.role == Role.RECEIVER)
    (done,) = maestro.wait_for((TestSucceeded, TestFailed), [sender], timeout_s=timeout_s).values()
    assert isinstance(done, TestSucceeded), done
    maestro.request(DrainRequest(timeout_s=30), to=Role.RECEIVER)
    maestro.wait_for((DrainComplete,), [receiver], timeout_s=40)
    (finished,) = maestro.wait_for((TestSucceeded, TestFailed), [receiver], timeout_s=20).values()
    assert isinstance(finished, TestSucceeded), finished


def peer_json(daemons: Daemons, test_id: str, role: str, name: str) -> tuple[Path, dict[str, object]]:
    directory = daemons.log_dir / name / test_id / role / name
    return directory, json.loads((directory / "peer.json").read_text())


def holes_below(bits: bytes, count: int) -> int:
    """Sequence numbers in [0, count) whose bit is not set."""
    return sum(1 for seq in range(count) if seq // 8 >= len(bits) or not bits[seq // 8] >> (seq % 8) & 1)


@pytest.mark.mosquitto
def test_the_sut_broker_restarts_mid_test(tmp_path: Path, daemons: Daemons, maestro: Maestro) -> None:
    (tmp_path / "sut").mkdir()
    sut = private_mosquitto(tmp_path / "sut")
    sut.start()
    topic = f"restart/{uuid.uuid4().hex[:8]}"
    url = f"mqtt://127.0.0.1:{sut.port}/{topic}?qos=1"
    try:
        test_id = start_pair(daemons, maestro, url, url, {"rate_per_s": 100, "duration": "8s"})
        time.sleep(3)
        sut.stop()  # kill -9 of the SUT broker, mid-test
        time.sleep(1.5)
        sut.start()
        finish_pair(maestro, timeout_s=60)
    finally:
        sut.stop()

    sender_dir, sender = peer_json(daemons, test_id, "sender", "s1")
    receiver_dir, receiver = peer_json(daemons, test_id, "receiver", "r1")
    errors: dict[str, int] = sender["errors"]  # type: ignore[assignment]
    assert errors.get("disconnected", 0) > 0, "the sender never saw the outage"
    # Retried sends keep their sequence number; every message handed over spent one and counts
    # as sent, whether or not it arrived (one in flight at the drop is an "unconfirmed" error too).
    spent = int(sender["sent"])  # type: ignore[call-overload]
    bitsets = json.loads((receiver_dir / "receiver-sequences.json").read_text())
    ((key, counts),) = receiver["per_sender"].items()  # type: ignore[attr-defined]
    bits = load_bitset(bitsets[key])
    merged = merge_bitsets([bits], counts["deliveries"])
    # The loss the counters give equals the holes in the sequence numbers, counted one by one.
    assert merged.lost(spent) == holes_below(bits, spent)
    assert merged.duplicates == counts["duplicates"]
    assert receiver["received"] == merged.distinct > 0
    # 100/s for 8 s: every scheduled message spent its number.
    assert spent == 800
    assert sender["retries"] == errors["disconnected"]
    # The outage shows as a gap in the arrivals (1.5 s down); the loss is at most what was due
    # during it, and what was meant to go after it arrived.
    gone = outage([sender_dir], [receiver_dir])
    assert gone.gap_s >= 1.0, gone
    assert merged.lost(spent) <= 100 * gone.gap_s + 1, gone
    assert gone.due_after >= 50 and gone.arrived_after >= 0.9 * gone.due_after, gone


@pytest.mark.mosquitto
def test_messages_that_are_not_ours_are_counted_as_foreign(daemons: Daemons, maestro: Maestro) -> None:
    topic = f"foreign/{uuid.uuid4().hex[:8]}"
    url = f"mqtt://127.0.0.1:1883/{topic}?qos=1"
    test_id = start_pair(daemons, maestro, url, url, {"rate_per_s": 50, "duration": "3s"})
    intruder = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    intruder.connect("127.0.0.1", 1883)
    intruder.loop_start()
    try:
        for payload in (b"", b"hello", MAGIC + b"\0" * 10, b"X" * (HEADER_BYTES + 10)):
            intruder.publish(topic, payload, qos=1).wait_for_publish(5)
        # A well-formed header from another test.
        other = bytearray(HEADER_BYTES)
        other[:4] = MAGIC
        other[4:12] = (12345).to_bytes(8, "big")
        intruder.publish(topic, bytes(other), qos=1).wait_for_publish(5)
    finally:
        intruder.disconnect()
        intruder.loop_stop()
    finish_pair(maestro, timeout_s=30)
    _, receiver = peer_json(daemons, test_id, "receiver", "r1")
    assert receiver["foreign"] == {"no_header": 4, "other_test": 1}
    _, sender = peer_json(daemons, test_id, "sender", "s1")
    assert receiver["received"] == sender["sent"] == 150


@pytest.mark.rabbitmq
@pytest.mark.usefixtures("rabbitmq")
@pytest.mark.parametrize(
    "url_form",
    ["amqp://guest:guest@127.0.0.1:5672/{q}?prefetch=10", "amqp10://guest:guest@127.0.0.1:5672//queue/{q}?credit=10"],
)
def test_a_paused_receiver_builds_a_backlog_that_drains_after_resume(
    daemons: Daemons, maestro: Maestro, url_form: str
) -> None:
    url = url_form.format(q=f"maestro-pause-{uuid.uuid4().hex[:8]}")
    test_id = start_pair(daemons, maestro, url, url, {"rate_per_s": 100, "duration": "6s"})
    receiver = maestro.find("r1")
    time.sleep(1)
    maestro.request(PauseWorker(), to=receiver)
    paused_at = received_of(maestro, receiver)
    time.sleep(3)
    # Paused: at most the prefetched few trickle in; the rest waits in the queue.
    assert received_of(maestro, receiver) - paused_at <= 10
    maestro.request(ResumeWorker(), to=receiver)
    finish_pair(maestro, timeout_s=30)
    receiver_dir, info = peer_json(daemons, test_id, "receiver", "r1")
    _, sender = peer_json(daemons, test_id, "sender", "s1")
    assert info["received"] == sender["sent"] == 600
    # Messages sent early in the pause waited about 3 s: latency from their intended send time shows it.
    total = new_histogram()
    reader = HistogramLogReader(str(receiver_dir / "receiver-latency.hlog"), new_histogram())
    try:
        while (interval := reader.get_next_interval_histogram()) is not None:
            total.add(interval)
    finally:
        reader.close()
    assert 2_500_000 <= total.get_max_value() <= 5_000_000


def received_of(maestro: Maestro, peer: PeerInfo) -> int:
    (stats,) = maestro.stats(to=peer).replies.values()
    assert isinstance(stats, StatsResponse)
    return int(stats.counters["received"])


@pytest.mark.mosquitto
def test_an_mqtt_receiver_refuses_to_pause(daemons: Daemons, maestro: Maestro) -> None:
    topic = f"nopause/{uuid.uuid4().hex[:8]}"
    url = f"mqtt://127.0.0.1:1883/{topic}?qos=1"
    start_pair(daemons, maestro, url, url, {"rate_per_s": 10, "duration": "2s"})
    with pytest.raises(PeerRequestError, match=re.escape("MQTT (paho-mqtt) receivers cannot pause")):
        maestro.request(PauseWorker(), to=maestro.find("r1"))
    finish_pair(maestro, timeout_s=30)


@pytest.mark.mosquitto
def test_a_sender_split_over_two_processes(daemons: Daemons, maestro: Maestro) -> None:
    topic = f"procs/{uuid.uuid4().hex[:8]}"
    url = f"mqtt://127.0.0.1:1883/{topic}?qos=1"
    options = {"rate_per_s": 50, "duration": "5s", "parallel_count": 4, "processes": 2}
    # A common start, as the coordinator gives: the two processes take a second or more to start
    # on a busy machine, and without one each would start once connected.
    test_id = start_pair(daemons, maestro, url, url, options, start_in_s=5.0)
    finish_pair(maestro, timeout_s=60)
    sender_dir, sender = peer_json(daemons, test_id, "sender", "s1")
    receiver_dir, receiver = peer_json(daemons, test_id, "receiver", "r1")
    # 4 clients x 50 msg/s x 5 s, each client's 250 from its own process.
    assert sender["sent"] == receiver["received"] == 1000
    assert sorted(c["sent"] for c in sender["senders"].values()) == [250] * 4  # type: ignore[attr-defined]
    # Each process's rate file and the piece its writer left (its counts by second).
    assert sender["files"] == [
        "sender-p0-0000.csv.gz",
        "sender-p0-seconds.json",
        "sender-p1-0000.csv.gz",
        "sender-p1-seconds.json",
    ]
    rate_files = ["sender-p0-0000.csv.gz", "sender-p1-0000.csv.gz"]
    rows = [row for f in rate_files for row in read_rate_file(sender_dir / f)]
    assert len(rows) == 1000
    # One timebase: both processes' schedules have the one origin the common start gave.
    firsts = [min(eta for eta, _ in read_rate_file(sender_dir / f)) for f in rate_files]
    assert abs(firsts[0] - firsts[1]) <= 1
    assert sender["schedule_lag_us"]["99"] > 0  # type: ignore[index]
    bitsets = json.loads((receiver_dir / "receiver-sequences.json").read_text())
    for key, counts in receiver["per_sender"].items():  # type: ignore[attr-defined]
        merged = merge_bitsets([load_bitset(bitsets[key])], counts["deliveries"])
        assert (merged.lost(250), merged.duplicates) == (0, 0)


@pytest.mark.mosquitto
def test_a_sut_that_stays_unreachable_fails_the_test_with_the_reason(daemons: Daemons, maestro: Maestro) -> None:
    daemons.start("maestro-worker", "s1", "--role", "sender")
    (sender,) = maestro.wait_for_peers(1, timeout_s=20)
    nobody = free_port()  # nothing listens here
    maestro.set(
        {"send_url": f"mqtt://127.0.0.1:{nobody}/t", "rate_per_s": 10, "duration": "5s", "reconnect_budget_s": 2},
        to=sender,
    )
    maestro.request(StartTest(test_id="t-unreachable"), to=sender)
    started = time.monotonic()
    maestro.request(StartWorker(), to=sender)
    (outcome,) = maestro.wait_for((TestSucceeded, TestFailed), [sender], timeout_s=60).values()
    assert isinstance(outcome, TestFailed)
    assert f"127.0.0.1:{nobody}/t" in outcome.message
    assert "connection refused" in outcome.message
    # The first connection is tried for a few seconds (the reconnect budget is for outages after it).
    assert time.monotonic() - started < 10


@pytest.mark.mosquitto
def test_two_megabyte_messages(daemons: Daemons, maestro: Maestro) -> None:
    topic = f"big/{uuid.uuid4().hex[:8]}"
    url = f"mqtt://127.0.0.1:1883/{topic}?qos=1"
    test_id = start_pair(daemons, maestro, url, url, {"rate_per_s": 5, "duration": "2s", "message_size": "2MiB"})
    finish_pair(maestro, timeout_s=60)
    _, sender = peer_json(daemons, test_id, "sender", "s1")
    _, receiver = peer_json(daemons, test_id, "receiver", "r1")
    assert sender["sent"] == receiver["received"] == 10
    assert receiver["foreign"] == {}


@pytest.mark.mosquitto
def test_a_sender_at_unbounded_rate_still_answers_and_stops(daemons: Daemons, maestro: Maestro) -> None:
    # QoS 0 sends never suspend: without a turn for the event loop now and then, the daemon
    # would not hear STATS or STOP_WORKER until two million messages were out.
    topic = f"unbounded/{uuid.uuid4().hex[:8]}"
    daemons.start("maestro-worker", "s1", "--role", "sender")
    (sender,) = maestro.wait_for_peers(1, timeout_s=20)
    maestro.set({"send_url": f"mqtt://127.0.0.1:1883/{topic}?qos=0", "rate_per_s": 0, "duration": 2_000_000}, to=sender)
    maestro.request(StartTest(test_id="t-unbounded"), to=sender)
    maestro.request(StartWorker(), to=sender)
    time.sleep(1)
    started = time.monotonic()
    (stats,) = maestro.stats(to=sender, timeout_s=5).replies.values()
    assert isinstance(stats, StatsResponse)
    assert stats.state == "running" and stats.counters["sent"] > 0
    maestro.request(StopWorker(), to=sender, timeout_s=5)
    (outcome,) = maestro.wait_for((TestSucceeded, TestFailed), [sender], timeout_s=15).values()
    assert isinstance(outcome, TestSucceeded)
    assert time.monotonic() - started < 10
    _, info = peer_json(daemons, "t-unbounded", "sender", "s1")
    assert 0 < int(info["sent"]) < 2_000_000  # type: ignore[call-overload]
