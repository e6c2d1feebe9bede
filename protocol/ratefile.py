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

import json
import time
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from protocol.atomic import write_text_atomically
from protocol.concurrency import SerialThread

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
    "rows_text",
    "whole_second_at_or_after",
]

_HEADER = "# maestro-rate v1 "
_ROWS_PER_WRITE = 4096  # rows encoded and handed to gzip at once
_ROW = "{},{}\n"  # `eta,ata\n`, deltas
PIECE_SUFFIX = "-seconds.json"
# A cell's key packs its eta second and how many seconds later its ata came: a receiver's ata
# may be before the sender's eta (clocks of two hosts), and more than 12 days either way is a
# clock that is wrong, clamped rather than let into the eta bits.
_OFFSET_BITS = 21
_OFFSET_HALF = 1 << (_OFFSET_BITS - 1)
# zlib's fastest level: every row a sender or receiver writes is compressed, on the cores the
# process and the broker share. A paced sender's rows took 288-321 ns each at level 6
# and 62-65 ns at level 1, for 0.94 bytes a row against 0.64; two unbounded MQTT sender processes
# went from 85,000-92,000 to 100,000 msg/s on 2 cores (bench/HISTORY.md).
_COMPRESS_LEVEL = 1


@dataclass
class _Encoder:
    """What a writer keeps on its caller's thread: the open file's gzip stream, the last row
    encoded (the next delta's origin), and the piece's cells. Rows become compressed bytes here,
    and only the bytes go to the disk thread: that thread, making text and compressing it
    itself, held the GIL in turns with the caller, and each hand-over of the GIL between them
    cost more than the work (a receiver's bursts of 1,000 Kafka-like messages: 476-515 ns a
    message with the work on the disk thread, 281-299 with it here; bench/HISTORY.md)."""

    compressor: Any = None  # a zlib compress object making the open file's gzip stream
    prev_eta: int = 0
    prev_ata: int = 0
    cells: Counter[int] = field(default_factory=Counter)  # packed (eta second, ata offset) -> rows
    first_ata: int | None = None
    last_ata: int | None = None

    def start(self, header: bytes, base_us: int) -> bytes:
        """A new file's first bytes: the gzip header, then the text's header (compressed)."""
        self.compressor = zlib.compressobj(_COMPRESS_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        self.prev_eta = self.prev_ata = base_us
        return bytes(self.compressor.compress(header))

    def rows(self, eta: np.ndarray, ata: np.ndarray) -> bytes:
        """Rows as compressed text, each `eta,ata` a delta from the row before: the bytes one
        f-string per row would make (`rows_text`). Arrow's CSV writer took 60-70 ns a row outside
        the GIL, but a worker that imported pyarrow sent 15-25 % less over MQTT with four clients
        (bench/HISTORY.md)."""
        deltas = np.empty(2 * len(eta), dtype=np.int64)
        deltas[0::2] = np.diff(eta, prepend=self.prev_eta)
        deltas[1::2] = np.diff(ata, prepend=self.prev_ata)
        self.prev_eta, self.prev_ata = int(eta[-1]), int(ata[-1])
        self._count_seconds(eta, ata)
        return bytes(self.compressor.compress(rows_text(deltas)))

    def sync(self) -> bytes:
        """What makes every row so far readable from the file (a sync flush of the stream)."""
        return bytes(self.compressor.flush(zlib.Z_SYNC_FLUSH))

    def finish(self) -> bytes:
        """The open file's last bytes: the end of its gzip stream."""
        data, self.compressor = self.compressor.flush(), None
        return bytes(data)

    def piece(self, files: list[str], rows: int) -> str:
        """The piece of the files closed so far (`files`, holding `rows`), as JSON."""
        cells = []
        for key, count in sorted(self.cells.items()):
            eta_s = key >> _OFFSET_BITS
            cells.append([eta_s, eta_s + (key & ((1 << _OFFSET_BITS) - 1)) - _OFFSET_HALF, count])
        piece = RatePiece(files, rows, self.first_ata, self.last_ata, cells)
        return json.dumps(piece.__dict__, separators=(",", ":"))

    def _count_seconds(self, eta: np.ndarray, ata: np.ndarray) -> None:
        """The piece's cells for these rows: one packed column, counted by runs of one key (rows
        come nearly in order, a few runs in thousands of rows), or sorted if the runs are many."""
        eta_s = eta // 1_000_000
        offset = np.clip(ata // 1_000_000 - eta_s, -_OFFSET_HALF, _OFFSET_HALF - 1)
        packed = (eta_s << _OFFSET_BITS) + offset + _OFFSET_HALF
        starts = np.flatnonzero(packed[1:] != packed[:-1]) + 1
        if len(starts) > len(packed) // 16:
            keys, counts = np.unique(packed, return_counts=True)
        else:
            bounds = np.concatenate(([0], starts, [len(packed)]))
            keys, counts = packed[bounds[:-1]], np.diff(bounds)
        cells = self.cells
        for key, count in zip(keys.tolist(), counts.tolist(), strict=True):  # runs may share a key
            cells[key] += count
        low, high = int(ata.min()), int(ata.max())
        self.first_ata = low if self.first_ata is None else min(self.first_ata, low)
        self.last_ata = high if self.last_ata is None else max(self.last_ata, high)


@dataclass
class _Disk:
    """What a writer keeps on its disk thread, and only there: the open file."""

    file: BinaryIO | None = None

    def open(self, path: Path, data: bytes) -> None:
        # Open across many writes and closed by close(): a with-block cannot span that.
        self.file = path.open("wb")
        self.file.write(data)

    def write(self, data: bytes) -> None:
        assert self.file is not None
        self.file.write(data)

    def sync(self, data: bytes) -> None:
        assert self.file is not None
        self.file.write(data)
        self.file.flush()

    def close(self, data: bytes) -> None:
        if self.file is not None:
            self.file.write(data)
            self.file.close()
            self.file = None


def rows_text(deltas: np.ndarray) -> bytes:
    """The rows' text, `eta,ata\n` each, of interleaved deltas (eta, ata, eta, ...): the bytes
    one `_ROW.format` call makes (~95 ns a row, holding the GIL). A fast sender's rows, and a
    burst's, are nearly all a digit each ("0,0"): those are made at once by numpy (~9 ns a row),
    and the few others (a burst's first) one by one between them."""
    eta, ata = deltas[0::2], deltas[1::2]
    others = np.flatnonzero((eta < 0) | (eta > 9) | (ata < 0) | (ata > 9))
    if len(others) > len(eta) // 16:  # a slower sender's: a row by row pass would cost more
        return (_ROW * len(eta)).format(*deltas.tolist()).encode()
    rows = np.empty((len(eta), 4), dtype=np.uint8)
    rows[:, 0] = eta  # the others' cells are garbage here, and skipped below
    rows[:, 2] = ata
    rows[:, (0, 2)] += ord("0")
    rows[:, 1] = ord(",")
    rows[:, 3] = ord("\n")
    fixed = rows.tobytes()
    parts, start = [], 0
    for row, eta_delta, ata_delta in zip(others.tolist(), eta[others].tolist(), ata[others].tolist(), strict=True):
        parts += [fixed[4 * start : 4 * row], _ROW.format(eta_delta, ata_delta).encode()]
        start = row + 1
    parts.append(fixed[4 * start :])
    return b"".join(parts)


class RateFileWriter:
    """Rows are taken on the caller's thread (the event loop) into two int64 columns; every
    `_ROWS_PER_WRITE` rows, and at `flush`, they become compressed text there (`_Encoder`, a
    column at a time: about 70 ns a row), and the bytes go to the writer's own disk thread,
    which writes them in order (`protocol.concurrency.SerialThread`): a slow disk never holds
    up the loop."""

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
        self._open = False  # a file is open (on the disk thread)
        self._rows_in_file = 0
        self._eta: array[int] = array("q")  # rows not yet encoded, absolute µs
        self._ata: array[int] = array("q")
        self._last_flush = time.monotonic()
        self._encoder = _Encoder()
        self._disk = _Disk()
        self._thread: SerialThread | None = None
        self._piece: Path | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, eta_us: int, ata_us: int) -> None:
        if not self._open or self._rows_in_file >= self.rows_per_file:
            self._rotate(eta_us)
        # Two appends per message; deltas and text are made a column at a time at flush.
        self._eta.append(eta_us)
        self._ata.append(ata_us)
        self._rows_in_file += 1
        self.rows += 1
        if len(self._eta) >= _ROWS_PER_WRITE:
            self.flush()

    def write_many(self, eta_us: array[int] | np.ndarray, ata_us: array[int] | np.ndarray) -> None:
        """Rows taken a burst at a time (int64 columns): one extend per column."""
        if not self._open or self._rows_in_file + len(eta_us) > self.rows_per_file:
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
        """Encode what is pending and hand its bytes to the disk thread, and a sync flush when
        `flush_every_s` has passed since the last (the owner calls this about once a second: a
        crash loses at most that much). `written` waits until it is on disk."""
        if not self._open:
            return
        thread = self._disk_thread()
        if self._eta:
            # Read in place; the next rows start new arrays (an array viewed cannot be cleared).
            eta, ata = np.frombuffer(self._eta, dtype=np.int64), np.frombuffer(self._ata, dtype=np.int64)
            self._eta, self._ata = array("q"), array("q")
            data = self._encoder.rows(eta, ata)
            if data:
                thread.submit(self._disk.write, data)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            thread.submit(self._disk.sync, self._encoder.sync())
            self._last_flush = time.monotonic()

    def written(self) -> None:
        """Wait until everything handed to the disk thread is on disk (a reader of a live file)."""
        if self._thread is not None:
            self._thread.wait()

    def names(self) -> list[str]:
        """The files written so far: the rate files, and their piece once closed."""
        return [p.name for p in self.paths] + ([self._piece.name] if self._piece else [])

    def _disk_thread(self) -> SerialThread:
        if self._thread is None:
            self._thread = SerialThread(f"rate-file-{self.stem}")
        return self._thread

    def _close_file(self, thread: SerialThread) -> None:
        """The open file closed on the disk thread, then the piece of every file so far: a
        writer killed after a rotation leaves one for the files it closed."""
        thread.submit(self._disk.close, self._encoder.finish())
        piece = self.directory / f"{self.stem}{PIECE_SUFFIX}"
        thread.submit(write_text_atomically, piece, self._encoder.piece([p.name for p in self.paths], self.rows))
        self._piece = piece

    def _rotate(self, base_us: int) -> None:
        if self._open:
            self.flush()  # the rows so far belong to the file before
            self._close_file(self._disk_thread())
        path = self.directory / f"{self.stem}-{len(self.paths):04d}.csv.gz"
        labels = " ".join(f"{k}={v}" for k, v in self.labels.items())
        header = f"{_HEADER}base_us={base_us} {labels} part={len(self.paths)}\neta,ata\n".encode()
        self._disk_thread().submit(self._disk.open, path, self._encoder.start(header, base_us))
        self.paths.append(path)
        self._open = True
        self._rows_in_file = 0

    def close(self) -> None:
        """Everything written and the file closed, then the piece beside it; a failure on the
        disk thread (a full disk) is raised here."""
        if not self._open:
            return
        thread = self._disk_thread()
        try:
            self.flush()
            self._close_file(thread)
        finally:
            self._open, self._thread = False, None
            thread.join()


def read_rate_file(path: Path) -> Iterator[tuple[int, int]]:
    """Absolute (eta_us, ata_us) rows; a file cut off by a crash yields what was flushed."""
    return decode_rate_file(path.read_bytes(), str(path))


def _rows(data: bytes, name: str) -> tuple[int, str]:
    """The file's base time and the text of its whole rows: a row cut in half by a crash (the
    last piece, without its newline) is not a row."""
    try:
        text = _gunzip_tolerant(data).decode()
    except (zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}: not a Maestro rate file (not gzip-compressed text: {exc})") from exc
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
