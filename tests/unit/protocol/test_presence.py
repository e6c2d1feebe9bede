"""A peer gives up on its coordinator only after its will and a grace of connected time."""

from __future__ import annotations

import time
from dataclasses import dataclass

from protocol.notes import AbnormalDisconnect, Header, PeerOnline, PingRequest
from protocol.presence import CoordinatorWatch


@dataclass
class _Bus:
    down_s: float = 0.0

    def downtime_s(self) -> float:
        return self.down_s


def _from(sender: str) -> Header:
    return Header(sender_id=sender)


def _watch(grace_s: float) -> tuple[CoordinatorWatch, _Bus]:
    bus = _Bus()
    watch = CoordinatorWatch(bus, grace_s=grace_s)  # type: ignore[arg-type]  # only downtime_s is used
    watch.started_by("c1")
    return watch, bus


def test_the_will_of_the_tests_coordinator_ends_it_after_the_grace() -> None:
    watch, _ = _watch(grace_s=0.05)
    watch.heard(AbnormalDisconnect(header=_from("c1")))
    assert not watch.lost()
    time.sleep(0.06)
    assert watch.lost()
    assert not watch.lost()  # once: the work is stopped, the watch is over


def test_it_coming_back_or_asking_anything_cancels_the_end() -> None:
    watch, _ = _watch(grace_s=0.05)
    watch.heard(AbnormalDisconnect(header=_from("c1")))
    watch.heard(PeerOnline(header=_from("c1")))
    time.sleep(0.06)
    assert not watch.lost()
    watch.heard(AbnormalDisconnect(header=_from("c1")))
    watch.heard(PingRequest(coordinator_time_ns=1, header=_from("c1")))
    time.sleep(0.06)
    assert not watch.lost()


def test_another_coordinators_will_is_not_ours() -> None:
    watch, _ = _watch(grace_s=0.0)
    watch.heard(AbnormalDisconnect(header=_from("someone-else")))
    assert not watch.lost()


def test_time_without_the_broker_does_not_count() -> None:
    watch, bus = _watch(grace_s=0.05)
    watch.heard(AbnormalDisconnect(header=_from("c1")))
    bus.down_s = 10.0  # the peer itself had no broker all along: it could not have heard anything
    time.sleep(0.06)
    assert not watch.lost()
