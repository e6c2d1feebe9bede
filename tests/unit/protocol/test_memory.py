"""Freed memory goes back to the system on glibc (these machines), and the daemon's loop does it."""

from __future__ import annotations

import asyncio
import os
import platform

import pytest

from protocol import memory


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_gives_freed_pages_back() -> None:
    # 128 MB in blocks below mmap's threshold, every other one freed: 64 MB of holes between
    # live blocks, which free() alone never gives back (only the heap's top is trimmed so).
    blocks = [bytearray(b"x" * (64 * 1024)) for _ in range(2000)]
    del blocks[::2]
    before = _resident_mb()
    assert memory.release_free_memory() is True
    given_back = before - _resident_mb()
    assert given_back >= 48, f"{given_back:.1f} MB of the 64 MB freed went back to the system"
    assert len(blocks) == 1000  # the live half kept to the end


def test_the_trimming_loop_trims_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append(1) or True)

    async def run() -> None:
        task = asyncio.create_task(memory.trim_forever(every_s=0.01))
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(run())
    assert len(calls) >= 3
