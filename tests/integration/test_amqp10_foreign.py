"""An AMQP 1.0 queue on RabbitMQ with others' messages in it: a string body and an integer body are
counted as foreign, and messages with the worker's header under sections the worker never
writes (a durable header, properties, application properties, message annotations) are read
as the worker's own, from their Data section. Every one of the worker's messages around them is
received, none twice.

The receiver reads a plain message's body from its bytes, not through a proton `Message`
(`worker.drivers.amqp10_bytes.data_body`); proton decodes only what that cannot read. Before, a
string body failed the receiver's handler (`bytes()` of a str).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from proton import Message
from proton.utils import BlockingConnection
from support.rabbit_queues import declare_queue, delete_queue
from support.worker_runs import drain, send_unbounded

from worker.payload import MessageHeader, key_of, make_body

OURS = 100
DECORATED = 50
TEST = "t-foreign10"


def _send_others(queue: str) -> None:
    connection = BlockingConnection("amqp://guest:guest@127.0.0.1:5672", allowed_mechs="PLAIN")
    try:
        sender = connection.create_sender(f"/queue/{queue}")
        sender.send(Message(body="hello"))  # an AmqpValue string
        sender.send(Message(body=42))  # an AmqpValue int (RabbitMQ 3.x fails a connection that sends it a list)
        now = time.time_ns()
        for sequence in range(DECORATED):
            header = MessageHeader(key_of(TEST), key_of("decorated"), sequence, now, now)
            message = Message(
                body=make_body(header, 300 + sequence * 10, bytes(range(256)) * 4),
                durable=True,
                subject="s" * sequence,  # list sizes either side of 255 bytes
                reply_to="/queue/elsewhere",
                correlation_id=f"c-{sequence}",
                properties={"k": "v" * (sequence * 8)},  # the application properties, small and large maps
                annotations={"x-opt-a": sequence},
            )
            message.inferred = True  # bytes as a Data section
            sender.send(message)
    finally:
        connection.close()


@pytest.mark.rabbitmq
@pytest.mark.timeout(90)
def test_foreign_bodies_are_counted_and_decorated_messages_of_ours_are_read(rabbitmq: None, tmp_path: Path) -> None:
    queue = f"foreign10-{uuid.uuid4().hex[:8]}"
    url = f"amqp10://guest:guest@127.0.0.1:5672//queue/{queue}?settle=at-least-once"
    declare_queue(queue)
    try:
        send_unbounded(url, TEST, "s1", OURS // 2, tmp_path / "first")
        _send_others(queue)
        send_unbounded(url, TEST, "s2", OURS // 2, tmp_path / "second")
        receiver = drain(url, TEST, tmp_path / "receiver")
    finally:
        delete_queue(queue)
    assert receiver.stats.foreign == {"no_header": 2}
    assert receiver.stats.received == OURS + DECORATED
    assert receiver.stats.duplicates_per_s.total() == 0
