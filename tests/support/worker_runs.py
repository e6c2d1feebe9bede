"""A worker's sender and receiver run straight from a test, without daemons or a coordinator."""

from __future__ import annotations

import asyncio
from pathlib import Path

from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter
from worker.latency import LatencyRecorder
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import SenderPlan, SenderRun


def send_unbounded(url: str, test_id: str, peer: str, messages: int, directory: Path) -> SenderRun:
    """`messages` of 100 bytes from one client as fast as they go; the run, closed."""
    sender = SenderRun(
        SenderPlan(
            test_id=test_id,
            peer=peer,
            urls=[url],
            rate_per_s=0,
            parallel_count=1,
            duration=Duration(messages=messages),
            size=MessageSize(100, 100),
        ),
        RateFileWriter(directory, "sender", {}),
    )

    async def run() -> None:
        await sender.run()
        await sender.close()

    asyncio.run(run())
    assert sender.failure is None and sender.stats.sent == messages
    return sender


def drain(url: str, test_id: str, directory: Path) -> ReceiverRun:
    """One client reads `url` until nothing came for 1.5 s (within a minute); the run, closed."""
    receiver = ReceiverRun(
        ReceiverPlan(test_id=test_id, urls=[url], parallel_count=1),
        RateFileWriter(directory, "receiver", {}),
        LatencyRecorder(directory),
    )

    async def run() -> None:
        await receiver.start()
        try:
            assert await receiver.drain(idle_s=1.5, timeout_s=60)
        finally:
            receiver.stop()
            await receiver.close()

    asyncio.run(run())
    return receiver
