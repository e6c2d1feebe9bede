"""AMQP 1.0 message bytes whose body is one Data section, made and read without a codec.

The AMQP 1.0 driver sends and receives such messages, and so does the RabbitMQ Streams driver: a
stream stores each message as AMQP 1.0 bytes, and RabbitMQ converts them for its AMQP 0-9-1
consumers (a body that is not AMQP 1.0 does not convert), so one encoding lets a path cross from
the stream protocol to AMQP 0-9-1 and back. No client library is imported here.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "DATA_LONG",
    "DATA_SHORT",
    "bare_data_bodies",
    "body_bytes",
    "data_body",
    "data_head",
    "encode_data_message",
]

# A Data section's descriptor and the binary's constructor, one-byte length or four.
DATA_SHORT = b"\x00Su\xa0"
DATA_LONG = b"\x00Su\xb0"


def encode_data_message(sections: bytes, body: bytes) -> bytes:
    """The bytes of a message whose body is `body` as one Data section after `sections` (the
    sections before it, as encoded: `b""` for none). For the AMQP 1.0 driver these are the bytes
    `Message(body=body, durable=...)`, inferred, encodes to (`sections` from
    `amqp10.data_sections`): without the Message, its Data object and its encoding, a third of
    proton's thread per message (bench/HISTORY.md)."""
    return sections + data_head(len(body)) + body


def data_head(size: int) -> bytes:
    """A Data section's bytes before a body of `size` bytes: its descriptor, and the binary's
    constructor and length (one byte below 256, else four)."""
    return DATA_SHORT + bytes((size,)) if size < 256 else DATA_LONG + size.to_bytes(4, "big")


# The sections that may come before the body (header, delivery and message annotations,
# properties, application properties): each a list or a map, skipped by its size.
_BEFORE_BODY = range(0x70, 0x75)
_DATA_CODE = 0x75


def data_body(encoded: bytes | bytearray) -> bytes | None:
    """The body of a message whose body is one Data section, the last section, read from its
    `encoded` bytes; None for any other (an AmqpValue or AmqpSequence body, several Data sections,
    a footer, a descriptor or an encoding proton may use and this does not know), which a codec
    (proton's, rstream's) decodes. Decoding a proton `Message` turns its annotations, properties
    and body into Python objects, 4.6 µs a message; this takes 0.5."""
    pos, end = 0, len(encoded)
    while pos + 3 < end and encoded[pos] == 0 and encoded[pos + 1] == 0x53:  # described by a small ulong
        code, constructor = encoded[pos + 2], encoded[pos + 3]
        pos += 3
        if code == _DATA_CODE:
            if constructor == 0xA0:  # vbin8
                start = pos + 2
                stop = start + encoded[pos + 1]
            elif constructor == 0xB0:  # vbin32
                start = pos + 5
                stop = start + int.from_bytes(encoded[pos + 1 : start], "big")
            else:
                return None
            return bytes(encoded[start:stop]) if stop == end else None  # proton's recv gives a bytearray
        if code not in _BEFORE_BODY:
            return None
        if constructor == 0x45:  # list0
            pos += 1
        elif constructor in (0xC0, 0xC1):  # list8, map8: a byte of size
            pos += 2 + encoded[pos + 1]
        elif constructor in (0xD0, 0xD1):  # list32, map32: four bytes of size
            pos += 5 + int.from_bytes(encoded[pos + 1 : pos + 5], "big")
        else:
            return None
    return None


def bare_data_bodies(messages: list[bytes], other: Callable[[bytes], bytes]) -> list[bytes]:
    """The bodies of messages that are one Data section and nothing else (what the stream driver
    writes), read in place, a burst at a time; any other message's through `other`. A bare
    message's length gives the head it must start with, made once per length in the burst.
    `data_body` reads these too: 533 ns a 256 B body and 349 a 100 B one, where this took 205
    and 189."""
    heads: dict[int, tuple[bytes, int]] = {}
    bodies: list[bytes] = []
    append = bodies.append
    for message in messages:
        end = len(message)
        known = heads.get(end)
        if known is None:
            head = DATA_SHORT + bytes((end - 5,)) if 5 <= end < 261 else DATA_LONG + max(0, end - 8).to_bytes(4, "big")
            known = heads[end] = (head, len(head))
        head, skip = known
        append(message[skip:] if message.startswith(head) else other(message))
    return bodies


def body_bytes(body: object) -> bytes:
    """A decoded message's body as the bytes a receiver reads: a string as its UTF-8, nothing
    (or a body that is neither, a list or a map) as empty, counted then as a foreign message."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    return b""
