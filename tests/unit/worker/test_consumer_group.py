"""A receiver whose clients share a consumer group starts once the group holds still, so that
no message sent after the start waits for a rebalance (`ReceiverRun.settle_group`)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from protocol.ratefile import RateFileWriter
from worker import receiver
from worker.drivers.base import DriverError, GroupShare
from worker.drivers.memory import MemoryDriver
from worker.latency import LatencyRecorder
from worker.receiver import ReceiverPlan, ReceiverRun


class GroupDriver(MemoryDriver):
    """A consumer whose share of its group the test moves."""

    def __init__(self, client: int, share: GroupShare) -> None:
        super().__init__(client)
        self.share = share

    def group_share(self) -> GroupShare | None:
        return self.share


def _share(owned: set[int], partitions: int | None = 4, rebalancing: bool = False) -> GroupShare:
    return GroupShare(frozenset(owned), partitions, rebalancing)


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiver, "_GROUP_STEADY_S", 0.2)
    monkeypatch.setattr(receiver, "_GROUP_QUIET_S", 0.6)
    monkeypatch.setattr(receiver, "_GROUP_SETTLE_S", 1.5)


def test_shares_merge_and_cover_a_topic_only_whole_and_still() -> None:
    halves = [_share({0, 1}), _share({2, 3})]
    assert GroupShare.merged(halves) == _share({0, 1, 2, 3})
    assert GroupShare.merged(halves).covers_topic()
    assert not GroupShare.merged([_share({0, 1}), _share(set(), rebalancing=True)]).covers_topic()
    assert not GroupShare.merged([_share({0, 1}), _share({2})]).covers_topic()
    assert not GroupShare.merged([_share({0, 1}, None), _share({2, 3}, None)]).covers_topic()  # size unknown
    # Two partition counts: the topic changed under the consumers; nothing is known of it.
    assert GroupShare.merged([_share({0, 1}, 4), _share({2, 3}, 6)]).partitions is None


def _receiver(tmp_path: Path, drivers: list[MemoryDriver]) -> ReceiverRun:
    return ReceiverRun(
        ReceiverPlan(test_id="t-1", urls=["memory://x/q"], parallel_count=len(drivers)),
        RateFileWriter(tmp_path, "receiver", {}),
        LatencyRecorder(tmp_path),
        driver_for=lambda client: drivers[client],
    )


def _start(drivers: list[GroupDriver], tmp_path: Path, moves: list[tuple[float, int, GroupShare]]) -> float:
    """Start a receiver of `drivers` while `moves` (after s, client, its new share) happen; the
    seconds its start took."""
    run = _receiver(tmp_path, list(drivers))

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        for after_s, client, share in moves:
            loop.call_later(after_s, setattr, drivers[client], "share", share)
        started = time.monotonic()
        await run.start()
        took = time.monotonic() - started
        await run.close()
        return took

    return asyncio.run(scenario())


def test_the_start_waits_until_the_whole_topic_is_held_and_still(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Client 1 lost its partitions to a rebalance, and gets them back 0.4 s later.
    drivers = [GroupDriver(0, _share({0, 1})), GroupDriver(1, _share(set(), rebalancing=True))]
    with caplog.at_level(logging.INFO, logger="worker.receiver"):
        took = _start(drivers, tmp_path, [(0.4, 1, _share({2, 3}))])
    assert took >= 0.4 + 0.2  # still for _GROUP_STEADY_S after it came back
    assert caplog.text == ""  # not by the deadline, nor taken for a group held in part


def test_a_group_held_in_part_here_starts_once_nothing_moved_for_a_round(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Another receiver holds partitions 2 and 3: this one's share never covers the topic.
    drivers = [GroupDriver(0, _share({0})), GroupDriver(1, _share({1}))]
    with caplog.at_level(logging.INFO, logger="worker.receiver"):
        took = _start(drivers, tmp_path, [(0.3, 1, _share({1, 2}))])
    assert took >= 0.3 + 0.6  # quiet for _GROUP_QUIET_S after the last move
    assert "its partitions here: 3 of 4 (the rest elsewhere)" in caplog.text
    assert "WARNING" not in caplog.text  # not by the deadline


def test_a_group_that_never_holds_still_is_named_and_the_start_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    drivers = [GroupDriver(0, _share(set(), rebalancing=True))]
    took = _start(drivers, tmp_path, [])
    assert took >= 1.5
    assert "still moved partitions after 1.5 s" in caplog.text


def test_clients_in_no_group_have_no_share_to_wait_for(tmp_path: Path) -> None:
    run = _receiver(tmp_path, [MemoryDriver(0), MemoryDriver(1)])

    async def scenario() -> None:
        await run.start()
        assert run.group_share() is None  # settle_group returns at its first look
        await run.close()

    asyncio.run(scenario())


class JoiningDriver(MemoryDriver):
    """A consumer whose subscription returns once every client of the group has asked to join
    (as a group's join round completes), or fails when told to."""

    def __init__(self, client: int, joined: list[int], everyone: int, fails: bool = False) -> None:
        super().__init__(client)
        self.joined, self.everyone, self.fails = joined, everyone, fails

    async def receive(self, on_messages: Any, processing_delay_s: float = 0.0) -> None:
        self.joined.append(self.client)
        while len(self.joined) < self.everyone:  # noqa: ASYNC110 - the other clients' calls
            await asyncio.sleep(0.01)
        if self.fails:
            raise DriverError(f"client {self.client}: no partitions", retry=False)
        await super().receive(on_messages, processing_delay_s)


def test_every_client_subscribes_at_once(tmp_path: Path) -> None:
    # One after the other, the first client's subscription would wait for the others forever.
    joined: list[int] = []
    drivers = [JoiningDriver(client, joined, 3) for client in range(3)]
    run = _receiver(tmp_path, list(drivers))

    async def scenario() -> None:
        async with asyncio.timeout(5):
            await run.start()
        await run.close()

    asyncio.run(scenario())
    assert sorted(joined) == [0, 1, 2]


def test_a_client_that_cannot_subscribe_fails_the_start_and_every_client_is_closed(tmp_path: Path) -> None:
    joined: list[int] = []
    drivers = [JoiningDriver(client, joined, 3, fails=client == 1) for client in range(3)]
    run = _receiver(tmp_path, list(drivers))

    async def scenario() -> None:
        with pytest.raises(DriverError, match="client 1: no partitions"):
            await run.start()
        await run.close()

    asyncio.run(scenario())
    assert [driver.closed for driver in drivers] == [True, True, True]


def test_a_drain_held_by_a_rebalance_that_never_ends_says_so(tmp_path: Path) -> None:
    # A client in a rebalance hands over empty batches (nothing is idle while partitions are
    # moving), as the Kafka driver does; the broker never assigns them again.
    driver = GroupDriver(0, _share({0}))
    run = _receiver(tmp_path, [driver])

    async def scenario() -> tuple[bool, str]:
        await run.start()
        driver.share = _share(set(), rebalancing=True)
        loop = asyncio.get_running_loop()
        driver.deliver([])
        pulses = [loop.call_later(0.1 * k, driver.deliver, []) for k in range(1, 8)]
        drained = await run.drain(idle_s=0.3, timeout_s=0.6)
        for pulse in pulses:
            pulse.cancel()
        why = run.why_undrained(0.6)
        await run.close()
        return drained, why

    drained, why = asyncio.run(scenario())
    assert not drained
    assert why.startswith("its consumer group was still rebalancing after 0.6 s")


def test_a_drain_that_messages_kept_busy_says_still_receiving(tmp_path: Path) -> None:
    run = _receiver(tmp_path, [GroupDriver(0, _share({0}))])

    async def scenario() -> str:
        await run.start()
        why = run.why_undrained(30)
        await run.close()
        return why

    assert asyncio.run(scenario()) == "still receiving after 30 s"
