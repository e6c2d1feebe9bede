"""RabbitMQ queues made and removed by tests over AMQP 0-9-1: RabbitMQ's AMQP 1.0 address
/queue/NAME needs the queue to exist before a link to it opens."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aio_pika
import aio_pika.abc

GUEST = "amqp://guest:guest@127.0.0.1:5672/"


def declare_queue(name: str, url: str = GUEST) -> None:
    _on_a_channel(url, lambda channel: channel.declare_queue(name, auto_delete=False))


def delete_queue(name: str, url: str = GUEST) -> None:
    _on_a_channel(url, lambda channel: channel.queue_delete(name))


def _on_a_channel(url: str, action: Callable[[aio_pika.abc.AbstractChannel], Awaitable[object]]) -> None:
    async def run() -> None:
        connection = await aio_pika.connect(url)
        async with connection:
            await action(await connection.channel())

    asyncio.run(run())
