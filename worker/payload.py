"""The measurement header at the start of every message body.

It travels in the body, not in protocol headers, so a path that crosses protocols (publish
over MQTT, consume over AMQP 0-9-1 from RabbitMQ's MQTT plugin) still carries it. Layout, big
endian, 44 bytes:

    magic      4 bytes  b"MPY" + format version
    test_key   u64      which test sent it (a hash of the test id)
    sender_key u64      which sender client sent it (a hash of peer id and client number)
    sequence   u64      0, 1, 2, ... per sender client
    intended   i64      wall-clock ns when the schedule meant to send it
    sent       i64      wall-clock ns when it was actually handed to the client library

Anything after the header is filler up to the message size.

A reply (request/reply tests) is the request's header as it came, then the replier's stamps,
by the replier's clock, 24 bytes:

    replier_key u64  who answered (a hash of its peer id)
    received    i64  wall-clock ns the request reached the replier's client library
    replied     i64  wall-clock ns the reply was handed to it
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "HEADER_BYTES",
    "HEADER_DTYPE",
    "HEADER_LAYOUT",
    "MAGIC",
    "REPLY_BYTES",
    "REPLY_LAYOUT",
    "REPLY_STAMPS",
    "ForeignPayloadError",
    "HeaderColumns",
    "MessageHeader",
    "headers_every",
    "key_of",
    "make_body",
    "pack_header",
    "read_header",
]

MAGIC = b"MPY\x01"
_LAYOUT = HEADER_LAYOUT = struct.Struct("!4sQQQqq")
HEADER_BYTES = _LAYOUT.size
REPLY_STAMPS = struct.Struct("!Qqq")
REPLY_LAYOUT = struct.Struct("!4sQQQqqQqq")
REPLY_BYTES = REPLY_LAYOUT.size

# (test_key, sender_key, sequence, intended_ns, sent_ns) -> the 44 header bytes: the sender's hot
# path, one C call with the magic bound in.
pack_header: Callable[[int, int, int, int, int], bytes] = functools.partial(_LAYOUT.pack, MAGIC)
# The same header as numpy reads and writes it side by side (big endian, packed).
HEADER_DTYPE = np.dtype(
    [("magic", "S4"), ("test", ">u8"), ("sender", ">u8"), ("sequence", ">u8"), ("intended", ">i8"), ("sent", ">i8")]
)
assert HEADER_DTYPE.itemsize == HEADER_BYTES


@functools.lru_cache(maxsize=16)
def headers_every(size: int) -> np.dtype[Any]:
    """The header's fields at the start of each `size`-byte record: a burst of same-size bodies,
    joined whole, is read (or written) without slicing each header out first."""
    fields = HEADER_DTYPE.fields
    assert fields is not None
    names = list(fields)
    layout: dict[str, object] = {
        "names": names,
        "formats": [fields[name][0] for name in names],
        "offsets": [fields[name][1] for name in names],
        "itemsize": size,
    }
    return np.dtype(layout)  # type: ignore[call-overload]


class HeaderColumns:
    """Same-size bodies made a burst at a time: the records of up to `most` messages of `size`
    bytes, magic, test key and filler written once, and per burst only the sender, sequence,
    intended and sent columns. For a driver that hands a burst to its library in one call
    (Kafka's `produce_batch`): 200 ns a message where packing each header took 550. The bodies
    are copies, so one run's clients share the records."""

    def __init__(self, test_key: int, size: int, filler: bytes, most: int) -> None:
        self.size = size
        raw = np.empty((most, size), dtype=np.uint8)
        raw[:, HEADER_BYTES:] = np.frombuffer(filler[: size - HEADER_BYTES], dtype=np.uint8)
        self._records = raw.reshape(-1).view(headers_every(size))
        self._records["magic"] = MAGIC
        self._records["test"] = test_key

    def bodies(self, sender_key: int, sequence: int, intended_ns: np.ndarray, sent_ns: int) -> list[bytes]:
        """The bodies of `sender_key`'s messages `sequence`, `sequence + 1`, ... intended at
        `intended_ns` (wall ns), all sent at `sent_ns`."""
        count, size = len(intended_ns), self.size
        records = self._records[:count]
        records["sender"] = sender_key
        records["sequence"] = np.arange(sequence, sequence + count)
        records["intended"] = intended_ns
        records["sent"] = sent_ns
        joined = records.tobytes()
        return [joined[start : start + size] for start in range(0, count * size, size)]


class ForeignPayloadError(ValueError):
    """A message that is not ours (no header, a short one, another test's)."""


@dataclass(frozen=True, slots=True)
class MessageHeader:
    test_key: int
    sender_key: int
    sequence: int
    intended_ns: int
    sent_ns: int


def key_of(text: str) -> int:
    """A stable 64-bit key for a test id or a sender name (the same on every host and run)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def make_body(header: MessageHeader, size_bytes: int, filler: bytes) -> bytes:
    """The header, then `filler` cut to make `size_bytes` in all (never less than the header)."""
    packed = pack_header(header.test_key, header.sender_key, header.sequence, header.intended_ns, header.sent_ns)
    return packed + filler[: max(0, size_bytes - HEADER_BYTES)]


def read_header(body: bytes | bytearray | memoryview) -> MessageHeader:
    if len(body) < HEADER_BYTES:
        raise ForeignPayloadError(f"{len(body)} bytes: shorter than the {HEADER_BYTES}-byte header")
    magic, test_key, sender_key, sequence, intended_ns, sent_ns = _LAYOUT.unpack_from(body)
    if magic != MAGIC:
        raise ForeignPayloadError(f"no Maestro header (starts with {bytes(magic)!r})")
    return MessageHeader(test_key, sender_key, sequence, intended_ns, sent_ns)
