"""A plain AMQP 1.0 message's bytes made by the driver, against proton's own encoding."""

from __future__ import annotations

import random

import pytest
from proton import Message

from worker.drivers.amqp10 import data_sections
from worker.drivers.amqp10_bytes import bare_data_bodies, body_bytes, data_body, encode_data_message


@pytest.mark.parametrize("durable", [False, True], ids=["not-durable", "durable"])
def test_a_body_encodes_to_the_bytes_proton_makes_of_it(durable: bool) -> None:
    """Every length where the Data section's binary changes its size byte (255, 256), empty, and
    past 64 KiB, with random bytes: what goes on the wire is proton's own encoding."""
    rng = random.Random(durable)
    sections = data_sections(durable)
    for size in [0, 1, 254, 255, 256, 257, 1024, 65_535, 65_536, 70_000, *rng.sample(range(2, 5000), 30)]:
        body = rng.randbytes(size)
        message = Message(body=body, durable=durable)
        message.inferred = True
        assert encode_data_message(sections, body) == bytes(message.encode()), size


def test_what_is_encoded_decodes_to_the_body() -> None:
    body = random.Random(1).randbytes(300)
    message = Message()
    message.decode(encode_data_message(data_sections(durable=True), body))
    assert message.body == body and message.durable


def _decorated(body: object, rng: random.Random) -> Message:
    """A message with every section before the body that proton writes, at random sizes either
    side of the one-byte size (255)."""
    return Message(
        body=body,
        durable=rng.random() < 0.5,
        priority=rng.randrange(10),
        ttl=rng.choice([0, 5.0]),
        id=rng.randbytes(rng.randrange(1, 40)).hex(),
        subject="s" * rng.randrange(0, 400),
        reply_to="/queue/" + "r" * rng.randrange(0, 20),
        correlation_id=rng.choice([None, "c" * rng.randrange(1, 300)]),
        properties=rng.choice([None, {}, {"k": "v" * rng.randrange(0, 600), "n": rng.randrange(1 << 40)}]),
        annotations=rng.choice([None, {"x-opt-a": "a" * rng.randrange(0, 300)}]),
        instructions=rng.choice([None, {"x-opt-i": rng.randrange(100)}]),
    )


def test_a_data_body_is_read_from_proton_encodings_of_every_section_before_it() -> None:
    rng = random.Random(7)
    for size in [0, 1, 255, 256, 65_536, 70_000, *rng.sample(range(2, 3000), 40)]:
        body = rng.randbytes(size)
        message = _decorated(body, rng)
        message.inferred = True  # bytes as a Data section, not an AmqpValue
        encoded = bytes(message.encode())
        assert data_body(encoded) == body, size
        assert data_body(bytearray(encoded)) == body  # as proton's Link.recv gives it
        assert type(data_body(bytearray(encoded))) is bytes


@pytest.mark.parametrize(
    ("body", "inferred", "read_as"),
    [
        ("hello", False, b"hello"),  # an AmqpValue string: its UTF-8
        (42, False, b""),
        ([1, 2], False, b""),
        ([b"a", b"b"], True, b""),  # an AmqpSequence
        (None, False, b""),
        (b"bytes", False, b"bytes"),  # an AmqpValue binary, not a Data section
    ],
)
def test_a_body_that_is_not_one_data_section_is_left_to_proton(body: object, inferred: bool, read_as: bytes) -> None:
    message = _decorated(body, random.Random(3))
    message.inferred = inferred
    encoded = bytes(message.encode())
    assert data_body(encoded) is None
    decoded = Message()
    decoded.decode(encoded)
    assert body_bytes(decoded.body) == read_as


def test_a_data_section_with_anything_after_it_is_left_to_proton() -> None:
    encoded = encode_data_message(data_sections(durable=False), b"first")
    assert data_body(encoded) == b"first"
    assert data_body(encoded + b"\x00Su\xa0\x06second") is None  # two Data sections
    assert data_body(encoded + b"\x00Sx\xc1\x01\x00") is None  # a footer (an empty map)
    assert data_body(encoded[:-1]) is None  # cut short
    assert data_body(b"") is None


def test_bare_data_bodies_read_what_data_body_reads_and_leave_the_rest_to_another_reader() -> None:
    """The stream driver's messages (a Data section and nothing else), every length where the
    binary's size changes its width, read in place; a message with sections before its body, or
    two Data sections, or cut short, goes to the other reader."""
    rng = random.Random(3)
    bodies = [rng.randbytes(size) for size in (0, 1, 254, 255, 256, 257, 65_536, 70_000)]
    bare = [encode_data_message(b"", body) for body in bodies]
    others = [
        encode_data_message(data_sections(durable=True), b"with a header"),
        bare[3] + b"\x00Su\xa0\x03two",
        bare[5][:-1],
        bare[0][:4],  # a descriptor and a constructor, and no length
        bare[6][:7],
    ]
    assert bare_data_bodies(bare, lambda message: b"other") == bodies
    assert bare_data_bodies(others, lambda message: b"other") == [b"other"] * 5
