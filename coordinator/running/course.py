"""The course of a phase: what happened to it so far, the one record its steps (the phase's own,
and its ending's) add to: why it fails and when that was learnt, its notes, the senders that
took their start and the peers whose run ended."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator.outcome.results import now_iso

__all__ = ["PhaseCourse"]

log = logging.getLogger(__name__)


@dataclass
class PhaseCourse:
    test_id: str
    reason: str | None = None  # the first failure: the phase's outcome says it
    failed_iso: str | None = None  # when the coordinator learnt it
    notes: list[str] = field(default_factory=list)
    started_senders: set[str] = field(default_factory=set)  # senders that took their StartWorker
    finished: set[str] = field(default_factory=set)  # peers whose run ended (success or failure)

    def fail(self, reason: str) -> None:
        """The phase fails, for the first reason given (what follows from it is not news)."""
        if self.reason is None:
            # Info, not error: the console says it as "stopping: ..." and the result with its
            # outcome; a timestamped ERROR line between progress lines said it a third time.
            log.info("test %s fails: %s", self.test_id, reason)
            self.reason = reason
            self.failed_iso = now_iso()

    def note(self, text: str) -> None:
        self.notes.append(text)

    def started(self, sender_ids: Iterable[str]) -> None:
        self.started_senders.update(sender_ids)

    def ended(self, peer_id: str) -> None:
        self.finished.add(peer_id)
