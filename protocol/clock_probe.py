"""Clock offsets over a direct UDP exchange, NTP-style, whatever the control broker is.

A PING through the control broker measures a clock only as well as the broker passes small
messages: a stock Mosquitto (no `set_tcp_nodelay`) holds each reply ~40 ms for Nagle's algorithm
against a delayed ACK, on one leg only, which moves the offset estimate by up to 20 ms (measured
here: round trips of 42-44 ms on every sample). So every peer answers clock probes on a UDP port
of its own (`ClockResponder`), and the coordinator (`ClockProber`) stamps four times per exchange:

    t1 coordinator sends, t2 peer receives, t3 peer answers, t4 coordinator receives

offset = ((t2 - t1) + (t3 - t4)) / 2 is the peer's clock minus the coordinator's, and the true
offset lies in [t3 - t4, t2 - t1] whatever the two legs took (causality alone): a bound of
± (round trip - the peer's own time) / 2 that holds on any path. Of many exchanges the one with
the smallest round trip is kept (NTP's minimum filter): its interval is the narrowest.

The answer names the peer, so an exchange that reached another process (an address the peer
advertised but the coordinator cannot reach as meant, such as 127.0.0.1 across hosts) is
refused, and carries the probe's random id, so an answer nobody asked for is dropped.

With a cluster key (protocol.signing) both legs carry an HMAC-SHA256 tag: a keyed peer answers
only probes tagged with its key, and a keyed coordinator takes only answers tagged with it, so a
host that can spoof UDP cannot move a measured offset, nor make a peer answer it. The answer's
tag is computed after t3 is stamped, which delays only the way back, by the tag's time (2.5 us
measured here): it moves the offset by half of that and stays inside the exchange's interval,
whose bound counts the whole round trip.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import select
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from protocol.signing import NoteKey

__all__ = ["PROBE_BYTES", "ClockProber", "ClockResponder", "Exchange", "answer", "probe", "start_responder"]

_MAGIC = b"MCK1"  # an untagged probe or answer
_MAGIC_TAGGED = b"MCK2"  # a tagged one: an unkeyed peer does not answer it
_PROBE = struct.Struct("!4sQq")  # magic, probe id, t1
_ANSWER = struct.Struct("!4sQqqqB")  # magic, probe id, t1, t2, t3, length of the peer id that follows
_PROBE_TAG = b"maestro-clock-probe/1"  # what a tag signs is a probe, or an answer, and nothing else
_ANSWER_TAG = b"maestro-clock-answer/1"
_TAG_BYTES = 32
# A probe is padded to the largest answer (a 255-byte peer id and a tag), and a responder answers
# no probe shorter than its answer: a spoofed source address gets no more bytes than were sent
# (an unpadded 20-byte probe drew 69 bytes, x3.45, from anyone).
PROBE_BYTES = _ANSWER.size + 255 + _TAG_BYTES


@dataclass(frozen=True)
class Exchange:
    """One probe and its answer: four wall-clock stamps, ns (t1, t4 the coordinator's)."""

    t1: int
    t2: int
    t3: int
    t4: int

    @property
    def offset_ns(self) -> float:
        """The peer's clock minus the coordinator's."""
        return ((self.t2 - self.t1) + (self.t3 - self.t4)) / 2

    @property
    def rtt_ns(self) -> int:
        """The round trip less the time the peer held the probe."""
        return max(0, (self.t4 - self.t1) - (self.t3 - self.t2))

    @property
    def uncertainty_ns(self) -> float:
        # Half the interval causality leaves, plus a microsecond for the clocks' reading.
        return self.rtt_ns / 2 + 1000

    @property
    def at_ns(self) -> int:
        """When, on the coordinator's clock (the midpoint of its two stamps)."""
        return (self.t1 + self.t4) // 2


def probe(probe_id: int, t1: int, key: NoteKey | None = None) -> bytes:
    """A probe sent at `t1`, tagged with `key` where there is one, padded to PROBE_BYTES."""
    if key is None:
        return _PROBE.pack(_MAGIC, probe_id, t1).ljust(PROBE_BYTES, b"\0")
    body = _PROBE.pack(_MAGIC_TAGGED, probe_id, t1)
    return (body + key.tag(_PROBE_TAG, body)).ljust(PROBE_BYTES, b"\0")


def answer(probe: bytes, peer_id: bytes, received_ns: int, key: NoteKey | None = None) -> bytes | None:
    """The responder's reply to a probe received at `received_ns`; None for anything else: with
    a `key`, for a probe not tagged with it; without one, for a tagged probe (a keyed
    coordinator takes no untagged answer); and for a probe shorter than the reply."""
    if len(probe) < _PROBE.size:
        return None
    body = probe[: _PROBE.size]
    magic, probe_id, t1 = _PROBE.unpack(body)
    if magic != (_MAGIC if key is None else _MAGIC_TAGGED):
        return None
    if key is not None and not hmac.compare_digest(
        probe[_PROBE.size : _PROBE.size + _TAG_BYTES], key.tag(_PROBE_TAG, body)
    ):
        return None
    reply = _ANSWER.pack(magic, probe_id, t1, received_ns, time.time_ns(), len(peer_id)) + peer_id
    if key is not None:
        reply += key.tag(_ANSWER_TAG, reply)
    return reply if len(reply) <= len(probe) else None


class ClockResponder(asyncio.DatagramProtocol):
    """A peer's side: answers each probe with its clock as it received it and as it answers."""

    def __init__(self, peer_id: str, key: NoteKey | None = None) -> None:
        self.peer_id = peer_id.encode()[:255]
        self.key = key
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector transport for datagrams is not a DatagramTransport subclass.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        received_ns = time.time_ns()
        reply = answer(data, self.peer_id, received_ns, self.key)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)

    def error_received(self, exc: Exception) -> None:
        """An ICMP error for an answer sent earlier: the prober has gone; nothing to do."""


def _udp_socket(port: int) -> socket.socket:
    """A UDP socket on every address, IPv6 and IPv4 alike where the host has IPv6 (IPv4 ones
    arrive mapped), else IPv4 alone."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", port))
    else:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
    sock.setblocking(False)
    return sock


async def start_responder(
    peer_id: str, port: int = 0, key: NoteKey | None = None
) -> tuple[asyncio.DatagramTransport, int]:
    """The responder on `port` (0: a free port), answering only probes tagged with `key` where
    there is one; the transport and the port it got."""
    if not 0 <= port <= 65535:
        raise OSError(f"port {port} is not a UDP port (0-65535)")
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: ClockResponder(peer_id, key), sock=_udp_socket(port))
    return transport, int(transport.get_extra_info("sockname")[1])


class ClockProber:
    """The coordinator's side: a burst of probes to each peer's advertised endpoints, the
    exchange with the smallest round trip kept per peer. Endpoints are IPv4 or IPv6 addresses,
    or names, resolved once. With a `key`, probes are tagged with it and only answers tagged
    with it count."""

    def __init__(self, key: NoteKey | None = None) -> None:
        self._key = key
        self._sock = _udp_socket(0)
        self._v6 = self._sock.family == socket.AF_INET6
        self._resolved: dict[tuple[str, int], tuple[Any, ...] | None] = {}

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> ClockProber:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def measure(
        self,
        endpoints: Mapping[str, Iterable[tuple[str, int]]],
        samples: int = 32,
        wait_s: float = 0.02,
    ) -> dict[str, Exchange]:
        """Peer id -> its best exchange, for the peers that answered. Each of `samples` rounds
        probes every endpoint once and waits up to `wait_s` for the round's answers, so the
        exchanges do not queue behind each other; a late answer still counts, at its own
        round trip."""
        resolved = {peer_id: [self._resolve(e) for e in eps] for peer_id, eps in endpoints.items()}
        targets = {peer_id: [a for a in addresses if a is not None] for peer_id, addresses in resolved.items()}
        targets = {peer_id: addresses for peer_id, addresses in targets.items() if addresses}
        pending: dict[int, str] = {}  # probe id -> the peer it is for
        best: dict[str, Exchange] = {}
        for _ in range(samples):
            heard: set[str] = set()
            for peer_id, addresses in targets.items():
                for address in addresses:
                    probe_id = secrets.randbits(64)
                    pending[probe_id] = peer_id
                    try:
                        self._sock.sendto(probe(probe_id, time.time_ns(), self._key), address)
                    except OSError:
                        pending.pop(probe_id)  # unreachable from here: another endpoint may do
            deadline = time.monotonic() + wait_s
            while heard != targets.keys() and (left := deadline - time.monotonic()) > 0:
                for peer_id, exchange in self._answers(pending, left):
                    heard.add(peer_id)
                    if peer_id not in best or exchange.rtt_ns < best[peer_id].rtt_ns:
                        best[peer_id] = exchange
        return best

    def _resolve(self, endpoint: tuple[str, int]) -> tuple[Any, ...] | None:
        """The socket address to probe `endpoint` at, or None where it does not resolve to one
        this socket can reach."""
        if endpoint not in self._resolved:
            host, port = endpoint
            family = socket.AF_INET6 if self._v6 else socket.AF_INET
            try:
                found = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM, flags=socket.AI_V4MAPPED)
            except (OSError, UnicodeError):
                found = []
            self._resolved[endpoint] = found[0][4] if found else None
        return self._resolved[endpoint]

    def _answers(self, pending: dict[int, str], timeout_s: float) -> list[tuple[str, Exchange]]:
        """What arrives within `timeout_s` (at least one wait), stamped as it is read."""
        found = []
        ready, _, _ = select.select([self._sock], [], [], timeout_s)
        while ready:
            try:
                data = self._sock.recv(_ANSWER.size + 256 + _TAG_BYTES)
            except BlockingIOError:
                break
            except OSError:  # an ICMP error for an earlier probe (port unreachable)
                continue
            t4 = time.time_ns()
            if self._key is not None:
                data, tag = data[:-_TAG_BYTES], data[-_TAG_BYTES:]
                if not hmac.compare_digest(tag, self._key.tag(_ANSWER_TAG, data)):
                    continue  # not from a holder of the key
            if len(data) < _ANSWER.size:
                continue
            magic, probe_id, t1, t2, t3, length = _ANSWER.unpack_from(data)
            peer_id = pending.pop(probe_id, None)
            expected = _MAGIC if self._key is None else _MAGIC_TAGGED
            if magic != expected or peer_id is None or data[_ANSWER.size : _ANSWER.size + length] != peer_id.encode():
                continue  # not ours, or another process at an address the peer advertised
            found.append((peer_id, Exchange(t1, t2, t3, t4)))
        return found
