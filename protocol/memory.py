"""Give freed memory back to the operating system, where the C library allows it.

A daemon that runs for a night allocates and frees the same buffers every second (histograms,
encoded rate rows, notes). glibc keeps freed memory in its arenas, one per thread that
allocated, and a heap fragmented that way keeps growing in resident size while Python's own
heap stays flat (tracemalloc showed it so in the soak, bench/soak.py). `malloc_trim` returns
the free pages; elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util

__all__ = ["release_free_memory", "trim_forever"]

_TRIM_EVERY_S = 60.0


def _libc_trim() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _libc_trim()


def release_free_memory() -> bool:
    """True when the C library could give pages back."""
    return bool(_TRIM(0)) if _TRIM is not None else False


async def trim_forever(every_s: float = _TRIM_EVERY_S) -> None:
    while True:
        await asyncio.sleep(every_s)
        # Off the loop: trimming a large heap takes a few milliseconds.
        await asyncio.to_thread(release_free_memory)
