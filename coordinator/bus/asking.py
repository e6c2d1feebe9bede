"""Asking peers over the control bus: requests out at once and every answer awaited, with the
silent peers asked again; PINGs, with the clock sample each answer gives."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from coordinator.registry import ClockSample, estimate_clock
from protocol.bus import ControlBus
from protocol.correlation import Replies
from protocol.notes import Note, PingRequest, PingResponse

__all__ = ["ASK_AGAIN_S", "Pong", "await_all", "ping"]

# A peer silent this long after a request is asked again (the same message id).
ASK_AGAIN_S = 2.0


def await_all(bus: ControlBus, sent: list[Note], timeout_s: float) -> list[Replies]:
    """Every answer to requests out at once. A peer still silent once answers stop coming in
    (none for `ASK_AGAIN_S`) is asked again by its own topic, until the timeout: an answer can
    be lost (a broker drops what it queues for one client beyond its limit), and a peer answers a
    repeat without acting on it again. While answers still flow, the rest are busy, not lost.
    Time without the broker does not count against the timeout: nobody could answer then."""
    started, down_at_start = time.monotonic(), bus.downtime_s()

    def deadline() -> float:
        return started + timeout_s + (bus.downtime_s() - down_at_start)

    heard = 0
    while True:
        step = min(deadline(), time.monotonic() + ASK_AGAIN_S)
        answered = [
            bus.await_replies(s.header.message_id, max(0.0, step - time.monotonic()), finish=False) for s in sent
        ]
        if all(r.complete for r in answered) or time.monotonic() >= deadline():
            break
        now_heard = sum(len(r.replies) for r in answered)
        if now_heard == heard and bus.connected:
            for request, replies in zip(sent, answered, strict=True):
                for peer_id in sorted(replies.missing):
                    bus.resend(bus.topics.by_id(peer_id), request)
        heard = now_heard
    for request in sent:
        bus.await_replies(request.header.message_id, 0)  # closed: a later answer is a stray
    return answered


@dataclass(frozen=True)
class Pong:
    note: PingResponse
    clock: ClockSample


def ping(
    bus: ControlBus, sends: Sequence[tuple[str, Iterable[str] | None]], timeout_s: float
) -> tuple[list[Replies], list[Pong]]:
    """One PING per (topic, expected peers or None for whoever answers), all out at once."""
    sent = []
    for topic, expect in sends:
        wall_ns, perf_ns = time.time_ns(), time.perf_counter_ns()
        sent.append((wall_ns, perf_ns, bus.send_request(topic, PingRequest(coordinator_time_ns=wall_ns), expect)))
    answered = await_all(bus, [stamped for _, _, stamped in sent], timeout_s)
    pongs = []
    for (wall_ns, perf_ns, _), replies in zip(sent, answered, strict=True):
        for peer_id, note in replies.replies.items():
            if isinstance(note, PingResponse):
                # An answer to a repeat has a long round trip, so a wide uncertainty: the best
                # sample of several is kept.
                rtt_ns = replies.received_ns[peer_id] - perf_ns
                pongs.append(Pong(note, estimate_clock(wall_ns, rtt_ns, note.peer_time_ns)))
    return answered, pongs
