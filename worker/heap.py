"""The garbage collector during a run: what exists when the run starts is left out of its scans.

CPython's full collection walks every container object in the heap. After a worker's imports
(asyncio, the four client libraries, numpy, hdrh) that is some 50,000 objects and 20-30 ms a
walk, and a sender at 25,000 msg/s allocates enough to set one off every second or so: each
stopped the event loop and the libraries' threads alike, and at 80 % of a process's maximum the
backlog it left took far longer to drain (schedule lag p99 30-155 ms, against 8.5-28 ms frozen:
`bench/HISTORY.md`). `gc.freeze()` moves those objects to a generation no collection walks; the
run's own garbage is still collected. Unfrozen at the end, so what the run held is collected
once it is gone and a long-lived daemon does not accumulate it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["HeapHold", "frozen_heap"]


@dataclass
class _Runs:
    inside: int = 0  # runs in this process holding the heap frozen: a sender and a receiver may share one


_RUNS = _Runs()


@dataclass
class HeapHold:
    """One run's hold on the frozen heap, for a run whose span is not one block of code (a
    receiver's, from `start` to `close`): the first hold in the process freezes the heap as it
    is, the last release unfreezes it; each hold counts once however often it is repeated."""

    held: bool = False

    def hold(self) -> None:
        if self.held:
            return
        if _RUNS.inside == 0:
            # No gc.collect() first: it walks the whole heap (30 ms on a quiet machine, more on
            # a loaded one) at every run's start, for nothing: garbage frozen with the rest is
            # collected once the run unfreezes it.
            gc.freeze()
        _RUNS.inside += 1
        self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        _RUNS.inside -= 1
        if _RUNS.inside == 0:
            gc.unfreeze()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """The heap frozen for the span of a block: a sender's or a requester's `run`."""
    hold = HeapHold()
    hold.hold()
    try:
        yield
    finally:
        hold.release()
