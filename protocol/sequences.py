"""Per-sender sequence accounting on the receiving side: what arrived once, twice, late.

Several receivers sharing one stream each see part of every sender's sequence; their bitsets,
saved with `dump_bitsets`, merge into the exact count of lost and duplicated messages
(`merge_bitsets`).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "MergedCounts",
    "SequenceCounts",
    "SequenceTracker",
    "bitsets_of",
    "dump_bitsets",
    "encode_bitset",
    "load_bitset",
    "merge_bitsets",
    "union_bitsets",
]


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


def _set_bits(bits: np.ndarray, sequences: np.ndarray) -> None:
    """Set the bits of distinct, ascending sequence numbers: packed a byte at a time where they
    lie close together (np.bitwise_or.at, which takes repeated bytes, is several times slower)."""
    low = int(sequences[0]) & ~7
    span = int(sequences[-1]) - low + 1
    if span > 64 * len(sequences):  # sparse: a dense run of bits would cost more than it saves
        np.bitwise_or.at(bits, sequences >> 3, np.left_shift(1, sequences & 7).astype(np.uint8))
        return
    dense = np.zeros(span, dtype=bool)
    dense[sequences - low] = True
    packed = np.packbits(dense, bitorder="little")
    bits[low >> 3 : (low >> 3) + len(packed)] |= packed


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

    def record_many(self, sequences: np.ndarray) -> np.ndarray:
        """Record a burst of arrivals (int64, in the order they came) at once: the same counts
        and bits as `record` one by one. Returns, per arrival, whether it was the first."""
        if not len(sequences):
            return np.zeros(0, dtype=bool)
        need = int(sequences.max()) // 8 + 1
        if need > len(self._seen):
            self._seen.extend(bytes(max(need - len(self._seen), len(self._seen))))
        bits = np.frombuffer(self._seen, dtype=np.uint8)  # a view: writes go to the bitset
        ascending = len(sequences) == 1 or bool((sequences[1:] > sequences[:-1]).all())
        if ascending and sequences[0] > self._highest:
            # The usual burst, one sender's run in order after what came before: all firsts, none
            # out of order; the general path's sort and ufunc.at cost 0.3 µs a message.
            _set_bits(bits, sequences)
            del bits
            self._highest = int(sequences[-1])
            self._received += len(sequences)
            return np.ones(len(sequences), dtype=bool)
        byte, mask = sequences >> 3, np.left_shift(1, sequences & 7).astype(np.uint8)
        if ascending:  # no repeats within the burst
            first = (bits[byte] & mask) == 0
            if first.any():
                _set_bits(bits, sequences[first])
        else:
            first = np.zeros(len(sequences), dtype=bool)
            first[np.unique(sequences, return_index=True)[1]] = True  # first in this burst...
            first &= (bits[byte] & mask) == 0  # ...and never seen before it
            np.bitwise_or.at(bits, byte[first], mask[first])
        del bits  # the bytearray may grow next time: no view of it may be left
        arrived = sequences[first]
        if len(arrived):
            # Out of order: below the highest sequence seen before it, as `record` counts.
            before = np.maximum.accumulate(np.concatenate(([self._highest], arrived)))[:-1]
            self._out_of_order += int((arrived < before).sum())
            self._highest = max(self._highest, int(arrived.max()))
        self._received += len(arrived)
        self._duplicates += len(sequences) - len(arrived)
        return first

    def counts(self) -> SequenceCounts:
        return SequenceCounts(self._received, self._duplicates, self._out_of_order, self._highest)

    @property
    def bitset(self) -> bytes:
        return bytes(self._seen)


def bitsets_of(trackers: Mapping[int, SequenceTracker]) -> dict[str, bytes]:
    """Sender key (16 hex digits) -> its tracker's bitset, as `receiver-sequences.json` keys them."""
    return {f"{key:016x}": t.bitset for key, t in trackers.items()}


def dump_bitsets(trackers: Mapping[int, SequenceTracker]) -> dict[str, str]:
    """Sender key (hex) -> the bitset, zlib-compressed and base64-encoded, for a JSON file."""
    return {key: encode_bitset(bits) for key, bits in bitsets_of(trackers).items()}


def encode_bitset(bits: bytes) -> str:
    """One bitset as `receiver-sequences.json` holds it (`load_bitset` reads it back)."""
    return base64.b64encode(zlib.compress(bits)).decode()


def load_bitset(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


@dataclass(frozen=True)
class MergedCounts:
    distinct: int  # sequence numbers received by at least one receiver
    duplicates: int  # deliveries beyond the first, within and across receivers

    def lost(self, sent: int) -> int:
        return sent - self.distinct


def union_bitsets(bitsets: Iterable[bytes]) -> bytes:
    """The sequence numbers seen by any of several receivers, as one bitset (byte i holds
    sequences 8i..8i+7, so a position-wise OR; big integers do it in C)."""
    parts = list(bitsets)
    length = max((len(bits) for bits in parts), default=0)
    union = 0
    for bits in parts:
        union |= int.from_bytes(bits, "little")
    return union.to_bytes(length, "little")


def merge_bitsets(bitsets: Iterable[bytes], deliveries: int) -> MergedCounts:
    """Merge one sender's bitsets from several receivers; `deliveries` is the sum of what they
    received including their own duplicates."""
    distinct = int.from_bytes(union_bitsets(bitsets), "little").bit_count()
    return MergedCounts(distinct=distinct, duplicates=deliveries - distinct)
