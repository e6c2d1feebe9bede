"""QoS 0 PUBLISH packets joined into one send(): every byte goes out once, in paho's order, and a
message counts as written only when its whole packet is in the socket, however the socket's
buffer cuts the run (a real socket pair whose reader stops reading)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from worker.drivers.mqtt_joined_write import joins_writes, write_joined


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # full after a few dozen packets
    theirs.setblocking(False)
    yield ours, theirs
    ours.close()
    theirs.close()


def _client_on(sock: socket.socket) -> mqtt.Client:
    """A paho client as the driver runs it: an external loop (writes wait for it), connected."""
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.on_socket_register_write = lambda *_: None
    client.on_socket_unregister_write = lambda *_: None
    client._sock = sock
    client._state = mqtt._ConnectionState.MQTT_CS_CONNECTED
    return client


def _drain(theirs: socket.socket) -> bytes:
    got = bytearray()
    while True:
        try:
            chunk = theirs.recv(65536)
        except BlockingIOError:
            return bytes(got)
        got += chunk


def test_a_run_cut_by_a_full_socket_is_written_once_in_order_and_counted_whole(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    client = _client_on(ours)
    assert joins_writes(client)  # the installed paho is one this module knows
    # Sizes that do not divide the buffer: the socket fills in the middle of a packet.
    bodies = [bytes([n % 251]) * (97 + n % 13) for n in range(1500)]
    infos = [client.publish("maestro/joined", body, qos=0) for body in bodies]
    expected = b"".join(bytes(p["packet"]) for p in client._out_packet)
    received = bytearray()
    written = rounds = partial = 0
    while written < len(bodies):
        rounds += 1
        assert rounds < 10_000, "no progress"
        now = write_joined(client)
        written += now
        # Counted as written: exactly the messages whose packets are whole in the socket.
        assert [info.is_published() for info in infos] == [n < written for n in range(len(infos))]
        head = client._out_packet[0] if client._out_packet else None
        if head is not None and head["pos"]:
            partial += 1
            assert head["pos"] + head["to_process"] == len(head["packet"])
        if now == 0 and len(client._out_packet) == 1:
            client.loop_write()  # one left: paho's own write (a run needs two)
            written += infos[-1].is_published()
        received += _drain(theirs)
    received += _drain(theirs)
    assert bytes(received) == expected
    assert partial > 0, "the socket never cut a packet: the test did not test a partial write"
    assert not client._out_packet


def test_only_qos_0_publishes_at_the_head_are_joined(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    client = _client_on(ours)
    client.publish("t", b"a", qos=0)
    client.publish("t", b"b", qos=0)
    client.publish("t", b"c", qos=1)  # a QoS 1 packet ends the run; paho writes it
    client.publish("t", b"d", qos=0)
    assert write_joined(client) == 2
    assert [p["qos"] for p in client._out_packet] == [1, 0]
    assert write_joined(client) == 0  # a QoS 1 packet at the head: left to paho
    client.loop_write()
    assert not client._out_packet
    assert _drain(theirs).count(b"t") == 4


def test_a_tls_socket_is_left_to_paho() -> None:
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    assert not joins_writes(client)  # no socket yet
    plain = socket.socket()
    tls = ssl.create_default_context().wrap_socket(socket.socket(), server_hostname="broker")
    try:
        client._sock = plain
        assert joins_writes(client)
        client._sock = tls
        assert not joins_writes(client)
    finally:
        plain.close()
        tls.close()
