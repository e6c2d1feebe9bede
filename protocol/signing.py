"""Notes only from whom they should come: HMAC-SHA256 with a key shared by the coordinator and
the peers that opt in, read from a file.

Wire form of a signed note: the note's msgpack array `[type, command, header, payload]` with the
MAC as a fifth element (`bin 8`, 32 bytes). The MAC is over the unsigned note's exact bytes, so
checking it needs no re-encoding, and a peer without a key reads a signed note as any other.

A keyed receiver refuses a note that is
- unsigned, when it requires signatures (agents with a key do; so do workers and inspectors
  given one);
- signed with another key, or altered on the way;
- stamped more than `WINDOW_S` away from its own clock;
- one it has already taken: the same message id and timestamp. The coordinator re-stamps a
  request it asks again, so only a copy of a note has both.

Last wills are exempt from the window and the replay check: the broker publishes them when the
connection is lost, long after they were signed, and again after every later loss.
"""

from __future__ import annotations

import collections
import hmac
import time
from dataclasses import dataclass, field
from pathlib import Path

from protocol.notes import AbnormalDisconnect, Note
from protocol.secrets import read_secret_file

__all__ = ["MIN_KEY_BYTES", "WINDOW_S", "NoteGuard", "NoteKey", "RefusedNoteError", "sign", "split"]

MIN_KEY_BYTES = 16
# Lab hosts keep NTP time to well under a second; a minute leaves room for a slow broker.
WINDOW_S = 60.0
_MAC_BYTES = 32
_MAC_HEAD = b"\xc4\x20"  # msgpack bin 8 of 32 bytes
_UNSIGNED = 0x94  # msgpack fixarray of 4
_SIGNED = 0x95  # ... of 5


@dataclass(frozen=True)
class NoteKey:
    secret: bytes = field(repr=False)

    @classmethod
    def from_file(cls, path: Path) -> NoteKey:
        return cls(read_secret_file(path, "note key", MIN_KEY_BYTES))

    def mac(self, unsigned: bytes) -> bytes:
        return hmac.digest(self.secret, unsigned, "sha256")


def sign(unsigned: bytes, key: NoteKey) -> bytes:
    """An encoded note, signed."""
    if not unsigned or unsigned[0] != _UNSIGNED:
        raise ValueError("not an encoded note")
    return bytes([_SIGNED]) + unsigned[1:] + _MAC_HEAD + key.mac(unsigned)


def split(data: bytes | bytearray) -> tuple[bytes, bytes | None]:
    """The note's unsigned bytes and its MAC, None when it carries none."""
    data = bytes(data)
    tail = len(_MAC_HEAD) + _MAC_BYTES
    if len(data) > tail and data[0] == _SIGNED and data[-tail:-_MAC_BYTES] == _MAC_HEAD:
        return bytes([_UNSIGNED]) + data[1:-tail], data[-_MAC_BYTES:]
    return data, None


class RefusedNoteError(Exception):
    """A note the guard will not let through. `answer`: whether to tell the sender (with
    PROTOCOL_ERROR); a replay is only logged, as a duplicate that MQTT's at-least-once
    delivery can make is one too."""

    def __init__(self, reason: str, *, answer: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.answer = answer


class NoteGuard:
    """Checks incoming notes' signatures. Runs on the bus's network thread only."""

    def __init__(self, key: NoteKey | None, *, require: bool) -> None:
        if require and key is None:
            raise ValueError("requiring signed notes needs a key")
        self.key = key
        self.require = require
        # (message id, timestamp) of the notes taken in the last window, oldest first.
        self._seen: set[tuple[str, int]] = set()
        self._order: collections.deque[tuple[str, int]] = collections.deque()

    def check(self, note: Note, unsigned: bytes, mac: bytes | None) -> None:
        """Raises RefusedNoteError unless the note may be acted on."""
        if mac is None:
            if self.require:
                raise RefusedNoteError("unsigned note: this peer takes only notes signed with its key")
            return
        if self.key is None:
            return  # nothing to check it with: taken as an unsigned note would be
        if not hmac.compare_digest(mac, self.key.mac(unsigned)):
            raise RefusedNoteError("bad signature: the note was not signed with this peer's key, or was altered")
        if isinstance(note, AbnormalDisconnect):
            return
        now_ns = time.time_ns()
        skew_s = (now_ns - note.header.timestamp_ns) / 1e9
        if abs(skew_s) > WINDOW_S:
            raise RefusedNoteError(
                f"stale note: stamped {abs(skew_s):.0f} s {'before' if skew_s > 0 else 'after'} this peer's "
                f"clock reads (at most {WINDOW_S:g} s either way)"
            )
        self._forget_before(now_ns - int(2 * WINDOW_S * 1e9))
        seen = (note.header.message_id, note.header.timestamp_ns)
        if seen in self._seen:
            raise RefusedNoteError(f"replayed note {note.header.message_id}", answer=False)
        self._seen.add(seen)
        self._order.append(seen)

    def _forget_before(self, limit_ns: int) -> None:
        # Arrival order is nearly timestamp order; a note stamped earlier than one already
        # forgotten is outside the window anyway.
        while self._order and self._order[0][1] < limit_ns:
            self._seen.discard(self._order.popleft())
