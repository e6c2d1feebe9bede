"""RabbitMQ queues made and removed by tests over AMQP 0-9-1: RabbitMQ's AMQP 1.0 address
/queue/NAME needs the queue to exist before a link to it opens."""

from __future__ import annotations

import asyncio

import aio_pika

GUEST = "amqp://guest:guest@127.0.0.1:5672/"


def declare_queue(name: str, url: str = GUEST) -> None:
    async def declare() -> None:
        connection = await aio_pika.connect(url)
        async with connection:
            await (await connection.channel()).declare_queue(name, auto_delete=False)

    asyncio.run(declare())


def delete_queue(name: str, url: str = GUEST) -> None:
    async def delete() -> None:
        connection = await aio_pika.connect(url)
        async with connection:
            await (await connection.channel()).queue_delete(name)

    asyncio.run(delete())
