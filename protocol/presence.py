"""Whether the coordinator that started a peer's test is still there.

The coordinator publishes PEER_ONLINE on the `coordinator` topic whenever it (re)connects, and
its last will there when it vanishes. A peer whose coordinator left a will waits `GRACE_S` for it
to come back (counting only time this peer had the broker: a broker outage is not the
coordinator's loss), then stops its test's work and keeps its files for `maestro collect`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from protocol.bus import ControlBus
from protocol.codes import NoteType
from protocol.notes import AbnormalDisconnect, Note, PeerOnline

__all__ = ["GRACE_S", "CoordinatorWatch"]

log = logging.getLogger(__name__)

GRACE_S = 15.0


@dataclass
class CoordinatorWatch:
    bus: ControlBus
    grace_s: float = GRACE_S
    coordinator_id: str = ""  # who started the current test's work
    _gone: tuple[float, float] | None = None  # (monotonic, bus downtime) when its will came

    def started_by(self, coordinator_id: str) -> None:
        self.coordinator_id = coordinator_id
        self._gone = None

    def heard(self, note: Note) -> None:
        """A note on the coordinator topic, or any request: it tells whether the coordinator is there."""
        if not self.coordinator_id or note.header.sender_id != self.coordinator_id:
            return
        if isinstance(note, AbnormalDisconnect):
            self._gone = (time.monotonic(), self.bus.downtime_s())
            log.warning("the coordinator's last will came: waiting %g s (connected) for it to come back", self.grace_s)
        elif isinstance(note, PeerOnline) or note.TYPE == NoteType.REQUEST:
            if self._gone is not None:
                log.info("the coordinator is back (%s)", type(note).__name__)
            self._gone = None

    def lost(self) -> bool:
        """Its will came and it has not been back for `grace_s` of this peer's connected time;
        once True, the watch is over (until the next test)."""
        if self._gone is None:
            return False
        since, downtime = self._gone
        if (time.monotonic() - since) - (self.bus.downtime_s() - downtime) < self.grace_s:
            return False
        self._gone, self.coordinator_id = None, ""
        return True
