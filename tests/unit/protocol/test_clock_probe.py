"""Clock probes with a cluster key (#38): a keyed peer answers only probes tagged with its key, a
keyed coordinator takes only answers tagged with it, so a host that can spoof UDP can neither
move a measured offset nor make a peer answer it. Real UDP exchanges on loopback."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from protocol.clock_probe import PROBE_BYTES, ClockProber, Exchange, answer, probe, start_responder
from protocol.signing import NoteKey

KEY = NoteKey(b"k" * 32)
OTHER = NoteKey(b"o" * 32)
_ANSWER = struct.Struct("!4sQqqqB")
SECOND_NS = 1_000_000_000


def test_a_keyed_responder_answers_only_probes_tagged_with_its_key() -> None:
    tagged = probe(7, 123, KEY)
    reply = answer(tagged, b"peer-1", received_ns=456, key=KEY)
    assert reply is not None
    body, tag = reply[:-32], reply[-32:]
    assert body.endswith(b"peer-1") and tag == KEY.tag(b"maestro-clock-answer/1", body)
    assert _ANSWER.unpack_from(body)[:4] == (b"MCK2", 7, 123, 456)
    assert len(reply) <= len(tagged) == PROBE_BYTES  # no more bytes back than came
    assert answer(probe(7, 123), b"peer-1", 456, key=KEY) is None  # untagged
    assert answer(probe(7, 123, OTHER), b"peer-1", 456, key=KEY) is None  # another key
    altered = bytearray(tagged)
    altered[12] ^= 1  # t1 changed on the way
    assert answer(bytes(altered), b"peer-1", 456, key=KEY) is None
    assert answer(tagged, b"peer-1", 456) is None  # an unkeyed peer: a keyed coordinator takes no untagged answer
    assert answer(probe(7, 123), b"peer-1", 456) is not None


def test_a_probes_tag_is_no_answers_and_no_notes() -> None:
    body = b"MCK1" + bytes(16)
    assert KEY.tag(b"maestro-clock-probe/1", body) != KEY.tag(b"maestro-clock-answer/1", body)
    assert KEY.tag(b"maestro-clock-probe/1", body) != KEY.mac(body, "", "")


@contextmanager
def _responder(peer_id: str, key: NoteKey | None) -> Iterator[int]:
    """A peer's responder in a loop of its own; its port."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    transport, port = asyncio.run_coroutine_threadsafe(start_responder(peer_id, 0, key), loop).result(5)

    async def close() -> None:
        transport.close()
        await asyncio.sleep(0.01)  # the transport closes its socket on the loop's next turn

    try:
        yield port
    finally:
        asyncio.run_coroutine_threadsafe(close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _measure(port: int, key: NoteKey | None, peer_id: str = "peer-1") -> dict[str, Exchange]:
    with ClockProber(key) as prober:
        return dict(prober.measure({peer_id: [("127.0.0.1", port)]}, samples=8, wait_s=0.05))


def test_a_keyed_coordinator_measures_a_keyed_peer_and_nobody_without_the_key() -> None:
    with _responder("peer-1", KEY) as port:
        measured = _measure(port, KEY)
        assert list(measured) == ["peer-1"]
        exchange = measured["peer-1"]
        assert abs(exchange.offset_ns) < 5_000_000, exchange  # one host, one clock
        assert _measure(port, None) == {}  # the peer does not answer untagged probes
        assert _measure(port, OTHER) == {}
    with _responder("peer-1", None) as port:
        assert list(_measure(port, None)) == ["peer-1"]
        assert _measure(port, KEY) == {}  # nor does a keyed coordinator take an untagged answer


class _Spoofer:
    """A host that answers every probe it sees as peer-1 would, with its clock a second ahead,
    tagging the answer with `key` (None: untagged)."""

    def __init__(self, key: NoteKey | None) -> None:
        self.key = key
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(512)
            except TimeoutError:
                continue
            _, probe_id, t1 = struct.unpack_from("!4sQq", data)
            reply = _ANSWER.pack(b"MCK1", probe_id, t1, t1 + SECOND_NS, t1 + SECOND_NS, 6) + b"peer-1"
            if self.key is not None:
                reply += self.key.tag(b"maestro-clock-answer/1", reply)
            self.sock.sendto(reply, addr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def test_a_spoofed_answer_moves_no_keyed_measurement() -> None:
    for forger_key in (None, OTHER):
        spoofer = _Spoofer(forger_key)
        try:
            assert _measure(spoofer.port, KEY) == {}, forger_key
        finally:
            spoofer.close()
    # What the tag stops: without a key the forged second is taken as the peer's clock.
    spoofer = _Spoofer(None)
    try:
        measured = _measure(spoofer.port, None)
        assert measured["peer-1"].offset_ns > 0.99 * SECOND_NS
    finally:
        spoofer.close()
