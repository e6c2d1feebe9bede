"""The end of a phase's load: the senders still running stopped, the receivers drained, the
inspectors and agents stopped last (so they saw the drain too), and each peer's verdict taken.
What goes wrong goes into the phase's course (a failure or a note); the phase goes on to
collect the files whatever happened here."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.bus.client import MaestroClient
from coordinator.errors import PeerRequestError
from coordinator.registry import PeerInfo
from coordinator.running.cast import Cast
from coordinator.running.course import PhaseCourse
from protocol.notes import (
    DrainComplete,
    DrainRequest,
    Note,
    StopAgent,
    StopInspector,
    StopWorker,
    TestFailed,
    TestSucceeded,
)

__all__ = ["Ending"]

# How long a peer may take to give its verdict once stopped or drained.
_VERDICT_TIMEOUT_S = 30.0
_DRAIN_GRACE_S = 15.0  # past the receivers' own drain timeout, for their DrainComplete to come


@dataclass
class Ending:
    maestro: MaestroClient
    cast: Cast
    drain_timeout_s: float
    course: PhaseCourse  # the phase's

    def stop_and_drain(self) -> None:
        # Senders never started (the start failed before them) have nothing to stop or wait for.
        course = self.course
        running = [
            p
            for p in self.maestro.not_lost(self.cast.senders)
            if p.peer_id in course.started_senders and p.peer_id not in course.finished
        ]
        if running:
            self.maestro.request_all(StopWorker(), running)
            self.await_finish(running, _VERDICT_TIMEOUT_S)
        try:
            self._drain()
        finally:
            self._quietly(StopInspector(), self.maestro.not_lost(self.cast.inspector_peers))
            self._quietly(StopAgent(), self.maestro.not_lost(self.cast.agents))

    def await_finish(self, peers: list[PeerInfo], timeout_s: float) -> None:
        done = self.maestro.wait_for((TestSucceeded, TestFailed), peers, timeout_s)
        for peer_id, note in done.items():
            self.course.ended(peer_id)
            if isinstance(note, TestFailed):
                self.course.fail(f"{self.maestro.short_label(peer_id)}: {note.message}")

    def _drain(self) -> None:
        m, drain_s = self.maestro, self.drain_timeout_s
        draining = [p for p in m.not_lost(self.cast.receivers) if p.peer_id not in self.course.finished]
        try:
            # Each keeps receiving once drained, until all have: see DrainRequest.stop.
            m.request_all(DrainRequest(timeout_s=drain_s, stop=False), draining)
        except PeerRequestError as exc:  # one ended already (its failure is on record)
            self.course.note(str(exc))
            draining = [p for p in draining if p.peer_id in exc.complied]
        if not draining:
            return
        try:
            drained = m.wait_for((DrainComplete,), draining, timeout_s=drain_s + _DRAIN_GRACE_S)
        finally:  # whatever came of the wait: none of them is left receiving
            self._quietly(StopWorker(), m.not_lost(draining))
        for peer_id, note in drained.items():
            if isinstance(note, DrainComplete) and not note.success:
                self.course.fail(f"{m.short_label(peer_id)} did not drain: {note.message}")
        self.await_finish(draining, _VERDICT_TIMEOUT_S)

    def _quietly(self, note: Note, peers: list[PeerInfo]) -> None:
        try:
            self.maestro.request_all(note, peers)
        except PeerRequestError as exc:
            self.course.note(str(exc))
