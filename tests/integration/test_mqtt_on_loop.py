"""The MQTT driver runs paho on the event loop, not in a network thread (worker.drivers.mqtt): what
paho's own thread did, the driver does, and these tests check each against real Mosquittos.

- no paho thread is started, and an idle connection is kept alive by the loop's keepalive pings
  (Mosquitto drops a client silent for 1.5 keepalives);
- a broker killed and started again is reconnected, and sending and receiving go on;
- a slow consumer reads one message per processing delay, the next waiting in the broker;
- close ends the connection and leaves nothing behind;
- a QoS 0 burst goes to the socket in a few joined writes, and arrives whole and in order.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from support.processes import private_mosquitto
from support.waiting import until

from worker.drivers import parse_endpoint
from worker.drivers.base import SendError, connect_within
from worker.drivers.mqtt import MqttDriver
from worker.drivers.mqtt_joined_write import write_joined

pytestmark = pytest.mark.mosquitto


def _driver(url: str, client: int = 0) -> MqttDriver:
    _, endpoint = parse_endpoint(url)
    return MqttDriver(endpoint, client)


def _paho_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("paho-mqtt-client")]


@pytest.mark.timeout(60)
def test_an_idle_connection_is_kept_alive_from_the_loop_without_a_paho_thread() -> None:
    url = f"mqtt://127.0.0.1:1883/maestro/idle-{uuid.uuid4().hex[:8]}?qos=1&keepalive_s=5"
    received: list[tuple[bytes, int]] = []
    settled: list[tuple[int, SendError | None]] = []

    async def scenario() -> tuple[list[str], list[int]]:
        receiver, sender = _driver(url, 0), _driver(url, 1)
        sender.on_settled = lambda count, error: settled.append((count, error))
        await connect_within(receiver, 10)
        await receiver.receive(received.extend)
        await connect_within(sender, 10)
        threads = _paho_threads()
        await asyncio.sleep(20)  # Mosquitto drops a client silent 1.5 keepalives, checked every few s
        sender.publish(b"after the silence", 0)
        await until(lambda: received and settled, 10)
        reconnects = sender.reconnects_ns + receiver.reconnects_ns
        await sender.close()
        await receiver.close()
        return threads, reconnects

    threads, reconnects = asyncio.run(scenario())
    assert threads == []
    assert reconnects == [], "a connection was dropped for silence: no keepalive went out"
    assert [body for body, _ in received] == [b"after the silence"]
    assert settled == [(1, None)]


@pytest.mark.timeout(90)
def test_a_broker_killed_and_started_again_is_reconnected_and_both_go_on(tmp_path: Path) -> None:
    broker = private_mosquitto(tmp_path)
    broker.start()
    url = f"mqtt://127.0.0.1:{broker.port}/maestro/restart?qos=1"
    received: list[bytes] = []
    settled: list[tuple[int, SendError | None]] = []

    async def scenario() -> tuple[MqttDriver, MqttDriver]:
        receiver, sender = _driver(url, 0), _driver(url, 1)
        sender.on_settled = lambda count, error: settled.append((count, error))
        await connect_within(receiver, 10)
        await receiver.receive(lambda batch: received.extend(body for body, _ in batch))
        await connect_within(sender, 10)
        sender.publish(b"before", 0)
        await until(lambda: received, 10)
        broker.stop()  # kill -9
        await asyncio.sleep(1.0)  # both see the connection gone
        broker.start()
        await until(lambda: sender.reconnects_ns and receiver.reconnects_ns, 30)
        await asyncio.sleep(0.5)  # the receiver's subscription made again
        sender.publish(b"after", 1)
        await until(lambda: b"after" in received, 10)
        await sender.close()
        await receiver.close()
        return sender, receiver

    try:
        sender, receiver = asyncio.run(scenario())
    finally:
        broker.stop()
    assert len(sender.reconnects_ns) == 1 and len(receiver.reconnects_ns) == 1
    assert received == [b"before", b"after"]
    assert settled == [(1, None), (1, None)]


@pytest.mark.timeout(90)
def test_after_a_long_outage_a_client_is_back_within_its_longest_wait_of_the_broker(tmp_path: Path) -> None:
    # Down 9 s: with paho's backoff (1, 2, 4, 8 s) the tries came at 1, 3, 7 and 15 s, so the
    # sender reconnected 6 s after the broker was back, and that 6 s read as the SUT's outage.
    broker = private_mosquitto(tmp_path)
    broker.start()
    url = f"mqtt://127.0.0.1:{broker.port}/maestro/outage?qos=1"

    async def scenario() -> float:
        sender = _driver(url, 0)
        await connect_within(sender, 10)
        broker.stop()
        await asyncio.sleep(9.0)
        broker.start()  # returns once the port answers
        back = time.time_ns()
        await until(lambda: sender.reconnects_ns, 30)
        await sender.close()
        return (sender.reconnects_ns[0] - back) / 1e9

    try:
        after_s = asyncio.run(scenario())
    finally:
        broker.stop()
    assert after_s < 3.0  # the longest wait is 2 s; the connect and CONNACK take the rest


@pytest.mark.timeout(60)
def test_a_slow_consumer_reads_one_message_per_processing_delay() -> None:
    url = f"mqtt://127.0.0.1:1883/maestro/slow-{uuid.uuid4().hex[:8]}?qos=1"
    arrivals: list[int] = []

    async def scenario() -> None:
        receiver, sender = _driver(url, 0), _driver(url, 1)
        sender.on_settled = lambda _count, _error: None
        await connect_within(receiver, 10)
        await receiver.receive(lambda batch: arrivals.extend(t for _, t in batch), processing_delay_s=0.05)
        await connect_within(sender, 10)
        for sequence in range(8):  # all at once: the broker holds what the consumer has not read
            sender.publish(b"x" * 64, sequence)
        await until(lambda: len(arrivals) == 8, 20)
        await sender.close()
        await receiver.close()

    asyncio.run(scenario())
    assert len(arrivals) == 8
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(arrivals)]
    assert all(gap >= 45 for gap in gaps_ms), gaps_ms


@pytest.mark.timeout(60)
def test_close_ends_the_connection_and_leaves_no_reader_on_the_loop() -> None:
    url = f"mqtt://127.0.0.1:1883/maestro/close-{uuid.uuid4().hex[:8]}?qos=0"

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        driver = _driver(url)
        await connect_within(driver, 10)
        sock = driver._client.socket()
        assert sock is not None
        fd = sock.fileno()
        await driver.close()
        selector = loop._selector  # type: ignore[attr-defined]
        watched = fd in selector.get_map()
        return driver._client.socket() is None, watched

    closed, watched = asyncio.run(scenario())
    assert closed and not watched


@pytest.mark.timeout(60)
def test_a_qos_0_burst_goes_out_in_joined_writes_and_arrives_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver offers a QoS 0 burst's packets to the socket together (mqtt_joined_write), and
    every message still arrives once, in order. The real write is spied on, not replaced."""
    url = f"mqtt://127.0.0.1:1883/maestro/joined-{uuid.uuid4().hex[:8]}?qos=0"
    joined: list[int] = []

    def spy(client: mqtt.Client) -> int:
        written = write_joined(client)
        joined.append(written)
        return written

    monkeypatch.setattr("worker.drivers.mqtt.write_joined", spy)
    received: list[bytes] = []
    settled: list[int] = []
    count = 500

    async def scenario() -> None:
        receiver, sender = _driver(url, 0), _driver(url, 1)
        sender.on_settled = lambda n, error: settled.append(n if error is None else -n)
        await connect_within(receiver, 10)
        await receiver.receive(lambda batch: received.extend(body for body, _ in batch))
        await connect_within(sender, 10)
        for n in range(count):  # no await: one burst for the loop's next write
            sender.publish(n.to_bytes(4, "big") * 16, n)
        await until(lambda: len(received) == count and sum(settled) == count, 20, "every message")
        await sender.close()
        await receiver.close()

    asyncio.run(scenario())
    assert [int.from_bytes(body[:4], "big") for body in received] == list(range(count))
    assert sum(joined) >= count - 1, joined  # all but at most a last one went in joined writes
    assert len([n for n in joined if n]) < count // 10, joined  # in a few send() calls, not one each


@pytest.mark.timeout(60)
@pytest.mark.parametrize("qos", [0, 1])
def test_a_burst_is_written_by_the_hand_over_without_a_turn_of_the_loop(qos: int) -> None:
    """`publish_many` writes its burst before it returns: a QoS 0 burst is settled (written) by
    then, and a QoS 1 one has reached Mosquitto, whose PUBACKs come back, with no writer left
    registered on the loop. Before, paho's wish to write registered one, and the burst waited
    for the loop's next turn to learn that the socket would take it."""
    url = f"mqtt://127.0.0.1:1883/maestro/burst-{uuid.uuid4().hex[:8]}?qos={qos}"
    settled: list[int] = []
    count = 200

    async def scenario() -> tuple[int, bool, int]:
        sender = _driver(url)
        sender.on_settled = lambda n, error: settled.append(n if error is None else -n)
        await connect_within(sender, 10)
        sock = sender._client.socket()
        assert isinstance(sock, socket.socket)
        done = sender.publish_many((n.to_bytes(4, "big") * 16 for n in range(count)), 0)
        written_by_then = sum(settled)
        writer_left = asyncio.get_running_loop()._selector.get_key(sock).events & 2  # type: ignore[attr-defined]
        await until(lambda: sum(settled) == count, 20, "every message settled")
        await sender.close()
        return done.handed, bool(writer_left), written_by_then

    handed, writer_left, written_by_then = asyncio.run(scenario())
    assert handed == count and not writer_left
    assert written_by_then == (count if qos == 0 else 0)  # QoS 1 waits for its PUBACKs, read later


@pytest.mark.timeout(60)
def test_a_try_dropped_before_it_ended_is_followed_by_another() -> None:
    """Through a proxy whose broker is down, a try connects and the proxy drops it at once; the
    drop can be read on the loop before the try's thread has returned. The client then tried no
    more, and a CI run's sender sat silent for 30 s. Here the first try returns only after the
    drop was handed to the loop, as in that race; the next try reaches the broker."""
    url = f"mqtt://127.0.0.1:1883/maestro/dropped-{uuid.uuid4().hex[:8]}?qos=1"

    async def scenario() -> tuple[int, list[int]]:
        loop = asyncio.get_running_loop()
        sender = _driver(url, 0)
        await connect_within(sender, 10)
        client = sender._client
        real_reconnect, tries = client.reconnect, []

        def reconnect() -> mqtt.MQTTErrorCode:
            tries.append(time.monotonic())
            if len(tries) == 1:  # the proxy's drop, seen by the loop first
                done = threading.Event()
                loop.call_soon_threadsafe(lambda: (sender._on_disconnect(client, None, None, None, None), done.set()))
                done.wait(5)
                return mqtt.MQTT_ERR_SUCCESS
            return real_reconnect()

        client.reconnect = reconnect  # type: ignore[method-assign]
        sock = client.socket()
        assert sock is not None
        sock.shutdown(socket.SHUT_RDWR)  # the connection drops; the driver reconnects
        await until(lambda: sender.reconnects_ns, 15)
        await sender.close()
        return len(tries), sender.reconnects_ns

    tries, reconnects = asyncio.run(scenario())
    assert tries >= 2 and len(reconnects) == 1
