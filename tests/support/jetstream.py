"""JetStream streams removed by tests over NATS: a stream the NATS driver made for a test's
subject (consumers go with their stream)."""

from __future__ import annotations

import asyncio

import nats
import nats.js.errors

SHARED = "nats://127.0.0.1:4222"


def delete_stream(name: str, server: str = SHARED) -> None:
    async def run() -> None:
        nc = await nats.connect(server, allow_reconnect=False)
        try:
            await nc.jetstream().delete_stream(name)
        except nats.js.errors.NotFoundError:
            pass  # never made: the test failed before
        finally:
            await nc.close()

    asyncio.run(run())
