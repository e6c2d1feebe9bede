"""The heap is frozen for the span of a run, the run's own garbage is still collected, and the
last run out unfreezes it."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import pytest

from protocol.options import Duration, MessageSize
from protocol.ratefile import RateFileWriter
from worker.drivers.memory import MemoryDriver
from worker.heap import HeapHold, frozen_heap
from worker.latency import LatencyRecorder
from worker.receiver import ReceiverPlan, ReceiverRun
from worker.sender import SenderPlan, SenderRun


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_what_exists_is_frozen_and_what_the_run_makes_is_collected() -> None:
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        node = _Node()
        gone = weakref.ref(node)
        del node
        gc.collect()
        assert gone() is None
    assert gc.get_freeze_count() == 0


def test_the_last_of_two_runs_unfreezes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Counted by calls, not by gc.get_freeze_count(): a frozen object whose last reference another
    # thread drops (pytest-xdist's own) leaves the frozen generation, so the count can fall.
    freezes = 0
    freeze = gc.freeze

    def counted() -> None:
        nonlocal freezes
        freezes += 1
        freeze()

    monkeypatch.setattr(gc, "freeze", counted)
    with frozen_heap():
        with frozen_heap():
            assert freezes == 1  # the second run does not freeze again
        assert gc.get_freeze_count() > 0  # nor does its end unfreeze the first's heap
    assert gc.get_freeze_count() == 0


def test_a_hold_counts_once_however_often_repeated() -> None:
    first, second = HeapHold(), HeapHold()
    first.hold()
    first.hold()
    second.hold()
    first.release()
    first.release()
    assert gc.get_freeze_count() > 0  # the second still holds it
    second.release()
    assert gc.get_freeze_count() == 0


def test_the_unfrozen_heap_is_collected_again_after_the_run() -> None:
    node = _Node()
    gone = weakref.ref(node)
    with frozen_heap():
        del node
        gc.collect()
        assert gone() is not None  # frozen: no collection during the run walks it
    gc.collect()
    assert gone() is None


def test_a_sender_sends_with_the_heap_frozen(tmp_path: Path) -> None:
    seen: list[int] = []

    class Watching(MemoryDriver):
        def publish(self, body: bytes, token: int) -> None:
            seen.append(gc.get_freeze_count())
            super().publish(body, token)

    plan = SenderPlan(
        test_id="t-1",
        peer="s1@host",
        urls=["memory://x/q"],
        rate_per_s=0.0,
        parallel_count=1,
        duration=Duration(messages=10),
        size=MessageSize(64, 64),
    )
    run = SenderRun(plan, RateFileWriter(tmp_path, "sender", {}), driver_for={0: Watching(0)}.__getitem__)
    asyncio.run(run.run())
    run.rate_file.close()
    assert len(seen) == 10 and min(seen) > 0
    assert gc.get_freeze_count() == 0


def test_a_receiver_holds_the_heap_frozen_from_start_to_close(tmp_path: Path) -> None:
    run = ReceiverRun(
        ReceiverPlan(test_id="t-1", urls=["memory://x/q"], parallel_count=1),
        RateFileWriter(tmp_path, "receiver", {}),
        LatencyRecorder(tmp_path),
        driver_for=MemoryDriver,
    )

    async def scenario() -> int:
        await run.start()  # receiving from here on, whether or not run() is ever called
        frozen = gc.get_freeze_count()
        await run.close()
        return frozen

    assert asyncio.run(scenario()) > 0
    assert gc.get_freeze_count() == 0
