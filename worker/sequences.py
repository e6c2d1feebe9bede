"""Per-sender sequence accounting on the receiving side: what arrived once, twice, late."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SequenceCounts", "SequenceTracker"]


@dataclass(frozen=True)
class SequenceCounts:
    received: int  # distinct sequence numbers seen
    duplicates: int
    out_of_order: int  # arrived after a higher sequence number from the same sender
    highest: int  # -1 when nothing arrived

    def missing(self, sent: int | None = None) -> int:
        """Sequence numbers never received: below the highest seen, or below `sent` when known."""
        expected = sent if sent is not None else self.highest + 1
        return max(0, expected - self.received)


@dataclass
class SequenceTracker:
    """One bit per sequence number: exact for any order, 1.25 MB per 10 million messages."""

    _seen: bytearray = field(default_factory=bytearray)
    _received: int = 0
    _duplicates: int = 0
    _out_of_order: int = 0
    _highest: int = -1

    def record(self, sequence: int) -> bool:
        """Record one arrival; False when it is a duplicate."""
        byte, bit = divmod(sequence, 8)
        if byte >= len(self._seen):
            self._seen.extend(bytes(max(byte + 1 - len(self._seen), len(self._seen))))
        mask = 1 << bit
        if self._seen[byte] & mask:
            self._duplicates += 1
            return False
        self._seen[byte] |= mask
        self._received += 1
        if sequence < self._highest:
            self._out_of_order += 1
        else:
            self._highest = sequence
        return True

    def counts(self) -> SequenceCounts:
        return SequenceCounts(self._received, self._duplicates, self._out_of_order, self._highest)
