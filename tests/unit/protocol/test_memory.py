"""Freed memory goes back to the system on glibc (these machines), and the daemon's loop does it."""

from __future__ import annotations

import asyncio
import platform

import pytest

from protocol import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_gives_freed_pages_back() -> None:
    blocks = [bytearray(64 * 1024) for _ in range(2000)]  # 128 MB in blocks below mmap's threshold
    del blocks[::2]
    blocks.clear()
    assert memory.release_free_memory() is True


def test_the_trimming_loop_trims_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append(1) or True)

    async def run() -> None:
        task = asyncio.create_task(memory.trim_forever(every_s=0.01))
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(run())
    assert len(calls) >= 3
