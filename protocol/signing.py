"""Notes only from whom they should come, and only to whom they were sent: HMAC-SHA256 with a
key shared by the coordinator and the peers (a cluster key: `maestro keygen`), read from a file.

Wire form of a signed note: the note's msgpack array `[type, command, header, payload]` with a
fifth element, its seal `[test_id, mac]`. The MAC is over, in this order:

- the MQTT topic the note is published on: its recipient, a peer's own topic (by id or name)
  or a group's (everyone, the workers, a role, the coordinator, the notifications). A note
  captured on one peer's topic and published on another's does not verify there (#38: a signed
  order to agent a1 ran on agent a2);
- the test it belongs to (`test_id`, empty outside a test), which a peer running a test checks
  against its own for the orders that act on it;
- the unsigned note's exact bytes, and with them its header's timestamp and message id, a
  random 128-bit value that is the note's nonce.

A keyed receiver refuses a note that is
- unsigned, when it requires signatures (a keyed peer does, and so does a keyed coordinator);
- signed with another key, altered on the way, or published on another topic than signed for;
- stamped more than `WINDOW_S` from the receiver's clock, corrected by the sender's clock
  offset where it is measured (the coordinator measures each peer's; a peer reads the
  coordinator's from its signed PINGs), so a wrong clock does not widen the window;
- sealed for another test than the one it runs, for an order that acts on that test; a keyed
  coordinator, for a notification or statistics, refuses one sealed for no test as well
  (`NoteGuard.exact_test`): it keeps no record of the notes an earlier coordinator process took,
  so this is what refuses a copy of the previous run's;
- one it has already taken: the same message id and timestamp, also across a restart of the
  receiver (`SeenNotes`). The coordinator re-stamps a request it asks again, so only a copy of a
  note has both.

Last wills are exempt from the window and the replay check: the broker publishes them when the
connection is lost, long after they were signed, and again after every later loss.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from protocol.atomic import write_text_atomically
from protocol.codec import DEFAULT_MAX_NOTE_BYTES, seal, unseal
from protocol.notes import AbnormalDisconnect, Note
from protocol.secrets import read_secret_file

__all__ = [
    "MIN_KEY_BYTES",
    "WINDOW_S",
    "NoteGuard",
    "NoteKey",
    "RefusedNoteError",
    "Seal",
    "SeenNotes",
    "sign",
    "split",
    "write_new_key",
]

MIN_KEY_BYTES = 16
# Lab hosts keep NTP time to well under a second, and a measured offset corrects the rest; a
# minute leaves room for a note queued by its sender while the broker restarts.
WINDOW_S = 60.0
_MAC_BYTES = 32
_DOMAIN = b"maestro-note/2"  # what the MAC signs is a note of this form, and nothing else


@dataclass(frozen=True)
class NoteKey:
    secret: bytes = field(repr=False)

    @classmethod
    def from_file(cls, path: Path) -> NoteKey:
        return cls(read_secret_file(path, "note key", MIN_KEY_BYTES))

    def mac(self, unsigned: bytes, topic: str, test_id: str) -> bytes:
        # Lengths first: no topic and test id can be shifted into each other.
        t, i = topic.encode(), test_id.encode()
        head = struct.pack(">HH", len(t), len(i)) + t + i
        return self.tag(_DOMAIN, head + unsigned)

    def tag(self, domain: bytes, data: bytes) -> bytes:
        """HMAC-SHA256 of `data` as a thing of kind `domain` (a note, a clock probe, its answer):
        a tag made for one kind never verifies as another."""
        return hmac.digest(self.secret, domain + data, "sha256")


def write_new_key(path: Path) -> Path:
    """A new cluster key (32 random bytes, base64) in a new file of mode 600: `maestro keygen`
    and the ephemeral key of a one-machine run. An existing file is never overwritten: it may be
    the key a whole lab uses."""
    secret = base64.b64encode(secrets.token_bytes(32)) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secret)
    return path


@dataclass(frozen=True)
class Seal:
    test_id: str
    mac: bytes = field(repr=False)


def sign(unsigned: bytes, key: NoteKey, topic: str, test_id: str = "") -> bytes:
    """An encoded note, signed for `topic` and test `test_id`."""
    return seal(unsigned, [test_id, key.mac(unsigned, topic, test_id)])


def split(data: bytes | bytearray, max_bytes: int = DEFAULT_MAX_NOTE_BYTES) -> tuple[bytes, Seal | None]:
    """The note's unsigned bytes and its seal, None when it carries none (or none of this form)."""
    unsigned, extra = unseal(data, max_bytes)
    if extra is None:
        return unsigned, None
    match extra:
        case [str(test_id), bytes(mac)] if len(mac) == _MAC_BYTES:
            return unsigned, Seal(test_id, mac)
    return bytes(data), None  # decode refuses the 5-element array, naming it


class RefusedNoteError(Exception):
    """A note the guard will not let through. `answer`: whether to tell the sender (with
    PROTOCOL_ERROR); a replay is only logged, as a duplicate that MQTT's at-least-once
    delivery can make is one too."""

    def __init__(self, reason: str, *, answer: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.answer = answer


class SeenNotes:
    """The notes taken lately, by a digest of their message id and timestamp, oldest first; with a
    `path`, kept in that file too, so that a receiver restarted within the window still knows them.

    Why a file rather than a session key agreed at each start: a note to a group topic (every
    agent, every worker) has many recipients, and a per-boot key would need one MAC per
    recipient, or a handshake before the first note; one line per note taken is simpler, and
    covers every topic alike. The file is appended to and flushed per note: it must survive the
    process (a crash, a kill, a restart), which the OS's page cache does; a host that crashes
    comes back after more than the window has passed, and notes older than that are refused as
    stale anyway."""

    def __init__(self, path: Path | None, keep_s: float) -> None:
        self.keep_ns = int(keep_s * 1e9)
        self._seen: dict[str, int] = {}  # digest -> when taken (wall ns), in the order taken
        self._path = path
        self._lines = 0
        if path is not None:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._load(path)
            self._rewrite()

    def add(self, message_id: str, timestamp_ns: int, now_ns: int) -> bool:
        """False when that note was taken before; else remember it and say True."""
        self._forget(now_ns)
        digest = hashlib.sha256(f"{message_id}\0{timestamp_ns}".encode()).hexdigest()[:32]
        if digest in self._seen:
            return False
        self._seen[digest] = now_ns
        if self._path is not None:
            if self._lines > 2 * len(self._seen) + 256:
                self._rewrite()
            with self._path.open("a") as out:
                out.write(f"{now_ns} {digest}\n")
            self._lines += 1
        return True

    def __len__(self) -> int:
        return len(self._seen)

    def _forget(self, now_ns: int) -> None:
        while self._seen:
            oldest = next(iter(self._seen))
            if now_ns - self._seen[oldest] <= self.keep_ns:
                return
            del self._seen[oldest]

    def _load(self, path: Path) -> None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return
        now_ns = time.time_ns()
        for line in text.splitlines():
            taken, _, digest = line.partition(" ")
            if taken.isdigit() and len(digest) == 32 and now_ns - int(taken) <= self.keep_ns:
                self._seen[digest] = int(taken)

    def _rewrite(self) -> None:
        assert self._path is not None
        write_text_atomically(self._path, "".join(f"{t} {d}\n" for d, t in self._seen.items()))
        os.chmod(self._path, 0o600)
        self._lines = len(self._seen)


class NoteGuard:
    """Checks incoming notes' seals. Runs on the bus's network thread only.

    `offset_of(sender_id)`: the sender's clock minus ours in ns, where measured (else None);
    `bound_test(note)`: the test a note must be sealed for to be taken now, or None when any.
    `exact_test`: a note sealed for no test is bound too. A peer leaves it off (an order sealed
    for no test is a hand-driven session's); a coordinator sets it, as a peer seals every
    notification for the test it was given, and the coordinator has no record of the notes an
    earlier coordinator process took (#38: a fresh coordinator took the previous run's)."""

    def __init__(
        self,
        key: NoteKey | None,
        *,
        require: bool,
        seen_file: Path | None = None,
        offset_of: Callable[[str], int | None] | None = None,
        bound_test: Callable[[Note], str | None] | None = None,
    ) -> None:
        if require and key is None:
            raise ValueError("requiring signed notes needs a key")
        self.key = key
        self.require = require
        self.offset_of = offset_of or (lambda _sender: None)
        self.bound_test = bound_test or (lambda _note: None)
        self.exact_test = False
        # A note is taken only within WINDOW_S of its stamp, so one taken more than twice that
        # ago cannot pass again; twice more covers a sender's offset that changed meanwhile.
        self.seen = SeenNotes(seen_file if key is not None else None, keep_s=4 * WINDOW_S)

    def check(self, note: Note, unsigned: bytes, sealed: Seal | None, topic: str) -> None:
        """Raises RefusedNoteError unless the note may be acted on."""
        if sealed is None:
            if self.require:
                raise RefusedNoteError("unsigned note: this peer takes only notes signed with its key")
            return
        if self.key is None:
            return  # nothing to check it with: taken as an unsigned note would be
        if not hmac.compare_digest(sealed.mac, self.key.mac(unsigned, topic, sealed.test_id)):
            raise RefusedNoteError(
                f"bad signature: the note was not signed with this peer's key for {topic}, "
                "or was altered, or was sent to another recipient"
            )
        if isinstance(note, AbnormalDisconnect):
            return
        now_ns = time.time_ns()
        offset_ns = self.offset_of(note.header.sender_id)
        skew_s = (now_ns + (offset_ns or 0) - note.header.timestamp_ns) / 1e9
        if abs(skew_s) > WINDOW_S:
            clock = "this peer's clock corrected by the sender's measured offset" if offset_ns else "this peer's clock"
            raise RefusedNoteError(
                f"stale note: stamped {abs(skew_s):.0f} s {'before' if skew_s > 0 else 'after'} {clock} "
                f"reads (at most {WINDOW_S:g} s either way)"
            )
        bound = self.bound_test(note)
        if bound is not None and (sealed.test_id or self.exact_test) and sealed.test_id != bound:
            raise RefusedNoteError(
                f"{type(note).__name__} signed for test {sealed.test_id or '(none)'}; "
                f"this {'peer runs' if not self.exact_test else 'coordinator runs'} test {bound or '(none)'}"
            )
        if not self.seen.add(note.header.message_id, note.header.timestamp_ns, now_ns):
            raise RefusedNoteError(f"replayed note {note.header.message_id}", answer=False)
