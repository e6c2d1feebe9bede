"""Rate files: one `eta,ata` row per message, delta-encoded integer microseconds, gzip, rotated.

Each file stands alone (Spark reads the rotated files in parallel):

    # maestro-rate v1 base_us=1700000000000000 role=sender peer=s1 test=t-1 part=0
    eta,ata
    120,161        <- row 0: microseconds after base_us
    1000,998       <- later rows: microseconds after the previous row's eta and ata

For a sender eta is the intended send time and ata the actual one; for a receiver eta is the
sender's intended time (from the message header) and ata the arrival. Files are flushed every
few seconds with a sync flush (the worker calls `flush()` with its live statistics, once a
second), so a killed worker leaves everything up to its last flush readable (`read_rate_file`
reads a file that was cut off).

Beside its rate files a writer leaves, when closed, their figures by whole second
(`<stem>-seconds.json`, a `RatePiece`): how many rows had their eta in second e and their ata in
second a, with the first and last ata. The summary merges these pieces, the way Locust's master
merges its workers' stats, instead of reading every row again; any warm-up cut on eta at a whole
second gives the same counts from the piece as from the rows. A worker killed before it closed
leaves no piece, and its rows are read instead.
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from protocol.atomic import write_text_atomically

__all__ = [
    "PIECE_SUFFIX",
    "RateFileWriter",
    "RatePiece",
    "RateSeconds",
    "arrivals_per_second",
    "decode_rate_file",
    "rate_columns",
    "rate_seconds",
    "read_rate_file",
    "whole_second_at_or_after",
]

_HEADER = "# maestro-rate v1 "
_ROWS_PER_WRITE = 4096  # rows encoded and handed to gzip at once
_ROW = "{},{}\n"  # eta delta, ata delta
PIECE_SUFFIX = "-seconds.json"
# A cell's key packs its eta second and how many seconds later its ata came: a receiver's ata
# may be before the sender's eta (clocks of two hosts), and more than 12 days either way is a
# clock that is wrong, clamped rather than let into the eta bits.
_OFFSET_BITS = 21
_OFFSET_HALF = 1 << (_OFFSET_BITS - 1)


class RateFileWriter:
    def __init__(
        self,
        directory: Path,
        stem: str,
        labels: dict[str, str],
        rows_per_file: int = 1_000_000,
        flush_every_s: float = 2.0,
    ) -> None:
        self.directory = directory
        self.stem = stem
        self.labels = labels
        self.rows_per_file = rows_per_file
        self.flush_every_s = flush_every_s
        self.paths: list[Path] = []
        self.rows = 0
        self._file: gzip.GzipFile | None = None
        self._rows_in_file = 0
        self._eta: array[int] = array("q")  # rows not yet written, absolute µs
        self._ata: array[int] = array("q")
        self._prev_eta = self._prev_ata = 0
        self._last_flush = time.monotonic()
        self._cells: Counter[int] = Counter()  # packed (eta second, ata offset) -> rows
        self._first_ata: int | None = None
        self._last_ata: int | None = None
        self._piece: Path | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, eta_us: int, ata_us: int) -> None:
        if self._file is None or self._rows_in_file >= self.rows_per_file:
            self._rotate(eta_us)
        # Two appends per message; deltas and text are made a column at a time in flush().
        self._eta.append(eta_us)
        self._ata.append(ata_us)
        self._rows_in_file += 1
        self.rows += 1
        if len(self._eta) >= _ROWS_PER_WRITE:
            self.flush()

    def write_many(self, eta_us: array[int] | np.ndarray, ata_us: array[int] | np.ndarray) -> None:
        """Rows taken a burst at a time (int64 columns): one extend per column."""
        if self._file is None or self._rows_in_file + len(eta_us) > self.rows_per_file:
            for eta, ata in zip(eta_us.tolist(), ata_us.tolist(), strict=True):  # a rotation inside: row by row
                self.write(eta, ata)
            return
        self._eta.frombytes(np.asarray(eta_us, dtype=np.int64).tobytes())
        self._ata.frombytes(np.asarray(ata_us, dtype=np.int64).tobytes())
        self._rows_in_file += len(eta_us)
        self.rows += len(eta_us)
        if len(self._eta) >= _ROWS_PER_WRITE:
            self.flush()

    def flush(self) -> None:
        """Write what is pending, and sync-flush when `flush_every_s` has passed since the last
        sync (the owner calls this about once a second: a crash loses at most that much)."""
        if self._file is None:
            return
        if self._eta:
            self._file.write(self._encode())
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self._sync()

    def _encode(self) -> bytes:
        """The pending rows as text, each `eta,ata` a delta from the row before: the same bytes
        as one f-string per row, made without a Python step per row."""
        eta = np.frombuffer(self._eta, dtype=np.int64)
        ata = np.frombuffer(self._ata, dtype=np.int64)
        deltas = np.empty(2 * len(eta), dtype=np.int64)
        deltas[0::2] = np.diff(eta, prepend=self._prev_eta)
        deltas[1::2] = np.diff(ata, prepend=self._prev_ata)
        self._prev_eta, self._prev_ata = int(eta[-1]), int(ata[-1])
        self._eta, self._ata = array("q"), array("q")
        self._count_seconds(eta, ata)
        # One format call over the interleaved deltas: ~220 ns a row, all of it in C.
        text = (_ROW * len(eta)).format(*deltas.tolist())
        return text.encode()

    def _count_seconds(self, eta: np.ndarray, ata: np.ndarray) -> None:
        """The piece's cells for these rows: a sort of one packed column, a few distinct keys."""
        eta_s = eta // 1_000_000
        offset = np.clip(ata // 1_000_000 - eta_s, -_OFFSET_HALF, _OFFSET_HALF - 1)
        keys, counts = np.unique((eta_s << _OFFSET_BITS) + offset + _OFFSET_HALF, return_counts=True)
        self._cells.update(dict(zip(keys.tolist(), counts.tolist(), strict=True)))
        low, high = int(ata.min()), int(ata.max())
        self._first_ata = low if self._first_ata is None else min(self._first_ata, low)
        self._last_ata = high if self._last_ata is None else max(self._last_ata, high)

    def names(self) -> list[str]:
        """The files written so far: the rate files, and their piece once closed."""
        return [p.name for p in self.paths] + ([self._piece.name] if self._piece else [])

    def _write_piece(self) -> None:
        cells = []
        for key, count in sorted(self._cells.items()):
            eta_s = key >> _OFFSET_BITS
            cells.append([eta_s, eta_s + (key & ((1 << _OFFSET_BITS) - 1)) - _OFFSET_HALF, count])
        piece = RatePiece([p.name for p in self.paths], self.rows, self._first_ata, self._last_ata, cells)
        path = self.directory / f"{self.stem}{PIECE_SUFFIX}"
        write_text_atomically(path, json.dumps(piece.__dict__, separators=(",", ":")))
        self._piece = path

    def _sync(self) -> None:
        assert self._file is not None
        self._file.flush(zlib.Z_SYNC_FLUSH)
        self._last_flush = time.monotonic()

    def _rotate(self, base_us: int) -> None:
        self.close()
        path = self.directory / f"{self.stem}-{len(self.paths):04d}.csv.gz"
        # Open across many writes and closed by close(): a with-block cannot span that.
        self._file = gzip.GzipFile(path, "wb", compresslevel=6)
        labels = " ".join(f"{k}={v}" for k, v in self.labels.items())
        self._file.write(f"{_HEADER}base_us={base_us} {labels} part={len(self.paths)}\neta,ata\n".encode())
        self.paths.append(path)
        self._rows_in_file = 0
        self._prev_eta = self._prev_ata = base_us

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None
            self._write_piece()


def read_rate_file(path: Path) -> Iterator[tuple[int, int]]:
    """Absolute (eta_us, ata_us) rows; a file cut off by a crash yields what was flushed."""
    return decode_rate_file(path.read_bytes(), str(path))


def _rows(data: bytes, name: str) -> tuple[int, str]:
    """The file's base time and the text of its whole rows: a row cut in half by a crash (the
    last piece, without its newline) is not a row."""
    text = _gunzip_tolerant(data).decode()
    header, _, rest = text.partition("\n")
    if not header.startswith(_HEADER):
        raise ValueError(f"{name}: not a Maestro rate file")
    fields = dict(part.split("=", 1) for part in header[len(_HEADER) :].split() if "=" in part)
    _, _, body = rest.partition("\n")  # the column names
    return int(fields["base_us"]), body[: body.rfind("\n") + 1]


def decode_rate_file(data: bytes, name: str = "rate file") -> Iterator[tuple[int, int]]:
    """The rows of a rate file's bytes (for readers that fetch the bytes themselves: Spark)."""
    base_us, body = _rows(data, name)
    eta = ata = base_us
    for line in body.splitlines():
        d_eta, d_ata = line.split(",", 1)
        eta += int(d_eta)
        ata += int(d_ata)
        yield eta, ata


@dataclass
class RateSeconds:
    """What the figures need of a rate file, read without a Python step per row (numpy parses,
    sums and counts in C: ~10 times a loop over the rows, and no per-row objects held)."""

    per_second: Counter[int] = field(default_factory=Counter)  # by second of `ata`, of rows with eta >= since_us
    first_ata_us: int | None = None
    last_ata_us: int | None = None
    rows: int = 0

    def add(self, other: RateSeconds) -> None:
        """Another file's (or peer's) into these."""
        self.per_second.update(other.per_second)
        self.rows += other.rows
        if other.first_ata_us is not None:
            mine = self.first_ata_us
            self.first_ata_us = other.first_ata_us if mine is None else min(mine, other.first_ata_us)
        if other.last_ata_us is not None:
            mine = self.last_ata_us
            self.last_ata_us = other.last_ata_us if mine is None else max(mine, other.last_ata_us)


def whole_second_at_or_after(us: int) -> int:
    """Where a cut at `us` falls for figures kept by whole second: the next whole second (µs)."""
    return -(-us // 1_000_000) * 1_000_000


@dataclass
class RatePiece:
    """A closed writer's rows by whole second: `cells` are [eta second, ata second, rows]."""

    files: list[str]  # the rate files it covers
    rows: int
    first_ata_us: int | None
    last_ata_us: int | None
    cells: list[list[int]]

    @classmethod
    def read(cls, path: Path) -> RatePiece:
        try:
            fields = json.loads(path.read_text())
            return cls(**{name: fields[name] for name in ("files", "rows", "first_ata_us", "last_ata_us", "cells")})
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a rate piece ({exc})") from exc

    def seconds(self, since_us: int = 0) -> RateSeconds:
        """The same figures as `rate_seconds` over the rows, for a cut at a whole second."""
        if since_us % 1_000_000:
            raise ValueError(f"a piece is cut at whole seconds only, not at {since_us} µs")
        per_second: Counter[int] = Counter()
        for eta_s, ata_s, count in self.cells:
            if eta_s * 1_000_000 >= since_us:
                per_second[ata_s] += count
        return RateSeconds(per_second, self.first_ata_us, self.last_ata_us, self.rows)


def rate_columns(data: bytes, name: str = "rate file") -> tuple[np.ndarray, np.ndarray]:
    """The rows as two columns, eta and ata (absolute µs, int64), parsed and summed in C."""
    base_us, body = _rows(data, name)
    if not body:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    values = np.fromstring(body[:-1].replace("\n", ","), dtype=np.int64, sep=",")
    if len(values) % 2:
        raise ValueError(f"{name}: a row without its two columns")
    return base_us + np.cumsum(values[0::2]), base_us + np.cumsum(values[1::2])


def rate_seconds(data: bytes, name: str = "rate file", since_us: int = 0) -> RateSeconds:
    """`since_us`: rows whose eta is before it (the warm-up) are left out of `per_second`."""
    eta, ata = rate_columns(data, name)
    if not len(ata):
        return RateSeconds()
    kept = ata[eta >= since_us] if since_us else ata
    per_second: Counter[int] = Counter()
    if len(kept):
        seconds = kept // 1_000_000
        first = int(seconds.min())
        counts = np.bincount(seconds - first)
        present = np.flatnonzero(counts)
        per_second.update(dict(zip((present + first).tolist(), counts[present].tolist(), strict=True)))
    return RateSeconds(per_second, int(ata.min()), int(ata.max()), len(ata))


def arrivals_per_second(data: bytes, name: str = "rate file") -> Counter[int]:
    """Rows per whole second of the `ata` column, for the reporter's per-second rates."""
    return rate_seconds(data, name).per_second


def _gunzip_tolerant(data: bytes) -> bytes:
    # Unlike gzip.decompress, a decompress object returns what it has when the stream stops short.
    inflated: bytes = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
    return inflated
