"""Ports for servers we stop and start again: nothing listens there, and they lie below the range
the kernel gives to outgoing connections, so no client's socket can hold one while its server is down."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from protocol import embedded_broker
from protocol.embedded_broker import ephemeral_ports, free_port


def test_a_free_port_binds_and_lies_below_the_ephemeral_range() -> None:
    ephemeral = ephemeral_ports()
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < ephemeral.start for port in ports), (ports, ephemeral)
    assert len(ports) > 1  # drawn at random, so two test workers rarely meet on one
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


@pytest.fixture
def ten_listeners() -> Iterator[list[socket.socket]]:
    """Ten listening sockets on ten ports in a row, below the ephemeral range."""
    with ExitStack() as stack:
        for base in range(20_000, ephemeral_ports().start - 10, 97):
            try:
                socks = [stack.enter_context(socket.socket()) for _ in range(10)]
                for offset, sock in enumerate(socks):
                    sock.bind(("127.0.0.1", base + offset))
                    sock.listen()
            except OSError:
                stack.close()
                continue
            yield socks
            return
        pytest.fail("no ten ports in a row are free here")


def test_only_the_port_nothing_listens_on_is_given(
    ten_listeners: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ten_listeners[0].getsockname()[1]
    monkeypatch.setattr(embedded_broker, "_LOWEST_PORT", first)
    monkeypatch.setattr(embedded_broker, "ephemeral_ports", lambda: range(first + 10, 60999))
    free = ten_listeners.pop(4)
    free.close()
    # 1,000 draws each: with 100, one in ten thousand calls misses the one free port of ten
    # (0.9^100) and falls back to a kernel port, as a full suite once saw (50237).
    assert {free_port(tries=1000) for _ in range(20)} == {first + 4}
