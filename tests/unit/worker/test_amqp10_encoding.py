"""A plain AMQP 1.0 message's bytes made by the driver, against proton's own encoding."""

from __future__ import annotations

import random

import pytest
from proton import Message

from worker.drivers.amqp10 import data_sections, encode_data_message


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
